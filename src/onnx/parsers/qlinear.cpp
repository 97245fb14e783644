// Parsers for the quantized product family (MatMulInteger, QLinearMatMul,
// ConvInteger, QLinearConv; src/ops/qlinear.cpp). Canonical IR form: the
// opset-10 operators (QLinearMatMul-21 only widened its types), so parsing
// only rejects auto_pad values the convolution kernels do not implement.
#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_qconv(ir::Node& n, ParseContext&) {
  const std::string ap = n.s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") unsupported_attr(n, "auto_pad", ap);
}

}  // namespace

/// Registers the MatMulInteger / QLinearMatMul / ConvInteger / QLinearConv parsers.
void register_qlinear_parsers(ParserRegistry& r) {
  r.add({"", "MatMulInteger", 1, 1000, nullptr});
  r.add({"", "QLinearMatMul", 1, 1000, nullptr});
  r.add({"", "ConvInteger", 1, 1000, parse_qconv});
  r.add({"", "QLinearConv", 1, 1000, parse_qconv});
}

}  // namespace kiln::onnx_import

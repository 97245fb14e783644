// Parsers for the conv family (Conv, ConvTranspose). Canonical IR form: ONNX
// Conv-11 / ConvTranspose-11; earlier opsets have the same attributes, so
// parsing only rejects attribute values the kernels do not implement.
#include "onnx/parser.h"

namespace kiln::onnx_import {

namespace {

/// Rejects an auto_pad value outside NOTSET / SAME_UPPER / SAME_LOWER / VALID.
void parse_conv(ir::Node& n, ParseContext&) {
  const std::string ap = n.s("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") unsupported_attr(n, "auto_pad", ap);
}

}  // namespace

void register_conv_parsers(ParserRegistry& r) {
  r.add({"", "Conv", 1, 1000, parse_conv});
  r.add({"", "ConvTranspose", 1, 1000, parse_conv});
}

}  // namespace kiln::onnx_import

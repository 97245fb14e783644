// ONNX parsers for the loss family (src/ops/loss.cpp).
// NegativeLogLikelihoodLoss (12, 13, 22) and SoftmaxCrossEntropyLoss (12, 13)
// kept their inputs, outputs and attributes across versions (later versions
// only widened the dtypes), so the IR form is the ONNX form; the parser only
// checks that `reduction` is one the kernel knows.
#include <string>

#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

/// reduction in {none, sum, mean}.
void parse_loss(ir::Node& n, ParseContext&) {
  const std::string r = n.s("reduction", "mean");
  if (r != "none" && r != "sum" && r != "mean") unsupported_attr(n, "reduction", "'" + r + "'");
}

}  // namespace

/// Registers the loss parsers (both operators appeared in opset 12).
void register_loss_parsers(ParserRegistry& r) {
  r.add({"", "NegativeLogLikelihoodLoss", 12, 1000, parse_loss});
  r.add({"", "SoftmaxCrossEntropyLoss", 12, 1000, parse_loss});
}

}  // namespace kiln::onnx_import

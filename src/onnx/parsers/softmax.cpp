// ONNX parsers for Softmax, LogSoftmax and Hardmax (src/ops/softmax.cpp).
// Opsets < 13 give these operators a different meaning (the input coerced to
// 2-D at `axis`, default axis 1). The nodes are kept as they are and the
// kernel branches on node.opset; every target lowering these nodes must do
// the same (see src/ops/softmax.cpp). Nothing else needs normalising.
#include "onnx/parser.h"

namespace kiln::onnx_import {

/// Registers pass-through parsers for the softmax family.
void register_softmax_parsers(ParserRegistry& r) {
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) r.add({"", op, 1, 1000, nullptr});
}

}  // namespace kiln::onnx_import

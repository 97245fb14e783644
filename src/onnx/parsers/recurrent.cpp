// Parsers for the recurrent family (RNN, GRU, LSTM). Canonical IR form: the
// opset-14 operators. Older forms differ only by attributes the kernel
// treats the same way: `layout` appeared in opset 14 (absent means 0, the
// older behaviour) and opset 1's `output_sequence` only said whether Y was
// wanted, which the node's output list already says, so it is dropped.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {
namespace {

/// Checks direction and layout; drops opset-1 output_sequence.
void parse_recurrent(ir::Node& n, ParseContext&) {
  const std::string dir = n.s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") unsupported_attr(n, "direction", dir);
  const int64_t layout = n.i("layout", 0);
  if (layout != 0 && layout != 1) unsupported_attr(n, "layout", std::to_string(layout));
  n.attrs.erase("output_sequence");
}

}  // namespace

/// Registers the RNN / GRU / LSTM parsers.
void register_recurrent_parsers(ParserRegistry& r) {
  r.add({"", "RNN", 1, 1000, parse_recurrent});
  r.add({"", "GRU", 1, 1000, parse_recurrent});
  r.add({"", "LSTM", 1, 1000, parse_recurrent});
}

}  // namespace kiln::onnx_import

// ONNX parsers for Compress, Unique and ReverseSequence
// (src/ops/selection.cpp). Compress-9 and -11 differ only in allowing a
// negative axis (which the kernel normalises), Unique appeared in 11 and
// ReverseSequence in 10, both unchanged since: the IR form is the ONNX form.
#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_reverse_sequence(ir::Node& n, ParseContext&) {
  const int64_t b = n.i("batch_axis", 1), t = n.i("time_axis", 0);
  if (!((b == 0 && t == 1) || (b == 1 && t == 0)))
    unsupported_attr(n, "batch_axis/time_axis", std::to_string(b) + "/" + std::to_string(t));
}

}  // namespace

/// Registers the selection-family parsers.
void register_selection_parsers(ParserRegistry& r) {
  r.add({"", "Compress", 9, 1000, nullptr});
  r.add({"", "Unique", 11, 1000, nullptr});
  r.add({"", "ReverseSequence", 10, 1000, parse_reverse_sequence});
}

}  // namespace kiln::onnx_import

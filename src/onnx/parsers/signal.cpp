// ONNX parsers for the signal family (src/ops/signal.cpp). Canonical IR form:
// DFT-20 (axis as the optional third input), STFT-17, the windows and
// MelWeightMatrix-17.
// - DFT-17 carried `axis` as an attribute (default 1, counted over the
//   input's dims like opset 20's input, whose default is -2); it becomes a
//   rank-0 int64 constant input 2, always written since the defaults differ.
// - DFT: inverse=1 with onesided=1 is rejected (the kernel has no
//   complex-to-real inverse).
#include "onnx/parser.h"

namespace kiln::onnx_import {
namespace {

void parse_dft(ir::Node& n, ParseContext& ctx) {
  if (n.i("inverse", 0) != 0 && n.i("onesided", 0) != 0) unsupported_attr(n, "onesided", "1 with inverse=1");
  if (n.opset >= 20) return;
  Tensor axis(DType::i64, {});
  *axis.data<int64_t>() = n.i("axis", 1);
  if (n.inputs.size() < 3) n.inputs.resize(3, ir::kNoValue);
  n.inputs[2] = ctx.add_constant(n.name + "_axis", axis);
  n.attrs.erase("axis");
}

}  // namespace

/// Registers the signal-family parsers (all from opset 17).
void register_signal_parsers(ParserRegistry& r) {
  r.add({"", "DFT", 17, 1000, parse_dft});
  for (const char* op : {"STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"})
    r.add({"", op, 17, 1000, nullptr});
}

}  // namespace kiln::onnx_import

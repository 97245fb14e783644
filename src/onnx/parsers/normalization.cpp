// Parsers for the normalization family. Canonical IR form: BatchNormalization-15
// in inference mode (one output), InstanceNormalization-6, LayerNormalization-17,
// GroupNormalization-21 (the kernel also accepts opset 18's per-group
// scale/bias, told apart by their size) and LpNormalization-1.
#include "onnx/parser.h"
#include "support/error.h"

namespace kiln::onnx_import {

namespace {

/// BatchNormalization before opset 14 signalled training by listing the
/// running/saved statistics as outputs; from 14 by training_mode=1. Both are
/// rejected (inference only). Opset <= 8 attributes that only ever meant the
/// default behaviour (spatial=1, is_test, consumed_inputs) are dropped.
void parse_batch_norm(ir::Node& n, ParseContext&) {
  if (n.i("training_mode", 0) != 0) unsupported_attr(n, "training_mode", "1 (training)");
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != ir::kNoValue)
      fail(ErrorCode::unsupported,
           "{}: training-mode outputs (running/saved mean and variance) are not supported (opset {})", n.label(),
           n.opset);
  n.outputs.resize(1);
  if (n.i("spatial", 1) != 1) unsupported_attr(n, "spatial", std::to_string(n.i("spatial")));
  n.attrs.erase("spatial");
  n.attrs.erase("is_test");
  n.attrs.erase("consumed_inputs");
}

/// LpNormalization supports p = 1 and 2 only (as the spec).
void parse_lp_norm(ir::Node& n, ParseContext&) {
  const int64_t p = n.i("p", 2);
  if (p != 1 && p != 2) unsupported_attr(n, "p", std::to_string(p));
}

/// LayerNormalization: Mean/InvStdDev as float or double only.
void parse_layer_norm(ir::Node& n, ParseContext&) {
  const int64_t s = n.i("stash_type", 1);
  if (s != 1 && s != 11) unsupported_attr(n, "stash_type", std::to_string(s));
}

}  // namespace

void register_normalization_parsers(ParserRegistry& r) {
  r.add({"", "BatchNormalization", 1, 1000, parse_batch_norm});
  r.add({"", "InstanceNormalization", 1, 1000, nullptr});
  r.add({"", "LayerNormalization", 17, 1000, parse_layer_norm});
  r.add({"", "GroupNormalization", 18, 1000, nullptr});
  r.add({"", "LpNormalization", 1, 1000, parse_lp_norm});
}

}  // namespace kiln::onnx_import

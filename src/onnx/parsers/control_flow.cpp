// ONNX parsers for control flow (src/ops/control_flow.cpp): If, Loop, Scan.
// Nothing is renamed; the parsers check that the body graphs exist and that
// their input/output counts fit the node, so a malformed model fails at import
// with the node's name rather than in the middle of a run.
#include "onnx/parser.h"

#include "support/error.h"

namespace kiln::onnx_import {
namespace {

void parse_if(ir::Node& n, ParseContext&) {
  for (const char* b : {"then_branch", "else_branch"}) {
    const ir::Graph& g = n.graph(b);
    if (g.outputs.size() != n.outputs.size())
      fail(ErrorCode::invalid_model, "{}: {} has {} outputs, the node has {}", n.label(), b, g.outputs.size(),
           n.outputs.size());
  }
}

/// Loop: node (M, cond, v...) -> (v..., scans...); body (iter, cond, v...) -> (cond, v..., scans...).
void parse_loop(ir::Node& n, ParseContext&) {
  const ir::Graph& g = n.graph("body");
  size_t carried = n.inputs.size() > 2 ? n.inputs.size() - 2 : 0;
  if (g.inputs.size() != 2 + carried || g.outputs.size() != 1 + n.outputs.size() || n.outputs.size() < carried)
    fail(ErrorCode::invalid_model,
         "{}: body has {} inputs and {} outputs; with {} loop-carried values and {} node outputs it needs {} and {}",
         n.label(), g.inputs.size(), g.outputs.size(), carried, n.outputs.size(), 2 + carried, 1 + n.outputs.size());
}

/// Scan-9+: node (state..., scan inputs...) -> (state..., scan outputs...); the body maps the same counts.
void parse_scan(ir::Node& n, ParseContext&) {
  const ir::Graph& g = n.graph("body");
  int64_t m = n.i("num_scan_inputs");
  if (m < 1 || static_cast<size_t>(m) > n.inputs.size())
    fail(ErrorCode::invalid_model, "{}: num_scan_inputs = {} with {} inputs", n.label(), m, n.inputs.size());
  if (g.inputs.size() != n.inputs.size() || g.outputs.size() != n.outputs.size())
    fail(ErrorCode::invalid_model, "{}: body has {} inputs and {} outputs, the node {} and {}", n.label(),
         g.inputs.size(), g.outputs.size(), n.inputs.size(), n.outputs.size());
}

}  // namespace

void register_control_flow_parsers(ParserRegistry& r) {
  r.add({"", "If", 1, 1000, parse_if});
  r.add({"", "Loop", 1, 1000, parse_loop});
  r.add({"", "Scan", 9, 1000, parse_scan});  // Scan-8 had a batch axis and sequence_lens
}

}  // namespace kiln::onnx_import

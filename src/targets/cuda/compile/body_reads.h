// Values a control-flow node (If / Loop / Scan) reads inside its bodies.
// ONNX subgraphs read outer values by name (in kiln's IR: by the id of the
// shared value table) without listing them as the node's inputs, so a pass
// that changes an outer value's dtype or layout must also look there: the
// precision pass (precision.cpp) and host fallback's float32 islands
// (host_precision.cpp) retarget such reads, the layout pass (layout_nhwc.cpp)
// keeps NCHW copies of the values they read.
#pragma once
#include <utility>

#include "ir/graph.h"

namespace kiln::targets::cuda {

/// Gives `n` its own copies of its subgraphs (and theirs): a Model's copies
/// share their If / Loop bodies (shared_ptr), so rewriting n's in place
/// would rewrite them for every other copy (ir::deep_copy, on a model of n
/// alone). Call before changing what a body reads.
inline void own_subgraphs(ir::Node& n) {
  ir::Model alone;
  alone.main.nodes.push_back(std::move(n));
  n = std::move(ir::deep_copy(alone).main.nodes.front());
}

/// Calls f(v) (v an ir::ValueId&, which f may change) for each value node
/// `n` reads in its subgraphs, nested ones included: their nodes' inputs and
/// their outputs (a body may output an outer value as it is). Values the
/// bodies make themselves are among them; a caller tells the outer ones
/// apart by what it knows of them. Possibly repeated.
template <class F>
void for_each_body_read(ir::Node& n, F&& f) {
  for (auto& [k, a] : n.attrs)
    if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
      ir::for_each_graph(**sg, [&](ir::Graph& g) {
        for (auto& inner : g.nodes)
          for (auto& v : inner.inputs)
            if (v != ir::kNoValue) f(v);
        for (auto& v : g.outputs)
          if (v != ir::kNoValue) f(v);
      });
}

/// for_each_body_read of a node that is not to change: f(v) gets each
/// value as a const reference.
template <class F>
void for_each_body_read(const ir::Node& n, F&& f) {
  // The bodies are shared_ptr<Graph>: reachable as non-const from a const
  // node; f sees const ids, so nothing is changed through them.
  for_each_body_read(const_cast<ir::Node&>(n), [&](ir::ValueId& v) { f(static_cast<const ir::ValueId&>(v)); });
}

/// Whether `n` is an ONNX If, Loop or Scan (a node with bodies that the
/// cuda target runs as a conditional node of its CUDA graph).
inline bool is_control_flow(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan");
}

}  // namespace kiln::targets::cuda

// Small graph-editing helpers shared by the rewriting passes.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

/// Makes every reader of `from` in g and its subgraphs (node inputs, subgraph
/// outputs; g's own outputs only when `outputs` is true) read `to` instead.
void replace_uses(ir::Graph& g, ir::ValueId from, ir::ValueId to, bool outputs = false);

/// Number of node inputs (g and its subgraphs) reading each value, plus one
/// per appearance among g's outputs or a subgraph's outputs.
std::vector<int> use_counts(const ir::Graph& g, size_t nvalues);

/// The scalar value of a constant with one element of a float or integer
/// dtype, as double; false when v is not such a constant.
bool scalar_constant(const ir::Model& m, ir::ValueId v, double& out);

/// Index in g.nodes of the node producing each value (-1: none in g: a graph
/// input, a constant, or a value of another graph).
std::vector<int> producer_indices(const ir::Graph& g, size_t nvalues);

/// True for a node of the default ONNX domain ("" or "ai.onnx") with this op_type.
inline bool is_onnx_op(const ir::Node& n, const char* op) {
  return (n.domain.empty() || n.domain == "ai.onnx") && n.op_type == op;
}

/// The dims of a float32 value with a static shape; nullopt for another
/// dtype, an unknown or symbolic shape, or kNoValue.
std::optional<std::vector<int64_t>> static_f32_dims(const ir::Model& m, ir::ValueId v);

/// Replaces, in order, each node of g for which `rewrite` returns nodes by
/// those nodes (an empty result keeps the node). Returns the number of nodes
/// replaced. For the passes that expand one node into several.
int replace_nodes(ir::Graph& g, const std::function<std::vector<ir::Node>(const ir::Node&)>& rewrite);

/// Makes the values and nodes a rewriting pass adds: each named "<prefix><tag>",
/// nodes with the given opset. Values are added to the model at once.
class NodeMaker {
 public:
  NodeMaker(ir::Model& m, std::string prefix, int opset) : m_(&m), prefix_(std::move(prefix)), opset_(opset) {}
  /// A float32 value of static `dims`, computed by a node the caller makes.
  ir::ValueId temp(const std::vector<int64_t>& dims, const std::string& tag) const;
  /// A constant value holding `t`.
  ir::ValueId constant(Tensor t, const std::string& tag) const;
  /// A constant int64 vector (shapes, pads, starts / ends, axes).
  ir::ValueId ints(const std::vector<int64_t>& v, const std::string& tag) const;
  /// A default-domain node `op` from `in` to `out`.
  ir::Node node(const char* op, std::vector<ir::ValueId> in, ir::ValueId out, const std::string& tag) const;

 private:
  ir::Model* m_;
  std::string prefix_;
  int opset_;
};

/// Runs `run(g)` (returning a count) on every subgraph of g's nodes, deepest
/// first, then on g itself; returns the sum. For the pattern passes, which
/// rewrite each graph on its own.
template <typename Run>
int sum_over_graphs(ir::Graph& g, Run&& run) {
  int n = 0;
  for (auto& node : g.nodes)
    for (auto& [k, a] : node.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) n += sum_over_graphs(**sg, run);
  return n + run(g);
}

}  // namespace kiln::passes

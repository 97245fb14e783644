// Small graph-editing helpers shared by the rewriting passes.
#pragma once
#include <memory>
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

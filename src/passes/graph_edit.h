// Small graph-editing helpers shared by the rewriting passes.
#pragma once
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

}  // namespace kiln::passes

#include "passes/graph_edit.h"

#include <algorithm>

namespace kiln::passes {

void replace_uses(ir::Graph& g, ir::ValueId from, ir::ValueId to, bool outputs) {
  for (auto& n : g.nodes) {
    std::replace(n.inputs.begin(), n.inputs.end(), from, to);
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) replace_uses(**sg, from, to, /*outputs=*/true);
  }
  if (outputs) std::replace(g.outputs.begin(), g.outputs.end(), from, to);
}

namespace {
void count(const ir::Graph& g, std::vector<int>& c) {
  for (auto& n : g.nodes) {
    for (auto id : n.inputs)
      if (id != ir::kNoValue && static_cast<size_t>(id) < c.size()) ++c[id];
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) count(**sg, c);
  }
  for (auto id : g.outputs)
    if (static_cast<size_t>(id) < c.size()) ++c[id];
}
}  // namespace

std::vector<int> use_counts(const ir::Graph& g, size_t nvalues) {
  std::vector<int> c(nvalues, 0);
  count(g, c);
  return c;
}

bool scalar_constant(const ir::Model& m, ir::ValueId v, double& out) {
  if (v == ir::kNoValue || !m.value(v).constant) return false;
  const Tensor& t = *m.value(v).constant;
  if (t.numel() != 1) return false;
  switch (t.dtype()) {
    case DType::f32: out = t.data<float>()[0]; return true;
    case DType::f64: out = t.data<double>()[0]; return true;
    case DType::i64: out = static_cast<double>(t.data<int64_t>()[0]); return true;
    case DType::i32: out = t.data<int32_t>()[0]; return true;
    default: return false;
  }
}

std::vector<int> producer_indices(const ir::Graph& g, size_t nvalues) {
  std::vector<int> p(nvalues, -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (auto id : g.nodes[i].outputs)
      if (id != ir::kNoValue) p[id] = static_cast<int>(i);
  return p;
}

}  // namespace kiln::passes

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

std::optional<std::vector<int64_t>> static_f32_dims(const ir::Model& m, ir::ValueId v) {
  if (v == ir::kNoValue) return std::nullopt;
  const ir::Value& val = m.value(v);
  if (val.dtype != DType::f32 || !val.shape || !ir::is_static(*val.shape)) return std::nullopt;
  return ir::to_sizes(*val.shape);
}

int replace_nodes(ir::Graph& g, const std::function<std::vector<ir::Node>(const ir::Node&)>& rewrite) {
  int count = 0;
  std::vector<ir::Node> nodes;
  nodes.reserve(g.nodes.size());
  for (auto& n : g.nodes) {
    std::vector<ir::Node> rep = rewrite(n);
    if (rep.empty()) {
      nodes.push_back(std::move(n));
      continue;
    }
    ++count;
    for (auto& r : rep) nodes.push_back(std::move(r));
  }
  g.nodes = std::move(nodes);
  return count;
}

ir::ValueId NodeMaker::temp(const std::vector<int64_t>& dims, const std::string& tag) const {
  ir::Value v;
  v.name = prefix_ + tag;
  v.dtype = DType::f32;
  v.shape = ir::static_shape(dims);
  return m_->add_value(std::move(v));
}

ir::ValueId NodeMaker::constant(Tensor t, const std::string& tag) const {
  ir::Value v;
  v.name = prefix_ + tag;
  v.dtype = t.dtype();
  v.shape = ir::static_shape(t.shape());
  v.constant = std::move(t);
  return m_->add_value(std::move(v));
}

ir::ValueId NodeMaker::ints(const std::vector<int64_t>& v, const std::string& tag) const {
  Tensor t(DType::i64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return constant(std::move(t), tag);
}

ir::Node NodeMaker::node(const char* op, std::vector<ir::ValueId> in, ir::ValueId out, const std::string& tag) const {
  ir::Node r;
  r.op_type = op;
  r.name = prefix_ + tag;
  r.opset = opset_;
  r.inputs = std::move(in);
  r.outputs = {out};
  return r;
}

}  // namespace kiln::passes

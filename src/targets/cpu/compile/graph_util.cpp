// Graph helpers of the cpu lowering passes.
#include <algorithm>

#include "support/error.h"
#include "targets/cpu/compile/lowering.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {
void subgraph_reads(const ir::Graph& g, std::vector<ir::ValueId>& out) {
  for (auto& n : g.nodes) {
    for (auto id : n.inputs)
      if (id != ir::kNoValue) out.push_back(id);
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) subgraph_reads(**sg, out);
  }
  for (auto id : g.outputs) out.push_back(id);
}
}  // namespace

std::vector<std::vector<Use>> uses_of(const ir::Graph& g, size_t nvalues) {
  std::vector<std::vector<Use>> u(nvalues);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const ir::Node& n = g.nodes[i];
    for (int k = 0; k < static_cast<int>(n.inputs.size()); ++k)
      if (n.inputs[k] != ir::kNoValue) u[n.inputs[k]].push_back({i, k});
    std::vector<ir::ValueId> inner;
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) subgraph_reads(**sg, inner);
    std::sort(inner.begin(), inner.end());
    inner.erase(std::unique(inner.begin(), inner.end()), inner.end());
    for (auto id : inner)
      if (static_cast<size_t>(id) < nvalues) u[id].push_back({i, -1});
  }
  return u;
}

std::vector<int> producers_of(const ir::Graph& g, size_t nvalues) {
  std::vector<int> p(nvalues, -1);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    for (auto id : g.nodes[i].outputs)
      if (id != ir::kNoValue) p[id] = i;
  return p;
}

bool is_output(const ir::Graph& g, ir::ValueId v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

std::optional<std::vector<int64_t>> static_dims(const ir::Model& m, ir::ValueId v) {
  if (v == ir::kNoValue) return std::nullopt;
  const ir::Value& val = m.value(v);
  if (!val.shape || !ir::is_static(*val.shape)) return std::nullopt;
  return ir::to_sizes(*val.shape);
}

bool is_static_f32(const ir::Model& m, ir::ValueId v) {
  return v != ir::kNoValue && m.value(v).dtype == DType::f32 && static_dims(m, v).has_value();
}

const Tensor* constant_of(const ir::Model& m, ir::ValueId v) {
  if (v == ir::kNoValue) return nullptr;
  const auto& c = m.value(v).constant;
  return c ? &*c : nullptr;
}

Tensor reorder_constant(const Tensor& t, const md_t& from, const md_t& to) {
  Tensor out(DType::f32, {static_cast<int64_t>(md_bytes(to) / 4)});
  dnnl::memory src = wrap(from, t.raw()), dst = wrap(to, out.raw());
  dnnl::reorder(src, dst).execute(stream(), src, dst);
  stream().wait();
  return out;
}

ir::ValueId add_value(ir::Model& m, const std::string& name, DType dt, const std::vector<int64_t>& shape) {
  ir::Value v;
  v.name = name;
  v.dtype = dt;
  v.shape = ir::static_shape(shape);
  return m.add_value(std::move(v));
}

ir::Node cpu_node(const ir::Node& from, const std::string& op) {
  ir::Node n;
  n.op_type = op;
  n.domain = std::string(kCpuDomain);
  n.name = from.name;
  n.opset = from.opset;
  write_post_ops(n, {});
  return n;
}

bool is_cpu(const ir::Node& n, const std::string& op) {
  return n.domain == kCpuDomain && (op.empty() || n.op_type == op);
}

bool is_onnx(const ir::Node& n, const std::string& op) {
  return (n.domain.empty() || n.domain == "ai.onnx") && n.op_type == op;
}

std::optional<std::string> primitive_impl(const ir::Node& n) {
  try {
    if (n.op_type == "Conv") return conv_pd(n).impl_info_str();
    if (n.op_type == "MatMul") return matmul_pd(n).impl_info_str();
    if (n.op_type == "Pool") return pool_pd(n).impl_info_str();
    if (n.op_type == "Eltwise") return eltwise_pd(n).impl_info_str();
    if (n.op_type == "Binary") return binary_pd(n).impl_info_str();
    if (n.op_type == "Softmax") return softmax_pd(n).impl_info_str();
    if (n.op_type == "LayerNorm") return layernorm_pd(n).impl_info_str();
    if (n.op_type == "Reorder") return reorder_pd(n).impl_info_str();
    if (n.op_type == "Resample") return resample_pd(n).impl_info_str();
    return std::string("unchecked");
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool primitive_ok(const ir::Node& n) {
  auto impl = primitive_impl(n);
  // oneDNN 2.6's reference implementations get some post-op chains wrong
  // (seen with eltwise); a fused node must run an optimised kernel.
  return impl && !(!read_post_ops(n).empty() && impl->rfind("ref", 0) == 0);
}

bool fast_primitive(const ir::Node& n) {
  auto impl = primitive_impl(n);
  return impl && impl->rfind("ref", 0) != 0;
}

md_t any_md(const dims_t& dims) { return md_t(dims, dnnl::memory::data_type::f32, tag::any); }

}  // namespace kiln::targets::cpu

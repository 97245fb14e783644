// ONNX MatMul / Gemm -> kiln.cpu.MatMul. A constant right operand whose batch
// dims are all 1 becomes 2-D weights with a layout oneDNN picks (packed by
// pack_weights), the left operand's batch dims folded into M.
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

int64_t product(const std::vector<int64_t>& d, size_t b = 0, size_t e = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = b; i < std::min(e, d.size()); ++i) p *= d[i];
  return p;
}

/// A new constant holding s * t (f32).
ir::ValueId scaled_constant(ir::Model& m, ir::ValueId v, float s) {
  const Tensor& t = *constant_of(m, v);
  Tensor out(DType::f32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) out.data<float>()[i] = s * t.data<float>()[i];
  ir::ValueId id = add_value(m, m.value(v).name + ".scaled", DType::f32, t.shape());
  m.value(id).constant = out;
  return id;
}

std::optional<std::vector<ir::Node>> lower_onnx_matmul(ir::Model& m, const ir::Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId a = n.inputs[0], b = n.inputs[1], y = n.outputs[0];
  if (!is_static_f32(m, a) || !is_static_f32(m, b) || !is_static_f32(m, y)) return std::nullopt;
  auto ad = *static_dims(m, a), bd = *static_dims(m, b), yd = *static_dims(m, y);
  if (ad.empty() || bd.empty()) return std::nullopt;
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  size_t r = std::max(ad.size(), bd.size());
  while (ad.size() < r) ad.insert(ad.begin(), 1);
  while (bd.size() < r) bd.insert(bd.begin(), 1);
  int64_t M = ad[r - 2], K = ad[r - 1], N = bd[r - 1];
  if (bd[r - 2] != K) return std::nullopt;
  dims_t dd(r);
  for (size_t i = 0; i + 2 < r; ++i) dd[i] = std::max(ad[i], bd[i]);
  dd[r - 2] = M;
  dd[r - 1] = N;
  if (product(dd) != product(yd)) return std::nullopt;
  ir::Node c = cpu_node(n, "MatMul");
  c.inputs = {a, b};
  c.outputs = {y};
  bool weights_2d = constant_of(m, b) && product(bd, 0, r - 2) == 1;
  if (weights_2d) {
    int64_t rows = product(ad, 0, r - 1);
    set_md_attr(c, "md.src", plain_md({rows, K}));
    set_md_attr(c, "md.wei", any_md({K, N}));
    set_md_attr(c, "md.wei_src", plain_md({K, N}));
    set_md_attr(c, "md.dst", plain_md({rows, N}));
    // A broadcast left operand cannot fold its batch into M.
    if (rows * N != product(yd)) return std::nullopt;
  } else {
    set_md_attr(c, "md.src", plain_md(dims_t(ad.begin(), ad.end())));
    set_md_attr(c, "md.wei", plain_md(dims_t(bd.begin(), bd.end())));
    set_md_attr(c, "md.dst", plain_md(dd));
  }
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

std::optional<std::vector<ir::Node>> lower_gemm(ir::Model& m, const ir::Node& n) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId a = n.inputs[0], b = n.inputs[1], cin = n.inputs.size() > 2 ? n.inputs[2] : ir::kNoValue;
  ir::ValueId y = n.outputs[0];
  if (!is_static_f32(m, a) || !is_static_f32(m, b) || !is_static_f32(m, y)) return std::nullopt;
  auto ad = *static_dims(m, a), bd = *static_dims(m, b), yd = *static_dims(m, y);
  if (ad.size() != 2 || bd.size() != 2 || yd.size() != 2) return std::nullopt;
  bool ta = n.i("transA", 0) != 0, tb = n.i("transB", 0) != 0;
  float alpha = n.f("alpha", 1.f), beta = n.f("beta", 1.f);
  int64_t M = ta ? ad[1] : ad[0], K = ta ? ad[0] : ad[1], N = tb ? bd[0] : bd[1];
  if ((tb ? bd[1] : bd[0]) != K || yd[0] != M || yd[1] != N) return std::nullopt;
  ir::Node c = cpu_node(n, "MatMul");
  c.outputs = {y};
  md_t src = ta ? md_t({M, K}, dnnl::memory::data_type::f32, dims_t{1, M}) : plain_md({M, K});
  md_t wsrc = tb ? md_t({K, N}, dnnl::memory::data_type::f32, dims_t{1, K}) : plain_md({K, N});
  set_md_attr(c, "md.src", src);
  set_md_attr(c, "md.dst", plain_md({M, N}));
  if (constant_of(m, b)) {
    if (alpha != 1.f) b = scaled_constant(m, b, alpha);
    set_md_attr(c, "md.wei", any_md({K, N}));
    set_md_attr(c, "md.wei_src", wsrc);
  } else {
    if (alpha != 1.f) c.attrs["out_scale"] = alpha;
    set_md_attr(c, "md.wei", wsrc);
  }
  c.inputs = {a, b};
  if (cin != ir::kNoValue && beta != 0.f) {
    auto cd = static_dims(m, cin);
    if (!cd || !is_static_f32(m, cin)) return std::nullopt;
    int64_t numel = product(*cd);
    bool per_n = numel == N && (cd->empty() ? N == 1 : cd->back() == N);
    if (!per_n || (alpha != 1.f && !constant_of(m, b))) return std::nullopt;
    if (beta != 1.f) {
      if (!constant_of(m, cin)) return std::nullopt;
      cin = scaled_constant(m, cin, beta);
    }
    c.inputs.push_back(cin);
    set_md_attr(c, "md.bias", plain_md({1, N}));
  }
  if (!fast_primitive(c)) return std::nullopt;
  return std::vector<ir::Node>{std::move(c)};
}

}  // namespace

std::optional<std::vector<ir::Node>> lower_matmul(ir::Model& m, const ir::Node& n) {
  if (is_onnx(n, "MatMul")) return lower_onnx_matmul(m, n);
  if (is_onnx(n, "Gemm")) return lower_gemm(m, n);
  return std::nullopt;
}

}  // namespace kiln::targets::cpu

// ONNX BatchNormalization (inference) that no Conv / Gemm absorbed (a BN
// before its convolution, BN -> Relu -> Conv as in DenseNet) -> one
// kiln.cpu.Binary: x * s with the per-channel add of t as a binary post-op,
// s and t the BN's affine form (passes::batch_norm_affine). As a Binary it
// keeps the blocked layout of its neighbours (no reorders around it) and
// absorbs the activation that follows (fuse_post_ops).
#include "passes/passes.h"
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

/// A constant f32 value of `shape` holding `data`.
ir::ValueId add_constant(ir::Model& m, const std::string& name, const std::vector<int64_t>& shape,
                         const std::vector<float>& data) {
  ir::ValueId id = add_value(m, name, DType::f32, shape);
  Tensor t(DType::f32, shape);
  std::copy(data.begin(), data.end(), t.data<float>());
  m.value(id).constant = std::move(t);
  return id;
}

}  // namespace

std::optional<ir::Node> channel_affine(ir::Model& m, const ir::Node& from, ir::ValueId x, ir::ValueId y,
                                       const std::vector<int64_t>& xd, const std::vector<float>& s,
                                       const std::vector<float>& t) {
  std::vector<int64_t> cd(xd.size(), 1);
  cd[1] = xd[1];
  ir::Node c = cpu_node(from, "Binary");
  c.inputs = {x, add_constant(m, from.name + "/channel_scale", cd, s),
              add_constant(m, from.name + "/channel_shift", cd, t)};
  c.outputs = {y};
  c.attrs["alg"] = static_cast<int64_t>(dnnl::algorithm::binary_mul);
  set_md_attr(c, "md.src0", plain_md(dims_t(xd.begin(), xd.end())));
  set_md_attr(c, "md.src1", plain_md(dims_t(cd.begin(), cd.end())));
  set_md_attr(c, "md.dst", plain_md(dims_t(xd.begin(), xd.end())));
  set_md_attr(c, "md.post2", plain_md(dims_t(cd.begin(), cd.end())));
  write_post_ops(c, {{PostOp::binary, static_cast<int64_t>(dnnl::algorithm::binary_add), 0.f, 0.f, 1.f, 2}});
  if (!fast_primitive(c)) return std::nullopt;
  return c;
}

std::optional<std::vector<ir::Node>> lower_batchnorm(ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "BatchNormalization") || n.inputs.size() != 5 || n.outputs.empty()) return std::nullopt;
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (n.outputs[o] != ir::kNoValue) return std::nullopt;  // training outputs (running mean / var)
  if (n.i("training_mode", 0) != 0) return std::nullopt;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y)) return std::nullopt;
  auto xd = *static_dims(m, x);
  if (xd.size() < 2 || xd.size() > 5) return std::nullopt;
  std::vector<float> s, t;
  if (!passes::batch_norm_affine(m, n, xd[1], s, t)) return std::nullopt;
  auto c = channel_affine(m, n, x, y, xd, s, t);
  if (!c) return std::nullopt;
  return std::vector<ir::Node>{std::move(*c)};
}

}  // namespace kiln::targets::cpu

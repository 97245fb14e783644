// ONNX Transpose of an f32 tensor of static shape -> one kiln.cpu.Reorder
// whose source descriptor is the input read with permuted strides: oneDNN's
// jit reorder instead of the reference kernel's element loop (ShuffleNet's
// channel shuffle, the NCHW <-> NHWC transposes around ConvNeXt's and Swin's
// LayerNorms). Runs after fold_matmul_views, which folds the transposes
// next to a MatMul into its descriptors instead.
#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

/// Below this many elements the reference loop costs less than a oneDNN call.
constexpr int64_t kMinElems = 16384;

/// The reorder replacing Transpose n, or nullopt (dynamic / non-f32 / small,
/// or no optimised oneDNN reorder for it).
std::optional<ir::Node> transpose_reorder(const ir::Model& m, const ir::Node& n) {
  if (!is_onnx(n, "Transpose") || n.inputs.size() != 1 || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (x == ir::kNoValue || y == ir::kNoValue || !is_static_f32(m, x) || !is_static_f32(m, y) || constant_of(m, x))
    return std::nullopt;
  auto xd = *static_dims(m, x), yd = *static_dims(m, y);
  const size_t r = xd.size();
  if (r < 2 || r > 6 || yd.size() != r) return std::nullopt;
  std::vector<int64_t> perm;
  if (n.has("perm")) {
    perm = n.ints("perm");
  } else {
    for (size_t i = r; i-- > 0;) perm.push_back(static_cast<int64_t>(i));  // ONNX default: reverse the dims
  }
  if (perm.size() != r) return std::nullopt;
  int64_t elems = 1;
  for (auto d : xd) elems *= d;
  if (elems < kMinElems) return std::nullopt;
  // Input strides (row-major), then output dim i reads input dim perm[i].
  dims_t in_strides(r, 1);
  for (size_t i = r; i-- > 1;) in_strides[i - 1] = in_strides[i] * xd[i];
  dims_t dims(r), strides(r);
  for (size_t i = 0; i < r; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(r)) return std::nullopt;
    dims[i] = xd[static_cast<size_t>(perm[i])];
    strides[i] = in_strides[static_cast<size_t>(perm[i])];
    if (dims[i] != yd[i]) return std::nullopt;
  }
  ir::Node c = cpu_node(n, "Reorder");
  c.inputs = {x};
  c.outputs = {y};
  set_md_attr(c, "md.src", md_t(dims, dnnl::memory::data_type::f32, strides));
  set_md_attr(c, "md.dst", plain_md(dims));
  if (!fast_primitive(c)) return std::nullopt;
  return c;
}

int lower_graph(ir::Model& m, ir::Graph& g) {
  int lowered = 0;
  for (auto& n : g.nodes) {
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) lowered += lower_graph(m, **sg);
    if (auto c = transpose_reorder(m, n)) {
      n = std::move(*c);
      ++lowered;
    }
  }
  return lowered;
}

}  // namespace

int lower_transposes(ir::Model& m) { return lower_graph(m, m.main); }

}  // namespace kiln::targets::cpu

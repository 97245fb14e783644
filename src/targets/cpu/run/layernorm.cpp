// kiln.cpu.LayerNorm: oneDNN layer normalisation over the last dim, with
// optional scale and shift (ONNX LayerNormalization with its dims flattened
// to 2-D; InstanceNormalization as [N*C, spatial] without either).
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

namespace {
/// Input 1 (scale) present; shift (input 2) is only read with a scale.
bool has_scale(const ir::Node& n) { return n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue; }
}  // namespace

dnnl::layer_normalization_forward::primitive_desc layernorm_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src");
  auto flags = has_scale(n) ? dnnl::normalization_flags::use_scale : dnnl::normalization_flags::none;
  if (has_scale(n) && n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue)
    flags = flags | dnnl::normalization_flags::use_shift;
  return guarded(n, "layer normalization", [&] {
    dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, src, n.f("epsilon"), flags);
    return dnnl::layer_normalization_forward::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_layernorm(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return layernorm_pd(n); });
  std::vector<ArgBinding> ins{{0, DNNL_ARG_SRC, pd.src_desc()}};
  if (has_scale(n)) {
    md_t ss = md_attr(n, "md.scale");
    ins.push_back({1, DNNL_ARG_SCALE, ss});
    if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) ins.push_back({2, DNNL_ARG_SHIFT, ss});
  }
  auto prim = with_threads(single, [&] { return guarded(n, "layer normalization primitive", [&] { return dnnl::layer_normalization_forward(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), std::move(ins), pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

// kiln.cpu.MatMul: oneDNN matmul (any strides, broadcast batch dims, packed
// constant weights) with bias, output scale and post-ops.
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::matmul::primitive_desc matmul_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src"), wei = md_attr(n, "md.wei"), dst = md_attr(n, "md.dst");
  bool has_bias = n.has("md.bias");
  md_t bias = has_bias ? md_attr(n, "md.bias") : md_t();
  return guarded(n, "matmul", [&] {
    dnnl::matmul::desc d = has_bias ? dnnl::matmul::desc(src, wei, bias, dst) : dnnl::matmul::desc(src, wei, dst);
    dnnl::primitive_attr attr = make_attr(n);
    float scale = n.f("out_scale", 1.f);
    if (scale != 1.f) attr.set_output_scales(0, {scale});
    return dnnl::matmul::primitive_desc(d, attr, engine());
  });
}

BoundKernel make_matmul(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return matmul_pd(n); });
  expect_same_md(n, "weights", pd.weights_desc(), md_attr(n, "md.wei"));
  expect_same_impl(n, pd.impl_info_str());
  expect_same_md(n, "source layout", pd.src_desc(), md_attr(n, "md.src"));
  expect_same_md(n, "destination layout", pd.dst_desc(), md_attr(n, "md.dst"));
  std::vector<ArgBinding> ins{{0, DNNL_ARG_SRC, pd.src_desc()}, {1, DNNL_ARG_WEIGHTS, pd.weights_desc()}};
  if (n.has("md.bias")) ins.push_back({2, DNNL_ARG_BIAS, pd.bias_desc()});
  auto prim = with_threads(single, [&] { return guarded(n, "matmul primitive", [&] { return dnnl::matmul(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), std::move(ins), pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

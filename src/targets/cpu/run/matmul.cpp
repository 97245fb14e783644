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
  return weighted_primitive_kernel<dnnl::matmul>(n, m, "matmul primitive", [&] { return matmul_pd(n); });
}

}  // namespace kiln::targets::cpu

// kiln.cpu.Eltwise: oneDNN element-wise operation (any layout) with post-ops.
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::eltwise_forward::primitive_desc eltwise_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src");
  auto alg = static_cast<dnnl::algorithm>(n.i("alg"));
  return guarded(n, "eltwise", [&] {
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, n.f("alpha", 0.f), n.f("beta", 0.f));
    return dnnl::eltwise_forward::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_eltwise(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return eltwise_pd(n); });
  auto prim = with_threads(single, [&] { return guarded(n, "eltwise primitive", [&] { return dnnl::eltwise_forward(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), {{0, DNNL_ARG_SRC, pd.src_desc()}}, pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

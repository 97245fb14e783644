// kiln.cpu.Binary: oneDNN binary operation (src1 may broadcast) with post-ops.
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::binary::primitive_desc binary_pd(const ir::Node& n) {
  md_t a = md_attr(n, "md.src0"), b = md_attr(n, "md.src1"), dst = md_attr(n, "md.dst");
  auto alg = static_cast<dnnl::algorithm>(n.i("alg"));
  return guarded(n, "binary", [&] {
    dnnl::binary::desc d(alg, a, b, dst);
    return dnnl::binary::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_binary(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return binary_pd(n); });
  expect_same_md(n, "destination layout", pd.dst_desc(), md_attr(n, "md.dst"));
  auto prim = with_threads(single, [&] { return guarded(n, "binary primitive", [&] { return dnnl::binary(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(),
                          {{0, DNNL_ARG_SRC_0, pd.src_desc(0)}, {1, DNNL_ARG_SRC_1, pd.src_desc(1)}}, pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

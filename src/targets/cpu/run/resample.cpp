// kiln.cpu.Resample: oneDNN resampling, nearest neighbour (integer upscale)
// or linear (half-pixel coordinates); attribute "alg" (a dnnl::algorithm;
// absent: nearest, as artifacts before linear had it).
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::resampling_forward::primitive_desc resample_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src"), dst = md_attr(n, "md.dst");
  if (src.data.ndims < 3 || src.data.ndims != dst.data.ndims)
    fail(ErrorCode::corrupt_artifact, "{}: resampling needs source and destination of one rank >= 3", n.label());
  const auto alg = static_cast<dnnl::algorithm>(n.i("alg", static_cast<int64_t>(dnnl::algorithm::resampling_nearest)));
  if (alg != dnnl::algorithm::resampling_nearest && alg != dnnl::algorithm::resampling_linear)
    fail(ErrorCode::corrupt_artifact, "{}: resampling algorithm {} is neither nearest nor linear", n.label(),
         static_cast<int64_t>(alg));
  return guarded(n, "resampling", [&] {
    dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, dst);
    return dnnl::resampling_forward::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_resample(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return resample_pd(n); });
  expect_same_md(n, "destination layout", pd.dst_desc(), md_attr(n, "md.dst"));
  auto prim = with_threads(single, [&] { return guarded(n, "resampling primitive", [&] { return dnnl::resampling_forward(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), {{0, DNNL_ARG_SRC, pd.src_desc()}}, pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

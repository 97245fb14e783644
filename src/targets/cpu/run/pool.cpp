// kiln.cpu.Pool: oneDNN pooling (max, average with or without padding).
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::pooling_v2_forward::primitive_desc pool_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src"), dst = md_attr(n, "md.dst");
  dims_t kernel = n.ints("kernel"), strides = n.ints("strides"), dilates = n.ints("dilates"),
         pb = n.ints("pads_begin"), pe = n.ints("pads_end");
  size_t sp = src.data.ndims >= 2 ? static_cast<size_t>(src.data.ndims) - 2 : 0;
  if (sp == 0 || kernel.size() != sp || strides.size() != sp || dilates.size() != sp || pb.size() != sp ||
      pe.size() != sp)
    fail(ErrorCode::corrupt_artifact, "{}: kernel/strides/dilates/pads must have {} entries", n.label(), sp);
  auto alg = static_cast<dnnl::algorithm>(n.i("alg"));
  if (alg != dnnl::algorithm::pooling_max && alg != dnnl::algorithm::pooling_avg_include_padding &&
      alg != dnnl::algorithm::pooling_avg_exclude_padding)
    fail(ErrorCode::corrupt_artifact, "{}: unknown pooling algorithm {}", n.label(), n.i("alg"));
  return guarded(n, "pooling", [&] {
    dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, dst, strides, kernel, dilates, pb,
                                     pe);
    return dnnl::pooling_v2_forward::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_pool(const ir::Node& n, const ir::Model& m) {
  if (auto own = make_blocked_max_pool(n)) return std::move(*own);  // max_pool.cpp
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return pool_pd(n); });
  expect_same_md(n, "destination layout", pd.dst_desc(), md_attr(n, "md.dst"));
  auto prim = with_threads(single, [&] { return guarded(n, "pooling primitive", [&] { return dnnl::pooling_v2_forward(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), {{0, DNNL_ARG_SRC, pd.src_desc()}}, pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

// kiln.cpu.Reorder and kiln.cpu.Concat: layout conversion at the boundaries
// of blocked regions, and concatenation in any (shared) layout.
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::reorder::primitive_desc reorder_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src"), dst = md_attr(n, "md.dst");
  if (src.dims() != dst.dims() || src.data.ndims != dst.data.ndims)
    fail(ErrorCode::corrupt_artifact, "{}: a reorder's source and destination dims differ", n.label());
  return guarded(n, "reorder", [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::reorder::primitive_desc(engine(), src, engine(), dst, attr);
  });
}

BoundKernel make_reorder(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return reorder_pd(n); });
  auto prim = with_threads(single, [&] { return guarded(n, "reorder primitive", [&] { return dnnl::reorder(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), {{0, DNNL_ARG_FROM, pd.src_desc()}}, pd.dst_desc(), single);
}

BoundKernel make_concat(const ir::Node& n, const ir::Model& m) {
  std::vector<md_t> srcs;
  for (size_t i = 0; i < n.inputs.size(); ++i) srcs.push_back(md_attr(n, "md.src" + std::to_string(i)));
  md_t dst = md_attr(n, "md.dst");
  int64_t axis = n.i("axis");
  if (srcs.empty() || axis < 0 || axis >= dst.data.ndims)
    fail(ErrorCode::corrupt_artifact, "{}: concat axis {} out of range or no inputs", n.label(), axis);
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return guarded(n, "concat", [&] {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return dnnl::concat::primitive_desc(dst, static_cast<int>(axis), srcs, engine(), attr);
  }); });
  expect_same_md(n, "destination layout", pd.dst_desc(), dst);
  std::vector<ArgBinding> ins;
  for (size_t i = 0; i < srcs.size(); ++i) ins.push_back({i, DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]});
  auto prim = with_threads(single, [&] { return guarded(n, "concat primitive", [&] { return dnnl::concat(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), std::move(ins), dst, single);
}

}  // namespace kiln::targets::cpu

// kiln.cpu.Softmax: oneDNN softmax along one axis.
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::softmax_forward::primitive_desc softmax_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src");
  int64_t axis = n.i("axis");
  if (axis < 0 || axis >= src.data.ndims)
    fail(ErrorCode::corrupt_artifact, "{}: softmax axis {} out of range for rank {}", n.label(), axis, src.data.ndims);
  return guarded(n, "softmax", [&] {
    dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, src, static_cast<int>(axis));
    return dnnl::softmax_forward::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_softmax(const ir::Node& n, const ir::Model& m) {
  bool single = node_single_threaded(n);
  auto pd = with_threads(single, [&] { return softmax_pd(n); });
  auto prim = with_threads(single, [&] { return guarded(n, "softmax primitive", [&] { return dnnl::softmax_forward(pd); }); });
  return primitive_kernel(n, m, prim, pd.scratchpad_desc(), {{0, DNNL_ARG_SRC, pd.src_desc()}}, pd.dst_desc(), single);
}

}  // namespace kiln::targets::cpu

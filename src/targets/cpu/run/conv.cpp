// kiln.cpu.Conv: oneDNN forward-inference convolution with post-ops.
#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

dnnl::convolution_forward::primitive_desc conv_pd(const ir::Node& n) {
  md_t src = md_attr(n, "md.src"), wei = md_attr(n, "md.wei"), dst = md_attr(n, "md.dst");
  dims_t strides = n.ints("strides"), dilates = n.ints("dilates"), pb = n.ints("pads_begin"), pe = n.ints("pads_end");
  size_t sp = static_cast<size_t>(src.data.ndims) - 2;
  if (src.data.ndims < 3 || strides.size() != sp || dilates.size() != sp || pb.size() != sp || pe.size() != sp)
    fail(ErrorCode::corrupt_artifact, "{}: strides/dilates/pads must have {} entries", n.label(), sp);
  bool has_bias = n.has("md.bias");
  md_t bias = has_bias ? md_attr(n, "md.bias") : md_t();
  auto alg = static_cast<dnnl::algorithm>(n.i("alg", static_cast<int64_t>(dnnl::algorithm::convolution_direct)));
  if (alg != dnnl::algorithm::convolution_direct && alg != dnnl::algorithm::convolution_winograd)
    fail(ErrorCode::corrupt_artifact, "{}: unknown convolution algorithm {}", n.label(), n.i("alg"));
  return guarded(n, "convolution", [&] {
    using cf = dnnl::convolution_forward;
    cf::desc d = has_bias ? cf::desc(dnnl::prop_kind::forward_inference, alg, src, wei, bias, dst, strides, dilates, pb, pe)
                          : cf::desc(dnnl::prop_kind::forward_inference, alg, src, wei, dst, strides, dilates, pb, pe);
    return cf::primitive_desc(d, make_attr(n), engine());
  });
}

BoundKernel make_conv(const ir::Node& n, const ir::Model& m) {
  return weighted_primitive_kernel<dnnl::convolution_forward>(n, m, "convolution primitive", [&] { return conv_pd(n); });
}

}  // namespace kiln::targets::cpu

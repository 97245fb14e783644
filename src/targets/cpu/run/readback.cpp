#include "targets/cpu/run/readback.h"

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

std::optional<Tensor> blocked_output_to_plain(const ir::Node& n, const Tensor& raw) {
  if (n.domain != kCpuDomain || raw.dtype() != DType::f32) return std::nullopt;
  // The destination layout: nodes that write in their source's layout
  // (cpu_kernels.h) store only "md.src".
  const bool like_src = n.op_type == "Eltwise" || n.op_type == "Softmax" || n.op_type == "LayerNorm";
  const char* key = like_src ? "md.src" : "md.dst";
  if (!n.has(key)) return std::nullopt;
  md_t md;
  try {
    md = md_attr(n, key);
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!is_blocked(md) || raw.nbytes() < md_bytes(md)) return std::nullopt;
  const dims_t dims = md_dims(md);
  Tensor out(DType::f32, std::vector<int64_t>(dims.begin(), dims.end()));
  try {
    dnnl::memory src = wrap(md, raw.raw()), dst = wrap(plain_md(dims), out.raw());
    dnnl::reorder(src, dst).execute(stream(), src, dst);
    stream().wait();
  } catch (const dnnl::error& e) {
    fail(ErrorCode::internal, "{}: cannot read its blocked output back as a plain tensor: {}", n.label(), e.what());
  }
  return out;
}

}  // namespace kiln::targets::cpu

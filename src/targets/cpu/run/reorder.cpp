// kiln.cpu.Reorder and kiln.cpu.Concat: layout conversion at the boundaries
// of blocked regions, and concatenation in any (shared) layout.
#include <cstring>

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

namespace {

/// The kernel of a Concat marked "in_place_offsets" (every input a contiguous
/// byte range of the output in its own layout): inputs the memory plan put
/// at their place in the output are already there; the others are copied.
BoundKernel in_place_concat(const ir::Node& n, const ir::Model& m, std::vector<int64_t> offs) {
  const ir::Value& y = m.value(n.outputs.at(0));
  if (!y.shape || !ir::is_static(*y.shape) || y.dtype != DType::f32)
    fail(ErrorCode::corrupt_artifact, "{}: output '{}' must be a float32 tensor of static shape", n.label(), y.name);
  std::vector<int64_t> shape = ir::to_sizes(*y.shape);
  size_t out_bytes = sizeof(float);
  for (auto d : shape) out_bytes *= static_cast<size_t>(d);
  std::vector<size_t> bytes;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    bytes.push_back(md_bytes(md_attr(n, "md.src" + std::to_string(i))));
    if (offs[i] < 0 || static_cast<size_t>(offs[i]) > out_bytes || bytes[i] > out_bytes - static_cast<size_t>(offs[i]))
      fail(ErrorCode::corrupt_artifact, "{}: input {} at byte {} (+{}) lies outside the {}-byte output", n.label(), i,
           offs[i], bytes[i], out_bytes);
  }
  return [offs = std::move(offs), bytes = std::move(bytes), shape = std::move(shape)](ops::KernelContext& ctx) {
    auto* base = static_cast<uint8_t*>(ctx.output(0, DType::f32, shape).raw());
    for (size_t i = 0; i < bytes.size(); ++i) {
      const Tensor& t = ctx.in(i);
      if (t.nbytes() < bytes[i])
        fail(ErrorCode::invalid_input, "{}: input {} has {} bytes, {} expected", ctx.node.label(), i, t.nbytes(), bytes[i]);
      uint8_t* to = base + offs[i];
      if (t.raw() != to) std::memcpy(to, t.raw(), bytes[i]);
    }
  };
}

}  // namespace

BoundKernel make_concat(const ir::Node& n, const ir::Model& m) {
  std::vector<md_t> srcs;
  for (size_t i = 0; i < n.inputs.size(); ++i) srcs.push_back(md_attr(n, "md.src" + std::to_string(i)));
  md_t dst = md_attr(n, "md.dst");
  int64_t axis = n.i("axis");
  if (srcs.empty() || axis < 0 || axis >= dst.data.ndims)
    fail(ErrorCode::corrupt_artifact, "{}: concat axis {} out of range or no inputs", n.label(), axis);
  if (n.has("in_place_offsets")) {
    auto offs = n.ints("in_place_offsets");
    if (offs.size() != srcs.size())
      fail(ErrorCode::corrupt_artifact, "{}: {} in-place offsets for {} inputs", n.label(), offs.size(), srcs.size());
    return in_place_concat(n, m, std::move(offs));
  }
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

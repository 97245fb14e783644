// kiln.cpu.ConvInteger: ONNX ConvInteger with constant weights on oneDNN's
// int8 convolution (u8/s8 src, s8 weights, s32 dst), bit-exact to the
// reference kernel.
//
// ONNX (and the reference kernel) compute sum (x - xz)(w - wz[m]) over each
// window, with the padding holding xz (a zero after the subtraction).
// oneDNN takes a runtime src zero point with exactly that padding rule, but
// no weights zero point, so the lowering stores w' = w shifted to int8 (uint8
// minus 128, wz likewise) and, when some wz'[m] is not 0, appends to each
// group one output channel of all-ones weights: it yields sum (x - xz) over
// the window, and
//   y[m] = conv(x - xz, w')[m] - wz'[m] * conv(x - xz, 1)
// modulo 2^32, as the reference's int32 accumulation wraps. oneDNN's int8
// products are exact only with VNNI / AMX (int8_exact_isa). Without them,
// where the weights pass int8_products_exact_in_f32, the kernel runs oneDNN's
// float32 convolution on x - xz converted (zero padding is then xz's) and w',
// whose sums are exact integers there, converted to int32 by the dst reorder;
// the correction is the same. The primitive
// runs in the layouts oneDNN picks (blocked / channels-last: its plain-NCHW
// int8 convolution is a reference one); the kernel reorders the plain input
// in and the result out.
#include <algorithm>
#include <unordered_map>

#include "support/error.h"
#include "targets/cpu/run/cpu_kernels.h"
#include "targets/cpu/run/int8_matmul.h"

namespace kiln::targets::cpu {

namespace {

using dt = dnnl::memory::data_type;

/// What the kernel needs besides the primitive descriptor.
struct CiDims {
  dims_t src, dst_plain;  ///< [N, C, sp...], [N, O', sp...] (O' = O + group when corrected)
  std::vector<int64_t> out_shape;  ///< [N, O, sp...]
  int64_t group = 1, maps = 0;
  bool x_zero = false, corrected = false;
  DType x_type = DType::u8;
};

dims_t ints_attr(const ir::Node& n, const char* name, size_t count) {
  std::vector<int64_t> v = n.ints(name);
  if (v.size() != count)
    fail(ErrorCode::corrupt_artifact, "{}: attribute '{}' has {} values, expected {}", n.label(), name, v.size(), count);
  return dims_t(v.begin(), v.end());
}

CiDims ci_dims(const ir::Node& n, const ir::Model& m) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue)
    fail(ErrorCode::corrupt_artifact, "{}: a ConvInteger needs x, w and one output", n.label());
  const ir::Value& x = m.value(n.inputs[0]);
  const ir::Value& w = m.value(n.inputs[1]);
  const ir::Value& y = m.value(n.outputs[0]);
  auto fixed = [](const ir::Value& v) { return v.shape && ir::is_static(*v.shape); };
  if ((x.dtype != DType::u8 && x.dtype != DType::i8) || !fixed(x) || w.dtype != DType::i8 || !w.constant ||
      y.dtype != DType::i32 || !fixed(y) || x.shape->size() < 3 || x.shape->size() > 5 ||
      y.shape->size() != x.shape->size())
    fail(ErrorCode::corrupt_artifact,
         "{}: ConvInteger operands must be u8/s8 x [N, C, ...], constant s8 weights and an int32 output of the same rank",
         n.label());
  CiDims d;
  d.x_type = x.dtype;
  auto xs = ir::to_sizes(*x.shape);
  d.out_shape = ir::to_sizes(*y.shape);
  d.src.assign(xs.begin(), xs.end());
  d.group = n.i("group", 1);
  d.maps = d.out_shape[1];
  d.x_zero = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue;
  d.corrected = n.inputs.size() > 3 && n.inputs[3] != ir::kNoValue;
  if (d.group < 1 || d.maps % d.group || xs[1] % d.group)
    fail(ErrorCode::corrupt_artifact, "{}: group {} does not divide channels {} / maps {}", n.label(), d.group, xs[1],
         d.maps);
  if (d.corrected) {
    const ir::Value& wz = m.value(n.inputs[3]);
    if (wz.dtype != DType::i32 || !wz.constant || wz.constant->numel() != d.maps)
      fail(ErrorCode::corrupt_artifact, "{}: the weight zero point must be a constant int32 of {} values", n.label(),
           d.maps);
  }
  d.dst_plain.assign(d.out_shape.begin(), d.out_shape.end());
  if (d.corrected) d.dst_plain[1] += d.group;
  return d;
}

/// The weights' oneDNN dims: [O', C/G, k...] or [G, O'/G, C/G, k...].
dims_t weight_dims(const CiDims& d, const Tensor& w) {
  const int64_t per_group = d.dst_plain[1] / d.group;
  dims_t wd{d.dst_plain[1], d.src[1] / d.group};
  if (d.group > 1) wd = {d.group, per_group, d.src[1] / d.group};
  int64_t k = 1;
  for (size_t i = 2; i < d.src.size(); ++i) {
    const int64_t ki = w.dim(static_cast<int64_t>(i));
    wd.push_back(ki);
    k *= ki;
  }
  if (static_cast<size_t>(w.rank()) != d.src.size() || w.numel() != d.dst_plain[1] * (d.src[1] / d.group) * k)
    fail(ErrorCode::corrupt_artifact, "weights {} do not hold {} output channels", w.describe(), d.dst_plain[1]);
  return wd;
}

tag plain_tag(size_t rank) { return rank == 3 ? tag::abc : rank == 4 ? tag::abcd : rank == 5 ? tag::abcde : tag::abcdef; }

struct CiState {
  CiDims d;
  dnnl::convolution_forward prim;
  md_t src, dst, scratch, src_plain, dst_plain;
  size_t scratch_bytes = 0;
  dnnl::memory weights;  ///< packed, owned
  std::optional<dnnl::reorder> src_in, dst_out;
  std::vector<uint32_t> wz;  ///< per output channel (corrected only)
  /// Corrected and oneDNN's dst is channels-last: the correction reads it
  /// directly and writes y in NCHW (no dst reorder, one pass less).
  bool fused_correction = false;
  /// The products run on oneDNN's float32 convolution (no VNNI): x - xz is
  /// converted to float32 plain first, the dst reorder converts to int32.
  bool f32 = false;

  /// x - xz as float32 into out (plain, like x).
  void x_to_f32(const Tensor& x, int32_t zp, float* out) const {
    const int64_t count = x.numel();
    const float z = static_cast<float>(zp);
    if (d.x_type == DType::u8) {
      const uint8_t* p = x.data<uint8_t>();
#pragma omp parallel for schedule(static) if (count > (1 << 16))
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(p[i]) - z;
    } else {
      const int8_t* p = x.data<int8_t>();
#pragma omp parallel for schedule(static) if (count > (1 << 16))
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(p[i]) - z;
    }
  }

  /// correct() from channels-last t [N, sp..., O'] straight into y [N, O, sp...],
  /// in tiles of 16 positions: each channel's row of y is written one cache
  /// line at a time (row by row over all positions, the rows' stride, often a
  /// multiple of 4 KiB, would alias in the L1 cache).
  void correct_channels_last(const int32_t* t, int32_t* y) const {
    constexpr int64_t kTile = 16;
    int64_t sp = 1;
    for (size_t i = 2; i < d.out_shape.size(); ++i) sp *= d.out_shape[i];
    const int64_t og = d.maps / d.group, oc = d.dst_plain[1];
    const uint32_t* in = reinterpret_cast<const uint32_t*>(t);
    uint32_t* out = reinterpret_cast<uint32_t*>(y);
    for (int64_t n = 0; n < d.out_shape[0]; ++n)
      for (int64_t p0 = 0; p0 < sp; p0 += kTile) {
        const int64_t p1 = std::min(sp, p0 + kTile);
        const uint32_t* rows = in + (n * sp + p0) * oc;
        for (int64_t g = 0; g < d.group; ++g) {
          const uint32_t* ones = rows + g * (og + 1) + og;
          for (int64_t j = 0; j < og; ++j) {
            const int64_t m = g * og + j;
            const uint32_t z = wz[static_cast<size_t>(m)];
            const uint32_t* src = rows + g * (og + 1) + j;
            uint32_t* dst = out + (n * d.maps + m) * sp;
            for (int64_t p = p0; p < p1; ++p) dst[p] = src[(p - p0) * oc] - z * ones[(p - p0) * oc];
          }
        }
      }
  }

  /// y[n, g*Og + j] = tmp[n, g*(Og+1) + j] - wz[g*Og + j] * tmp[n, g*(Og+1) + Og], modulo 2^32.
  void correct(const int32_t* tmp, int32_t* y) const {
    int64_t sp = 1;
    for (size_t i = 2; i < d.out_shape.size(); ++i) sp *= d.out_shape[i];
    const int64_t og = d.maps / d.group, batches = d.out_shape[0] * d.group;
#pragma omp parallel for schedule(static) if (batches * d.maps * sp > (1 << 16))
    for (int64_t bg = 0; bg < batches; ++bg) {
      const int64_t g = bg % d.group;
      const uint32_t* in = reinterpret_cast<const uint32_t*>(tmp) + bg * (og + 1) * sp;
      const uint32_t* ones = in + og * sp;
      uint32_t* out = reinterpret_cast<uint32_t*>(y) + bg * og * sp;
      for (int64_t j = 0; j < og; ++j) {
        const uint32_t z = wz[static_cast<size_t>(g * og + j)];
        for (int64_t p = 0; p < sp; ++p) out[j * sp + p] = in[j * sp + p] - z * ones[p];
      }
    }
  }

  void run(ops::KernelContext& ctx) const {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != d.x_type || x.shape() != std::vector<int64_t>(d.src.begin(), d.src.end()))
      fail(ErrorCode::invalid_input, "{}: x is {}, expected {} of the compiled shape", ctx.node.label(), x.describe(),
           dtype_name(d.x_type));
    int32_t zp = 0;
    if (d.x_zero) {
      const Tensor& z = ctx.in(2);
      if (z.numel() != 1 || (z.dtype() != DType::u8 && z.dtype() != DType::i8))
        fail(ErrorCode::invalid_input, "{}: x_zero_point must be one uint8 / int8 value, got {}", ctx.node.label(),
             z.describe());
      zp = z.dtype() == DType::u8 ? static_cast<int32_t>(z.data<uint8_t>()[0]) : z.data<int8_t>()[0];
    }
    Tensor& y = ctx.output(0, DType::i32, d.out_shape);
    try {
      // This thread's buffers 1-3 (0 is the scratchpad): reordered x, oneDNN's dst, the plain dst before the correction.
      const bool via_plain = d.corrected && !fused_correction;
      auto* tmp = via_plain ? static_cast<int32_t*>(thread_buffer(3, md_bytes(dst_plain))) : nullptr;
      void* xdata = const_cast<void*>(x.raw());
      if (f32) {  // buffer 4: x - xz in float32, plain
        xdata = thread_buffer(4, md_bytes(src_plain));
        x_to_f32(x, zp, static_cast<float*>(xdata));
      }
      dnnl::memory xin(src_plain, engine(), xdata);
      dnnl::memory xs = src_in ? dnnl::memory(src, engine(), thread_buffer(1, md_bytes(src))) : xin;
      if (src_in) src_in->execute(stream(), xin, xs);
      dnnl::memory out_plain(dst_plain, engine(), via_plain ? static_cast<void*>(tmp) : y.raw());
      dnnl::memory ys =
          dst_out || fused_correction ? dnnl::memory(dst, engine(), thread_buffer(2, md_bytes(dst))) : out_plain;
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, xs}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, ys}};
      if (d.x_zero && !f32)
        args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = dnnl::memory(md_t({1}, dt::s32, tag::a), engine(), &zp);
      if (scratch_bytes) args[DNNL_ARG_SCRATCHPAD] = wrap(scratch, thread_scratch(scratch_bytes));
      prim.execute(stream(), args);
      if (dst_out) dst_out->execute(stream(), ys, out_plain);
      stream().wait();
      if (fused_correction) correct_channels_last(static_cast<const int32_t*>(ys.get_data_handle()), y.data<int32_t>());
      else if (d.corrected) correct(tmp, y.data<int32_t>());
    } catch (const dnnl::error& e) {
      fail(ErrorCode::internal, "{}: oneDNN int8 convolution failed: {}", ctx.node.label(), e.what());
    }
  }
};

}  // namespace

dnnl::convolution_forward::primitive_desc conv_integer_pd(const ir::Node& n, const ir::Model& m, bool f32) {
  const CiDims d = ci_dims(n, m);
  const size_t sp = d.src.size() - 2;
  const dims_t strides = ints_attr(n, "strides", sp), dilates = ints_attr(n, "dilates", sp),
               pb = ints_attr(n, "pads_begin", sp), pe = ints_attr(n, "pads_end", sp);
  const dims_t wd = weight_dims(d, *m.value(n.inputs[1]).constant);
  const char* what = f32 ? "float32 convolution primitive descriptor (int8 products)" : "int8 convolution primitive descriptor";
  return guarded(n, what, [&] {
    md_t src(d.src, f32 ? dt::f32 : int8_type(d.x_type), tag::any), wei(wd, f32 ? dt::f32 : dt::s8, tag::any),
        dst(d.dst_plain, f32 ? dt::f32 : dt::s32, tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (d.x_zero && !f32) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                         wei, dst, strides, dilates, pb, pe);
    return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
  });
}

BoundKernel make_conv_integer(const ir::Node& n, const ir::Model& m) {
  auto st = std::make_shared<CiState>();
  st->d = ci_dims(n, m);
  const Tensor& w = *m.value(n.inputs[1]).constant;
  auto pd = conv_integer_pd(n, m);
  if (!int8_exact_isa() || std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
    const int64_t per = w.numel() / std::max<int64_t>(1, w.dim(0));
    if (!int8_products_exact_in_f32(w.data<int8_t>(), w.dim(0), per, per, 1))
      fail(ErrorCode::incompatible_artifact,
           "{}: oneDNN has no int8-exact optimised convolution on this machine (ISA {}, implementation {}), and the "
           "weights' sums are too large for exact float32 products",
           n.label(), onednn_isa(), pd.impl_info_str());
    st->f32 = true;
    pd = conv_integer_pd(n, m, true);
    if (std::string(pd.impl_info_str()).rfind("ref", 0) == 0)
      fail(ErrorCode::incompatible_artifact, "{}: oneDNN has no optimised float32 convolution for it here ({})",
           n.label(), pd.impl_info_str());
  }
  const CiDims& d = st->d;
  st->src = pd.src_desc();
  st->dst = pd.dst_desc();
  st->scratch = pd.scratchpad_desc();
  st->scratch_bytes = md_bytes(st->scratch);
  st->src_plain = md_t(d.src, st->f32 ? dt::f32 : int8_type(d.x_type), plain_tag(d.src.size()));
  st->dst_plain = md_t(d.dst_plain, dt::s32, plain_tag(d.dst_plain.size()));
  const dims_t wd = weight_dims(d, w);
  guarded(n, "int8 convolution reorders", [&] {
    std::vector<float> wf;
    if (st->f32) {
      wf.resize(static_cast<size_t>(w.numel()));
      for (int64_t i = 0; i < w.numel(); ++i) wf[static_cast<size_t>(i)] = static_cast<float>(w.data<int8_t>()[i]);
    }
    dnnl::memory plain(md_t(wd, st->f32 ? dt::f32 : dt::s8, plain_tag(wd.size())), engine(),
                       st->f32 ? static_cast<void*>(wf.data()) : const_cast<void*>(w.raw()));
    st->weights = dnnl::memory(pd.weights_desc(), engine());
    dnnl::reorder(plain, st->weights).execute(stream(), plain, st->weights);
    stream().wait();
    if (st->src != st->src_plain) st->src_in = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), st->src_plain, engine(), st->src));
    const size_t rank = d.dst_plain.size();
    const tag cl = rank == 3 ? tag::acb : rank == 4 ? tag::acdb : tag::acdeb;
    st->fused_correction = d.corrected && !st->f32 && st->dst == md_t(d.dst_plain, dt::s32, cl);
    if (st->dst != st->dst_plain && !st->fused_correction) st->dst_out = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), st->dst, engine(), st->dst_plain));
    return 0;
  });
  if (d.corrected) {
    const Tensor& wz = *m.value(n.inputs[3]).constant;
    for (int64_t i = 0; i < wz.numel(); ++i) st->wz.push_back(static_cast<uint32_t>(wz.data<int32_t>()[i]));
  }
  st->prim = guarded(n, "int8 convolution primitive", [&] { return dnnl::convolution_forward(pd); });
  return [st](ops::KernelContext& ctx) { st->run(ctx); };
}

}  // namespace kiln::targets::cpu

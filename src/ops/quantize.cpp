// Linear quantization: QuantizeLinear, DequantizeLinear (ONNX opset 21 forms:
// https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html,
// onnx__DequantizeLinear.html) and DynamicQuantizeLinear (opset 11).
//
// Granularity is set by the scale's shape (zero point: same shape):
// per-tensor (scalar or one element), per-axis (1-D of length x.shape[axis])
// or blocked (block_size > 0: x's shape with ceil(D_axis / block_size) on the
// axis). Older opsets are subsets (per-tensor only before 13, no blocks
// before 21) and need no normalising.
//
// QuantizeLinear: y = saturate(round_half_even(x / scale) + zero_point) for
// integer outputs (uint8 default, int8, uint16, int16, uint4, int4), the
// division in float32 (int32 x: float64) as ONNX Runtime; NaN quantizes to
// the zero point. 8-bit float outputs: y = float8(x / scale + zero_point)
// with `saturate` (src/support/float8.h). The output type is the zero point's,
// else output_dtype, else uint8.
// DequantizeLinear: y = (x - zero_point) * scale computed in float32 and
// rounded to the scale's dtype (float32, float16, bfloat16); x may be any
// quantized type, int32 or an 8-bit float.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/quant_common.h"

namespace kiln::ops {
namespace {

// ---------------------------------------------------------------- granularity

/// Maps a flat index of x to the index of its scale / zero point.
struct QuantLayout {
  enum class Kind { tensor, axis, blocked } kind = Kind::tensor;
  int64_t dim = 1, inner = 1, block = 1, scale_dim = 1;

  int64_t index(int64_t i) const {
    switch (kind) {
      case Kind::tensor: return 0;
      case Kind::axis: return (i / inner) % dim;
      case Kind::blocked: {
        const int64_t in = i % inner, a = (i / inner) % dim, out = i / (inner * dim);
        return (out * scale_dim + a / block) * inner + in;
      }
    }
    return 0;
  }
};

/// Checks the scale (and zero point) shape against x and picks the
/// granularity. Throws Error(invalid_input) naming the node on a mismatch.
QuantLayout make_layout(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& scale,
                        const std::vector<int64_t>* zp) {
  auto numel_of = [](const std::vector<int64_t>& v) {
    int64_t k = 1;
    for (auto d : v) k *= d;
    return k;
  };
  // One-element scales / zero points of any shape are per-tensor values.
  if (zp && *zp != scale && !(numel_of(*zp) == 1 && numel_of(scale) == 1))
    fail(ErrorCode::invalid_input, "{}: zero point shape [{}] differs from scale shape [{}]", n.label(),
         shape_to_string(*zp), shape_to_string(scale));
  const int64_t block = n.i("block_size", 0);
  if (block < 0) fail(ErrorCode::invalid_model, "{}: block_size must be >= 0, got {}", n.label(), block);
  QuantLayout l;
  const int64_t numel = numel_of(scale);
  const int64_t rank = static_cast<int64_t>(x.size());
  if (block == 0 && numel == 1) return l;  // per tensor (any one-element shape, as the reference)
  if (rank == 0)
    fail(ErrorCode::invalid_input, "{}: a scalar input needs a scalar scale, got [{}]", n.label(),
         shape_to_string(scale));
  const int64_t axis = normalize_axis(n, n.i("axis", 1), rank);
  l.dim = x[static_cast<size_t>(axis)];
  l.inner = prod(x, static_cast<size_t>(axis) + 1);
  if (block == 0) {
    if (scale.size() != 1 || scale[0] != l.dim)
      fail(ErrorCode::invalid_input, "{}: per-axis scale must be 1-D of length {} (axis {}), got [{}]", n.label(),
           l.dim, axis, shape_to_string(scale));
    l.kind = QuantLayout::Kind::axis;
    return l;
  }
  std::vector<int64_t> want = x;
  want[static_cast<size_t>(axis)] = (l.dim + block - 1) / block;
  if (scale != want)
    fail(ErrorCode::invalid_input, "{}: blocked scale must have shape [{}] (block_size {}, axis {}), got [{}]",
         n.label(), shape_to_string(want), block, axis, shape_to_string(scale));
  l.kind = QuantLayout::Kind::blocked;
  l.block = block;
  l.scale_dim = want[static_cast<size_t>(axis)];
  return l;
}

/// Element i of x as float (float32/float16/bfloat16; int32 handled apart).
inline float x_as_float(const Tensor& x, int64_t i) {
  switch (x.dtype()) {
    case DType::f16: return half_to_float(x.data<uint16_t>()[i]);
    case DType::bf16: return bf16_to_float(x.data<uint16_t>()[i]);
    default: return x.data<float>()[i];
  }
}

bool quant_output_ok(DType t) { return is_quant_int(t) || dtype_is_float8(t); }

// ---------------------------------------------------------------- QuantizeLinear

/// Output dtype of QuantizeLinear: zero point's, else output_dtype, else uint8.
DType quantize_output(const ir::Node& n, DType zp) {
  const int64_t od = n.i("output_dtype", 0);
  if (zp != DType::undefined) {
    if (od != 0 && od != static_cast<int64_t>(zp))
      fail(ErrorCode::invalid_model, "{}: output_dtype {} differs from the zero point's dtype {}", n.label(), od,
           dtype_name(zp));
    if (!quant_output_ok(zp)) unsupported_dtype(n, zp, "input 2 (y_zero_point)");
    return zp;
  }
  if (od == 0) return DType::u8;
  const DType t = static_cast<DType>(od);
  if (!quant_output_ok(t)) fail(ErrorCode::unsupported, "{}: output_dtype {} is not supported", n.label(), od);
  return t;
}

std::vector<OutType> infer_quantize(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  const InType& x = ctx.in(0);
  const InType& s = ctx.in(1);
  if (!is_scale_dtype(x.dtype) && x.dtype != DType::i32) unsupported_dtype(n, x.dtype, "input 0 (x)");
  if (!is_scale_dtype(s.dtype)) unsupported_dtype(n, s.dtype, "input 1 (y_scale)");
  const DType out = quantize_output(n, ctx.has(2) ? ctx.in(2).dtype : DType::undefined);
  return {OutType{out, x.shape}};
}

void quantize_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& s = ctx.in(1);
  const Tensor* zp = ctx.has(2) ? &ctx.in(2) : nullptr;
  const DType out_t = quantize_output(n, zp ? zp->dtype() : DType::undefined);
  if (!is_scale_dtype(x.dtype()) && x.dtype() != DType::i32) unsupported_dtype(n, x.dtype(), "input 0 (x)");
  const QuantLayout l = make_layout(n, x.shape(), s.shape(), zp ? &zp->shape() : nullptr);
  const std::vector<float> scale = quant_values(s);
  const std::vector<float> zero = zp ? quant_values(*zp) : std::vector<float>(scale.size(), 0.0f);
  Tensor& y = ctx.output(0, out_t, x.shape());
  const bool saturate = n.i("saturate", 1) != 0;
  const int64_t count = x.numel();
  if (dtype_is_float8(out_t)) {
    const Float8Format& f = float8_format(out_t);
    uint8_t* dst = y.data<uint8_t>();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t k = l.index(i);
      const float q = x.dtype() == DType::i32 ? static_cast<float>(x.data<int32_t>()[i] / static_cast<double>(scale[k]))
                                              : x_as_float(x, i) / scale[k];
      dst[i] = float_to_float8(q + zero[k], f, saturate);
    }
    return;
  }
  double lo, hi;
  quant_range(out_t, &lo, &hi);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = l.index(i);
    const double q = x.dtype() == DType::i32 ? x.data<int32_t>()[i] / static_cast<double>(scale[k])
                                             : static_cast<double>(x_as_float(x, i) / scale[k]);
    const double zpk = zero[k];
    store_quant_int(y, i, std::isnan(q) ? std::clamp(zpk, lo, hi) : round_saturate(std::nearbyint(q) + zpk, lo, hi));
  }
}

// ---------------------------------------------------------------- DequantizeLinear

bool dequant_input_ok(DType t) { return is_quant_int(t) || t == DType::i32 || dtype_is_float8(t); }

std::vector<OutType> infer_dequantize(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  const InType& x = ctx.in(0);
  const InType& s = ctx.in(1);
  if (!dequant_input_ok(x.dtype)) unsupported_dtype(n, x.dtype, "input 0 (x)");
  if (!is_scale_dtype(s.dtype)) unsupported_dtype(n, s.dtype, "input 1 (x_scale)");
  if (ctx.has(2) && ctx.in(2).dtype != x.dtype)
    fail(ErrorCode::invalid_model, "{}: zero point dtype {} differs from x's {}", n.label(),
         dtype_name(ctx.in(2).dtype), dtype_name(x.dtype));
  return {OutType{s.dtype, x.shape}};
}

void dequantize_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& s = ctx.in(1);
  const Tensor* zp = ctx.has(2) ? &ctx.in(2) : nullptr;
  if (!dequant_input_ok(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0 (x)");
  if (!is_scale_dtype(s.dtype())) unsupported_dtype(n, s.dtype(), "input 1 (x_scale)");
  if (zp && zp->dtype() != x.dtype())
    fail(ErrorCode::invalid_input, "{}: zero point dtype {} differs from x's {}", n.label(), dtype_name(zp->dtype()),
         dtype_name(x.dtype()));
  const QuantLayout l = make_layout(n, x.shape(), s.shape(), zp ? &zp->shape() : nullptr);
  const std::vector<float> scale = quant_values(s);
  std::vector<double> zero(scale.size(), 0.0);
  if (zp)
    for (int64_t i = 0; i < zp->numel(); ++i) zero[static_cast<size_t>(i)] = quant_element(*zp, i);
  Tensor& y = ctx.output(0, s.dtype(), x.shape());
  const int64_t count = x.numel();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = l.index(i);
    // Integer differences are exact in double; the product is rounded to float32 once.
    const double diff = quant_element(x, i) - zero[k];
    store_float(y, i, static_cast<float>(diff) * scale[k]);
  }
}

// ---------------------------------------------------------------- DynamicQuantizeLinear

std::vector<OutType> infer_dynamic_quantize(const InferContext& ctx) {
  const InType& x = ctx.in(0);
  if (x.dtype != DType::f32) unsupported_dtype(ctx.node, x.dtype, "input 0 (x)");
  std::vector<OutType> out{{DType::u8, x.shape}, {DType::f32, ir::Shape{}}, {DType::u8, ir::Shape{}}};
  out.resize(ctx.num_outputs);
  return out;
}

/// ONNX DynamicQuantizeLinear-11: uint8 with the range [min(x, 0), max(x, 0)]:
/// scale = (max - min) / 255 (1/255 when the range is empty), zero point =
/// saturate(round(-min / scale)), y = saturate(round(x / scale) + zero point),
/// all in float32.
void dynamic_quantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::f32) unsupported_dtype(ctx.node, x.dtype(), "input 0 (x)");
  const float* src = x.data<float>();
  const DynamicU8Params p = dynamic_u8_params(src, x.numel());
  Tensor& y = ctx.output(0, DType::u8, x.shape());
  uint8_t* dst = y.data<uint8_t>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = quantize_u8(src[i], p);
  const float scale = p.scale, zp = p.zero_point;
  if (ctx.num_outputs() > 1) ctx.output(1, DType::f32, {}).data<float>()[0] = scale;
  if (ctx.num_outputs() > 2) ctx.output(2, DType::u8, {}).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
}

}  // namespace

/// Registers QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (see the file comment).
void register_quantize(Registry& r) {
  r.add({"", "QuantizeLinear", infer_quantize, quantize_kernel});
  r.add({"", "DequantizeLinear", infer_dequantize, dequantize_kernel});
  r.add({"", "DynamicQuantizeLinear", infer_dynamic_quantize, dynamic_quantize_kernel});
}

}  // namespace kiln::ops

// Cast and CastLike (https://onnx.ai/onnx/operators/onnx__Cast.html, opset 21).
//
// Supported both ways between: float32, float64, float16, bfloat16, the four
// 8-bit floats, int4/uint4, int8/16/32/64, uint8/16/32/64 and bool.
// Conversion rules:
// - to float16 / bfloat16 / 8-bit floats: round to nearest even. Sources wider
//   than float32 are first narrowed to float32 with round-to-odd, so that the
//   value is rounded only once (no double rounding). float16/bfloat16 overflow
//   to infinity; the 8-bit floats follow `saturate` (Cast-19+, default 1):
//   out-of-range values and infinities become +-max, or with saturate=0 NaN
//   (inf for float8e5m2), see src/support/float8.h.
// - 8-bit floats and 4-bit integers as a source: their exact value (float or
//   small integer), then the rules for that value.
// - to int4 / uint4: clamp to [-8, 7] / [0, 15], floats rounded half to even
//   (NaN -> 0), as ONNX's reference implementation (it converts to float32,
//   clips and rounds). Integer sources are clamped too, not wrapped.
// - float -> other integers: truncation toward zero. ONNX leaves out-of-range
//   values undefined; kiln converts to int64 (saturating at its range, NaN -> 0)
//   and then wraps modulo 2^bits, which matches numpy's astype (and ONNX
//   Runtime on x86) for values inside the int32 range, e.g. -1.0 -> uint8 255.
// - integer -> narrower integer: wraps modulo 2^bits (two's complement).
// - anything -> bool: x != 0 (NaN -> true); bool -> anything: 0 or 1.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/registry.h"
#include "ops/util.h"
#include "support/float8.h"
#include "support/half.h"

namespace kiln::ops {
namespace {

/// Storage tags for the 16-bit float types (their bits are a uint16_t).
struct Half {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
/// Storage tag for an 8-bit float type: its bit pattern.
template <DType T>
struct F8 {
  uint8_t bits;
};
/// Storage tags for the 4-bit integers (unpacked, one per byte; see kiln/dtype.h).
struct I4 {
  int8_t v;
};
struct U4 {
  uint8_t v;
};

template <class T>
constexpr bool is_f8 = false;
template <DType T>
constexpr bool is_f8<F8<T>> = true;
template <DType T>
constexpr DType f8_dtype(F8<T>) {
  return T;
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, Half>) return DType::f16;
  else if constexpr (std::is_same_v<T, BF16>) return DType::bf16;
  else if constexpr (is_f8<T>) return f8_dtype(T{});
  else if constexpr (std::is_same_v<T, I4>) return DType::i4;
  else if constexpr (std::is_same_v<T, U4>) return DType::u4;
  else if constexpr (std::is_same_v<T, int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::i16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::u32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::u64;
  else if constexpr (std::is_same_v<T, bool>) return DType::boolean;
  else static_assert(sizeof(T) == 0, "no DType for this type");
}

#define KILN_CAST_TYPES                                                                                          \
  float, double, Half, BF16, F8<DType::f8e4m3fn>, F8<DType::f8e4m3fnuz>, F8<DType::f8e5m2>, F8<DType::f8e5m2fnuz>, \
      I4, U4, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bool

/// Calls f(T{}) for the T among Ts whose DType is t; unsupported_dtype otherwise.
template <class... Ts, class F>
void visit(DType t, const ir::Node& n, const char* where, F&& f) {
  bool hit = ((t == dtype_of<Ts>() && (f(Ts{}), true)) || ...);
  if (!hit) unsupported_dtype(n, t, where);
}

template <class... Ts>
bool dtype_in(DType t) {
  return ((t == dtype_of<Ts>()) || ...);
}

bool castable(DType t) { return dtype_in<KILN_CAST_TYPES>(t); }

constexpr int64_t kTile = 16384;
constexpr int64_t kParallelMin = 1 << 16;

template <class Fn>
void parallel_tiles(int64_t n, Fn&& fn) {
  if (n < kParallelMin) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tiles; ++t) fn(t * kTile, std::min(n, (t + 1) * kTile));
}

// ---------------------------------------------------------------- scalar conversions

/// double -> float rounding to odd: exact values stay, inexact ones get the
/// float next to them (toward zero) with the lowest mantissa bit forced to 1.
/// A later round-to-nearest to a type with at least 2 fewer bits is then the
/// correctly rounded result of the original double.
inline float to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// float/double -> integer D: truncate, saturate to int64 (NaN -> 0), wrap to D.
template <class D, class S>
inline D float_to_int(S x) {
  if (std::isnan(x)) return D(0);
  const S t = std::trunc(x);
  constexpr S two63 = S(9223372036854775808.0);
  if constexpr (std::is_same_v<D, uint64_t>) {
    if (t >= S(18446744073709551616.0)) return std::numeric_limits<uint64_t>::max();
    if (t >= two63) return static_cast<uint64_t>(t - two63) + (uint64_t{1} << 63);
  }
  if (t >= two63) return static_cast<D>(std::numeric_limits<int64_t>::max());
  if (t < -two63) return static_cast<D>(std::numeric_limits<int64_t>::min());
  return static_cast<D>(static_cast<int64_t>(t));
}

/// Arithmetic value (float, double, integer or bool) -> int4/uint4 value:
/// clamp, floats rounded half to even, NaN -> 0.
template <class S>
inline int8_t to_int4(S x, bool is_signed) {
  const int64_t lo = is_signed ? -8 : 0, hi = is_signed ? 7 : 15;
  if constexpr (std::is_floating_point_v<S>) {
    if (std::isnan(x)) return 0;
    x = std::clamp(x, static_cast<S>(lo), static_cast<S>(hi));
    return static_cast<int8_t>(std::nearbyint(x));  // default rounding mode: half to even
  } else if constexpr (std::is_same_v<S, bool>) {
    return x ? 1 : 0;
  } else if constexpr (std::is_unsigned_v<S>) {
    return static_cast<int8_t>(x > static_cast<uint64_t>(hi) ? hi : static_cast<int64_t>(x));
  } else {
    return static_cast<int8_t>(std::clamp(static_cast<int64_t>(x), lo, hi));
  }
}

/// Converts one element from S to D (both arithmetic types or storage tags).
/// `saturate` only matters when D is an 8-bit float.
template <class D, class S>
inline D convert(S x, bool saturate) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (std::is_same_v<S, Half>) {
    return convert<D>(half_to_float(x.bits), saturate);
  } else if constexpr (std::is_same_v<S, BF16>) {
    return convert<D>(bf16_to_float(x.bits), saturate);
  } else if constexpr (is_f8<S>) {
    return convert<D>(float8_to_float(x.bits, float8_format(dtype_of<S>())), saturate);
  } else if constexpr (std::is_same_v<S, I4>) {
    return convert<D>(x.v, saturate);
  } else if constexpr (std::is_same_v<S, U4>) {
    return convert<D>(x.v, saturate);
  } else if constexpr (std::is_same_v<D, bool>) {
    return x != S(0);
  } else if constexpr (std::is_same_v<D, Half>) {
    if constexpr (std::is_same_v<S, float>) return Half{float_to_half(x)};
    else return Half{float_to_half(to_float_round_odd(static_cast<double>(x)))};
  } else if constexpr (std::is_same_v<D, BF16>) {
    if constexpr (std::is_same_v<S, float>) return BF16{float_to_bf16(x)};
    else return BF16{float_to_bf16(to_float_round_odd(static_cast<double>(x)))};
  } else if constexpr (is_f8<D>) {
    const Float8Format& f = float8_format(dtype_of<D>());
    if constexpr (std::is_same_v<S, float>) return D{float_to_float8(x, f, saturate)};
    else return D{float_to_float8(to_float_round_odd(static_cast<double>(x)), f, saturate)};
  } else if constexpr (std::is_same_v<D, I4>) {
    return I4{to_int4(x, true)};
  } else if constexpr (std::is_same_v<D, U4>) {
    return U4{static_cast<uint8_t>(to_int4(x, false))};
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    return float_to_int<D>(x);
  } else {
    return static_cast<D>(x);  // float widening/narrowing (RNE), int->float, int->int (modular)
  }
}

template <class S, class D>
void cast_typed(const Tensor& in, Tensor& out, bool saturate) {
  const S* src = in.data<S>();
  D* dst = out.data<D>();
  if constexpr (std::is_same_v<S, D>) {
    if (in.nbytes()) std::memcpy(dst, src, in.nbytes());
  } else {
    parallel_tiles(in.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = convert<D>(src[i], saturate);
    });
  }
}

// ---------------------------------------------------------------- operators

/// ONNX names of the element types kiln does not implement, for messages.
const char* onnx_type_name(int64_t v) {
  switch (v) {
    case 8: return "STRING";
    case 14: return "COMPLEX64";
    case 15: return "COMPLEX128";
    case 23: return "FLOAT4E2M1";
    default: return "unknown";
  }
}

/// Target dtype of Cast (`to`) or CastLike (input 1's dtype); checked supported.
DType target_of(const ir::Node& n, DType like) {
  DType to = like;
  if (n.op_type == "Cast") {
    const int64_t v = n.i("to");
    to = static_cast<DType>(v);
    if (!castable(to))
      fail(ErrorCode::unsupported, "{}: cast to element type {} ({}) is not supported (opset {})", n.label(), v,
           onnx_type_name(v), n.opset);
  } else if (!castable(to)) {
    unsupported_dtype(n, to, "target_type");
  }
  return to;
}

std::vector<OutType> infer_cast(const InferContext& ctx) {
  const size_t want = ctx.node.op_type == "Cast" ? 1 : 2;
  if (ctx.num_inputs() != want)
    fail(ErrorCode::invalid_model, "{}: expects {} input(s), got {}", ctx.node.label(), want, ctx.num_inputs());
  const InType& x = ctx.in(0);
  if (!castable(x.dtype)) unsupported_dtype(ctx.node, x.dtype, "input 0");
  const DType to = target_of(ctx.node, want == 2 ? ctx.in(1).dtype : DType::undefined);
  return {OutType{to, x.shape}};
}

void cast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const DType to = target_of(ctx.node, ctx.node.op_type == "CastLike" ? ctx.in(1).dtype() : DType::undefined);
  const bool saturate = ctx.node.i("saturate", 1) != 0;
  Tensor& out = ctx.output(0, to, x.shape());
  visit<KILN_CAST_TYPES>(x.dtype(), ctx.node, "input 0", [&](auto stag) {
    visit<KILN_CAST_TYPES>(to, ctx.node, "target type", [&](auto dtag) {
      cast_typed<decltype(stag), decltype(dtag)>(x, out, saturate);
    });
  });
}

}  // namespace

/// Registers Cast and CastLike (see the file comment for conversion rules).
void register_cast(Registry& r) {
  r.add({"", "Cast", infer_cast, cast_kernel});
  r.add({"", "CastLike", infer_cast, cast_kernel});
}

}  // namespace kiln::ops

// Elementwise unary operators (https://onnx.ai/onnx/operators/, newest opset
// of each): Abs, Neg, Sign (float32/64, int32/64); Exp, Log, Sqrt, Reciprocal,
// Floor, Ceil, Round, Erf and the trigonometric / hyperbolic functions
// (float32/64); Not (bool); IsNaN, IsInf (float -> bool); BitwiseNot (8- to
// 64-bit integers). Output shape = input shape. Floating-point results follow
// the C library (<cmath>): NaN and infinities propagate as IEEE 754 says
// (e.g. Log(-1) = NaN, Log(0) = -inf), which is what ONNX Runtime produces too.
// float16 / bfloat16 inputs of the float operators are computed in float32
// and rounded back (run_widened_16, defined here and shared by the other
// families of this helper's set).
#include <cmath>
#include <type_traits>

#include "ops/registry.h"
#include "ops/util.h"
#include "support/half.h"

namespace kiln::ops {

// Shared with activation.cpp, elementwise_binary.cpp, reduce.cpp and
// softmax.cpp, which declare them locally. (They belong in ops/util.h, which
// this family does not own; the integrator may move them there.)

/// True for float16 and bfloat16.
bool is_16bit_float(DType t) { return t == DType::f16 || t == DType::bf16; }

/// Runs `kernel` (a float32 kernel of the same node) on ctx with every
/// float16/bfloat16 input widened to float32 (exact) and, when the node's
/// data input (input 0; Where: input 1) is 16-bit, every float32 output
/// rounded back to that type (nearest even). Other inputs and outputs (int64
/// indices, bool masks) pass through unchanged. Costs one float32 copy of
/// each 16-bit input and output; this is the reference kernel, not a fast path.
void run_widened_16(KernelContext& ctx, KernelFn kernel) {
  const DType narrow = ctx.in(ctx.node.op_type == "Where" ? 1 : 0).dtype();
  std::vector<Tensor> wide(ctx.num_inputs());
  std::vector<const Tensor*> ptrs(ctx.num_inputs(), nullptr);
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has(i)) continue;
    const Tensor& t = ctx.in(i);
    ptrs[i] = &t;
    if (!is_16bit_float(t.dtype())) continue;
    wide[i] = Tensor(DType::f32, t.shape());
    const uint16_t* src = t.data<uint16_t>();
    float* dst = wide[i].data<float>();
    for (int64_t k = 0; k < t.numel(); ++k) dst[k] = t.dtype() == DType::f16 ? half_to_float(src[k]) : bf16_to_float(src[k]);
    ptrs[i] = &wide[i];
  }
  KernelContext inner(ctx.node, ptrs, nullptr);
  kernel(inner);
  for (size_t i = 0; i < inner.num_outputs(); ++i) {
    const Tensor& o = inner.outputs()[i];
    if (!o.defined()) continue;
    if (o.dtype() != DType::f32 || !is_16bit_float(narrow)) {
      ctx.set_output(i, o);
      continue;
    }
    Tensor& out = ctx.output(i, narrow, o.shape());
    const float* src = o.data<float>();
    uint16_t* dst = out.data<uint16_t>();
    for (int64_t k = 0; k < o.numel(); ++k) dst[k] = narrow == DType::f16 ? float_to_half(src[k]) : float_to_bf16(src[k]);
  }
}

namespace {

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
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

constexpr int64_t kTile = 16384;
constexpr int64_t kParallelMin = 1 << 16;

/// Runs fn(begin, end) over [0, n) in tiles, in parallel when n is large.
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

enum class U {
  abs, neg, sign, exp, log, sqrt, reciprocal, floor, ceil, round, erf, sin, cos, tan, asin, acos, atan, sinh,
  cosh, asinh, acosh, atanh, logical_not, is_nan, is_inf, bitwise_not
};

/// Which dtypes each operator accepts: the same predicate drives inference and kernels.
enum class Group { signed_arith, floating, boolean, float_to_bool, integer };

constexpr Group group_of(U op) {
  switch (op) {
    case U::abs: case U::neg: case U::sign: return Group::signed_arith;
    case U::logical_not: return Group::boolean;
    case U::is_nan: case U::is_inf: return Group::float_to_bool;
    case U::bitwise_not: return Group::integer;
    default: return Group::floating;
  }
}

#define KILN_SIGNED_ARITH_TYPES float, double, int32_t, int64_t
#define KILN_FLOAT_TYPES float, double
#define KILN_INTEGER_TYPES int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

bool supports(U op, DType t) {
  if (is_16bit_float(t)) return group_of(op) != Group::boolean && group_of(op) != Group::integer;
  switch (group_of(op)) {
    case Group::signed_arith: return dtype_in<KILN_SIGNED_ARITH_TYPES>(t);
    case Group::boolean: return t == DType::boolean;
    case Group::integer: return dtype_in<KILN_INTEGER_TYPES>(t);
    default: return dtype_in<KILN_FLOAT_TYPES>(t);
  }
}

/// The scalar function of OP. Integer Abs/Neg go through unsigned arithmetic
/// so that the most negative value wraps instead of being undefined.
template <U OP, class T>
inline auto scalar_op(T x, bool detect_neg, bool detect_pos) {
  if constexpr (OP == U::abs) {
    if constexpr (std::is_integral_v<T>)
      return x < 0 ? static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(x)) : x;
    else return std::fabs(x);
  } else if constexpr (OP == U::neg) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(x));
    else return static_cast<T>(-x);
  } else if constexpr (OP == U::sign) {
    return x > T(0) ? T(1) : x < T(0) ? T(-1) : x;  // zero stays zero, NaN stays NaN
  } else if constexpr (OP == U::exp) { return std::exp(x);
  } else if constexpr (OP == U::log) { return std::log(x);
  } else if constexpr (OP == U::sqrt) { return std::sqrt(x);
  } else if constexpr (OP == U::reciprocal) { return static_cast<T>(T(1) / x);
  } else if constexpr (OP == U::floor) { return std::floor(x);
  } else if constexpr (OP == U::ceil) { return std::ceil(x);
  } else if constexpr (OP == U::round) {
    // Halves go to the even neighbour (ONNX Round); nearbyint does that in
    // the default rounding mode, which kiln never changes.
    return std::nearbyint(x);
  } else if constexpr (OP == U::erf) { return std::erf(x);
  } else if constexpr (OP == U::sin) { return std::sin(x);
  } else if constexpr (OP == U::cos) { return std::cos(x);
  } else if constexpr (OP == U::tan) { return std::tan(x);
  } else if constexpr (OP == U::asin) { return std::asin(x);
  } else if constexpr (OP == U::acos) { return std::acos(x);
  } else if constexpr (OP == U::atan) { return std::atan(x);
  } else if constexpr (OP == U::sinh) { return std::sinh(x);
  } else if constexpr (OP == U::cosh) { return std::cosh(x);
  } else if constexpr (OP == U::asinh) { return std::asinh(x);
  } else if constexpr (OP == U::acosh) { return std::acosh(x);
  } else if constexpr (OP == U::atanh) { return std::atanh(x);
  } else if constexpr (OP == U::logical_not) { return !x;
  } else if constexpr (OP == U::is_nan) { return static_cast<bool>(std::isnan(x));
  } else if constexpr (OP == U::is_inf) {
    return static_cast<bool>(std::isinf(x) && (x > 0 ? detect_pos : detect_neg));
  } else if constexpr (OP == U::bitwise_not) {
    return static_cast<T>(~x);
  }
}

DType out_dtype(U op, DType in) {
  return group_of(op) == Group::float_to_bool ? DType::boolean : in;
}

template <U OP>
std::vector<OutType> infer_unary(const InferContext& ctx) {
  if (ctx.num_inputs() != 1)
    fail(ErrorCode::invalid_model, "{}: expects 1 input, got {}", ctx.node.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  if (!supports(OP, x.dtype)) unsupported_dtype(ctx.node, x.dtype, "input 0");
  return {OutType{out_dtype(OP, x.dtype), x.shape}};
}

template <U OP, class T>
void run_typed(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const bool neg = ctx.node.i("detect_negative", 1) != 0, pos = ctx.node.i("detect_positive", 1) != 0;
  using O = decltype(scalar_op<OP, T>(T{}, false, false));
  Tensor& out = ctx.output(0, dtype_of<O>(), x.shape());
  const T* px = x.data<T>();
  O* po = out.data<O>();
  parallel_tiles(x.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = scalar_op<OP, T>(px[i], neg, pos);
  });
}

template <U OP>
void unary_kernel(KernelContext& ctx) {
  const DType dt = ctx.in(0).dtype();
  if (!supports(OP, dt)) unsupported_dtype(ctx.node, dt, "input 0");
  if (is_16bit_float(dt)) return run_widened_16(ctx, unary_kernel<OP>);
  constexpr Group g = group_of(OP);
  auto body = [&](auto tag) { run_typed<OP, decltype(tag)>(ctx); };
  if constexpr (g == Group::signed_arith) visit<KILN_SIGNED_ARITH_TYPES>(dt, ctx.node, "input 0", body);
  else if constexpr (g == Group::boolean) visit<bool>(dt, ctx.node, "input 0", body);
  else if constexpr (g == Group::integer) visit<KILN_INTEGER_TYPES>(dt, ctx.node, "input 0", body);
  else visit<KILN_FLOAT_TYPES>(dt, ctx.node, "input 0", body);
}

template <U OP>
void add(Registry& r, const char* name) {
  r.add({"", name, infer_unary<OP>, unary_kernel<OP>});
}

}  // namespace

/// Registers the elementwise unary family (see the file comment for dtypes).
void register_elementwise_unary(Registry& r) {
  add<U::abs>(r, "Abs");
  add<U::neg>(r, "Neg");
  add<U::sign>(r, "Sign");
  add<U::exp>(r, "Exp");
  add<U::log>(r, "Log");
  add<U::sqrt>(r, "Sqrt");
  add<U::reciprocal>(r, "Reciprocal");
  add<U::floor>(r, "Floor");
  add<U::ceil>(r, "Ceil");
  add<U::round>(r, "Round");
  add<U::erf>(r, "Erf");
  add<U::sin>(r, "Sin");
  add<U::cos>(r, "Cos");
  add<U::tan>(r, "Tan");
  add<U::asin>(r, "Asin");
  add<U::acos>(r, "Acos");
  add<U::atan>(r, "Atan");
  add<U::sinh>(r, "Sinh");
  add<U::cosh>(r, "Cosh");
  add<U::asinh>(r, "Asinh");
  add<U::acosh>(r, "Acosh");
  add<U::atanh>(r, "Atanh");
  add<U::logical_not>(r, "Not");
  add<U::is_nan>(r, "IsNaN");
  add<U::is_inf>(r, "IsInf");
  add<U::bitwise_not>(r, "BitwiseNot");
}

}  // namespace kiln::ops

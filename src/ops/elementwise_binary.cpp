// Elementwise binary and variadic operators with multidirectional (numpy)
// broadcasting: Add, Sub, Mul, Div, Pow, Mod, Max, Min, Sum, Mean, Equal,
// Less, Greater, LessOrEqual, GreaterOrEqual, And, Or, Xor, BitwiseAnd/Or/Xor,
// BitShift and Where (https://onnx.ai/onnx/operators/, newest opset of each;
// broadcasting per docs/Broadcasting.md).
//
// These run on every activation of real models (bias adds, residuals, masks,
// shape arithmetic), so the loops are arranged for speed: same-shape and
// scalar operands take a flat loop; everything else goes through a Plan that
// drops size-1 dims and merges dims that are contiguous for every operand, so
// that a row or channel broadcast becomes an outer walk around a contiguous
// (vectorisable) inner loop. Large outputs are split into tiles over OpenMP.
//
// dtypes: arithmetic, Max/Min/Sum and the comparisons take float32/64 and all
// 8- to 64-bit integers (integer +, -, * wrap modulo 2^bits; integer Div/Mod
// by zero is an invalid_input error, not a trap); Mean takes floats; Equal
// also bool; And/Or/Xor bool; Bitwise* integers; BitShift unsigned integers;
// Where any fixed-size dtype (it only moves elements). Pow's exponent may
// have any of the arithmetic dtypes; the output has the base's. float16 and
// bfloat16 operands of the arithmetic and comparison operators are computed
// in float32 and the result rounded back.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/registry.h"
#include "ops/util.h"

namespace kiln::ops {

// Defined in elementwise_unary.cpp (see there).
bool is_16bit_float(DType t);
void run_widened_16(KernelContext& ctx, KernelFn kernel);

namespace {

// ---------------------------------------------------------------- dtypes

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

// The dtype sets each operator group accepts (kernels and inference agree).
#define KILN_ARITH_TYPES float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
#define KILN_FLOAT_TYPES float, double
#define KILN_BITWISE_TYPES int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
#define KILN_SHIFT_TYPES uint8_t, uint16_t, uint32_t, uint64_t

// ---------------------------------------------------------------- loops

constexpr int64_t kTile = 16384;         // elements per parallel work item
constexpr int64_t kParallelMin = 1 << 16;  // smaller outputs stay on one thread
constexpr int kMaxOperands = 3;

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

/// The iteration space of a broadcast: output dims with size-1 dims dropped
/// and neighbours merged where every operand is contiguous across them;
/// strides (in elements, 0 = broadcast) per operand. Always at least one dim;
/// the innermost stride of each operand is 0 or 1.
struct Plan {
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, kMaxOperands> strides;
  int operands = 0;
};

Plan make_plan(const std::vector<int64_t>& out, std::initializer_list<const std::vector<int64_t>*> ins) {
  Plan p;
  p.operands = static_cast<int>(ins.size());
  const size_t r = out.size();
  std::array<std::vector<int64_t>, kMaxOperands> full;
  int k = 0;
  for (const auto* s : ins) {
    full[k].assign(r, 0);
    int64_t st = 1;
    for (size_t i = s->size(); i-- > 0;) {
      full[k][i + r - s->size()] = (*s)[i] == 1 ? 0 : st;
      st *= (*s)[i];
    }
    ++k;
  }
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    bool merge = !p.dims.empty();
    for (k = 0; k < p.operands && merge; ++k) merge = p.strides[k].back() == full[k][i] * out[i];
    if (merge) {
      p.dims.back() *= out[i];
      for (k = 0; k < p.operands; ++k) p.strides[k].back() = full[k][i];
    } else {
      p.dims.push_back(out[i]);
      for (k = 0; k < p.operands; ++k) p.strides[k].push_back(full[k][i]);
    }
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    for (k = 0; k < p.operands; ++k) p.strides[k].push_back(0);
  }
  return p;
}

/// Calls fn(out_offset, operand_offsets, length) for contiguous output
/// segments of the plan (at most kTile long), in parallel for large outputs.
/// Within a segment operand k advances by plan.strides[k].back() (0 or 1).
template <class Fn>
void for_each_segment(const Plan& p, Fn&& fn) {
  const int64_t inner = p.dims.back();
  const int64_t rows = prod(p.dims) / inner;
  const int64_t seg = std::min(inner, kTile);
  const int64_t segs_per_row = (inner + seg - 1) / seg;
  const int64_t total = rows * segs_per_row;
  const size_t outer_rank = p.dims.size() - 1;
#pragma omp parallel for schedule(static) if (rows * inner >= kParallelMin && total > 1)
  for (int64_t t = 0; t < total; ++t) {
    const int64_t row = t / segs_per_row, start = (t % segs_per_row) * seg;
    std::array<int64_t, kMaxOperands> off{};
    int64_t rem = row;
    for (size_t d = outer_rank; d-- > 0;) {
      const int64_t idx = rem % p.dims[d];
      rem /= p.dims[d];
      for (int k = 0; k < p.operands; ++k) off[k] += idx * p.strides[k][d];
    }
    for (int k = 0; k < p.operands; ++k) off[k] += start * p.strides[k].back();
    fn(row * inner + start, off, std::min(seg, inner - start));
  }
}

/// o[i] = f(a[i*sa], b[i*sb]) for i < n with sa, sb in {0, 1}, written so
/// that each stride pattern is its own vectorisable loop.
template <class O, class A, class B, class F>
inline void binary_inner(O* o, const A* a, int64_t sa, const B* b, int64_t sb, int64_t n, const F& f) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sb) {
    const A av = a[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else if (sa) {
    const B bv = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else {
    const O v = f(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

/// out = f(a, b) elementwise, a and b broadcast to out's shape (which the
/// caller computed). `a` may be `out` itself (in-place folding of variadic
/// ops): each output element reads only its own position of a same-shape a.
template <class O, class A, class B, class F>
void broadcast_binary(const Tensor& a, const Tensor& b, Tensor& out, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  // Equal element counts under broadcasting mean identical layouts.
  const int64_t sa = a.numel() == n ? 1 : (a.numel() == 1 ? 0 : -1);
  const int64_t sb = b.numel() == n ? 1 : (b.numel() == 1 ? 0 : -1);
  if (sa >= 0 && sb >= 0) {
    parallel_tiles(n, [&](int64_t begin, int64_t end) {
      binary_inner(po + begin, pa + begin * sa, sa, pb + begin * sb, sb, end - begin, f);
    });
    return;
  }
  const Plan p = make_plan(out.shape(), {&a.shape(), &b.shape()});
  const int64_t ia = p.strides[0].back(), ib = p.strides[1].back();
  for_each_segment(p, [&](int64_t o, const std::array<int64_t, kMaxOperands>& off, int64_t len) {
    binary_inner(po + o, pa + off[0], ia, pb + off[1], ib, len, f);
  });
}

// ---------------------------------------------------------------- scalar ops

enum class Op {
  add, sub, mul, div, mod_trunc, mod_floor, pow, max, min, sum, mean,
  equal, less, greater, less_eq, greater_eq, logic_and, logic_or, logic_xor,
  bit_and, bit_or, bit_xor, shift_left, shift_right, where
};

template <class T>
constexpr bool is_float_v = std::is_floating_point_v<T>;

/// Unsigned type for wrapping integer arithmetic on T; at least 32 bits so
/// that narrow operands do not promote to (overflowing) signed int.
template <class T>
using wrap_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

/// a (+ - *) b on integers, wrapping modulo 2^bits like two's complement hardware.
template <char OPC, class T>
inline T wrap(T a, T b) {
  using W = wrap_t<T>;
  const W x = static_cast<W>(a), y = static_cast<W>(b);
  return static_cast<T>(OPC == '+' ? x + y : OPC == '-' ? x - y : x * y);
}

/// Integer a / b truncating toward zero; b == -1 is done in unsigned
/// arithmetic so that MIN / -1 wraps instead of trapping. b != 0 (checked before).
template <class T>
inline T int_div(T a, T b) {
  if constexpr (std::is_signed_v<T>)
    if (b == T(-1)) return wrap<'-'>(T(0), a);
  return static_cast<T>(a / b);
}

/// Remainder with the sign of the dividend (C fmod / %).
template <class T>
inline T trunc_mod(T a, T b) {
  if constexpr (is_float_v<T>) return std::fmod(a, b);
  else if constexpr (std::is_signed_v<T>) return b == T(-1) ? T(0) : static_cast<T>(a % b);
  else return static_cast<T>(a % b);
}

/// Remainder with the sign of the divisor (Python %, ONNX Mod fmod=0).
template <class T>
inline T floor_mod(T a, T b) {
  T r = trunc_mod(a, b);
  if constexpr (std::is_signed_v<T>)
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = static_cast<T>(r + b);
  return r;
}

/// base ** exponent in the base's dtype. Integer ** integer is exact
/// (repeated squaring, wrapping on overflow); a negative integer exponent
/// gives the truncated real result (1, -1 or 0).
template <class B, class E>
inline B power(B base, E e) {
  if constexpr (is_float_v<B>) {
    using C = std::conditional_t<std::is_same_v<B, double> || std::is_same_v<E, double>, double, B>;
    return static_cast<B>(std::pow(static_cast<C>(base), static_cast<C>(e)));
  } else if constexpr (is_float_v<E>) {
    const double r = std::trunc(std::pow(static_cast<double>(base), static_cast<double>(e)));
    if (!(r >= static_cast<double>(std::numeric_limits<B>::min()) &&
          r <= static_cast<double>(std::numeric_limits<B>::max())))
      return r > 0 ? std::numeric_limits<B>::max() : std::numeric_limits<B>::min();  // also NaN -> min
    return static_cast<B>(r);
  } else {
    if constexpr (std::is_signed_v<E>) {
      if (e < 0) {
        if (base == B(1)) return B(1);
        if constexpr (std::is_signed_v<B>)
          if (base == B(-1)) return e % 2 ? B(-1) : B(1);
        return B(0);
      }
    }
    B result = 1;
    for (auto k = static_cast<uint64_t>(e); k; k >>= 1) {
      if (k & 1) result = wrap<'*'>(result, base);
      base = wrap<'*'>(base, base);
    }
    return result;
  }
}

/// The scalar function of OP on two elements of type T.
template <Op OP, class T>
inline auto scalar_op(T a, T b) {
  if constexpr (OP == Op::add || OP == Op::sum || OP == Op::mean) {
    if constexpr (std::is_integral_v<T>) return wrap<'+'>(a, b);
    else return static_cast<T>(a + b);
  } else if constexpr (OP == Op::sub) {
    if constexpr (std::is_integral_v<T>) return wrap<'-'>(a, b);
    else return static_cast<T>(a - b);
  } else if constexpr (OP == Op::mul) {
    if constexpr (std::is_integral_v<T>) return wrap<'*'>(a, b);
    else return static_cast<T>(a * b);
  } else if constexpr (OP == Op::div) {
    if constexpr (is_float_v<T>) return static_cast<T>(a / b);
    else return int_div(a, b);
  } else if constexpr (OP == Op::mod_trunc) {
    return trunc_mod(a, b);
  } else if constexpr (OP == Op::mod_floor) {
    return floor_mod(a, b);
  } else if constexpr (OP == Op::max) {
    if constexpr (is_float_v<T>)
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    return a < b ? b : a;
  } else if constexpr (OP == Op::min) {
    if constexpr (is_float_v<T>)
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    return b < a ? b : a;
  } else if constexpr (OP == Op::equal) {
    return a == b;
  } else if constexpr (OP == Op::less) {
    return a < b;
  } else if constexpr (OP == Op::greater) {
    return a > b;
  } else if constexpr (OP == Op::less_eq) {
    return a <= b;
  } else if constexpr (OP == Op::greater_eq) {
    return a >= b;
  } else if constexpr (OP == Op::logic_and) {
    return a && b;
  } else if constexpr (OP == Op::logic_or) {
    return a || b;
  } else if constexpr (OP == Op::logic_xor) {
    return a != b;
  } else if constexpr (OP == Op::bit_and) {
    return static_cast<T>(a & b);
  } else if constexpr (OP == Op::bit_or) {
    return static_cast<T>(a | b);
  } else if constexpr (OP == Op::bit_xor) {
    return static_cast<T>(a ^ b);
  } else if constexpr (OP == Op::shift_left) {
    // Shifting by the bit width or more is undefined in C++; every bit is shifted out.
    return b >= sizeof(T) * 8 ? T(0) : static_cast<T>(a << b);
  } else if constexpr (OP == Op::shift_right) {
    return b >= sizeof(T) * 8 ? T(0) : static_cast<T>(a >> b);
  } else {
    static_assert(OP == Op::add, "scalar_op: not an elementwise binary op");
  }
}

// ---------------------------------------------------------------- op traits

constexpr bool is_compare(Op op) {
  return op == Op::equal || op == Op::less || op == Op::greater || op == Op::less_eq || op == Op::greater_eq;
}
constexpr bool is_logic(Op op) { return op == Op::logic_and || op == Op::logic_or || op == Op::logic_xor; }
constexpr bool is_bitwise(Op op) { return op == Op::bit_and || op == Op::bit_or || op == Op::bit_xor; }
constexpr bool is_shift(Op op) { return op == Op::shift_left || op == Op::shift_right; }
constexpr bool is_variadic(Op op) { return op == Op::max || op == Op::min || op == Op::sum || op == Op::mean; }

/// Whether OP's kernel implements dtype t for its (first) input.
bool supports(Op op, DType t) {
  if (is_16bit_float(t)) return !is_logic(op) && !is_bitwise(op) && !is_shift(op);
  if (op == Op::equal) return dtype_in<KILN_ARITH_TYPES, bool>(t);
  if (is_compare(op)) return dtype_in<KILN_ARITH_TYPES>(t);
  if (is_logic(op)) return t == DType::boolean;
  if (is_bitwise(op)) return dtype_in<KILN_BITWISE_TYPES>(t);
  if (is_shift(op)) return dtype_in<KILN_SHIFT_TYPES>(t);
  if (op == Op::mean) return dtype_in<KILN_FLOAT_TYPES>(t);
  return dtype_in<KILN_ARITH_TYPES>(t);
}

/// Broadcast output shape of all present inputs (static sizes).
std::vector<int64_t> broadcast_all(const KernelContext& ctx) {
  std::vector<int64_t> shape = ctx.in(0).shape();
  for (size_t i = 1; i < ctx.num_inputs(); ++i) shape = broadcast_sizes(ctx.node, shape, ctx.in(i).shape());
  return shape;
}

void check_arity(const ir::Node& n, Op op, size_t count) {
  if (op == Op::where ? count != 3 : is_variadic(op) ? count < 1 : count != 2)
    fail(ErrorCode::invalid_model, "{}: expects {} inputs, got {}", n.label(),
         op == Op::where ? "3" : is_variadic(op) ? "at least 1" : "2", count);
}

// ---------------------------------------------------------------- inference

template <Op OP>
std::vector<OutType> infer_binary(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  check_arity(n, OP, ctx.num_inputs());
  if constexpr (OP == Op::where) {
    if (ctx.in(0).dtype != DType::boolean)
      fail(ErrorCode::invalid_model, "{}: condition must be bool, got {}", n.label(), dtype_name(ctx.in(0).dtype));
  }
  // Where's data inputs are 1 and 2; everyone else's are all of them.
  const size_t first = OP == Op::where ? 1 : 0;
  const DType dt = ctx.in(first).dtype;
  if constexpr (OP != Op::where) {
    if (!supports(OP, dt)) unsupported_dtype(n, dt, "input 0");
  } else if (dtype_size(dt) == 0) {
    unsupported_dtype(n, dt, "input 1");
  }
  for (size_t i = first + 1; i < ctx.num_inputs(); ++i) {
    if (OP == Op::pow) {
      if (!supports(Op::pow, ctx.in(i).dtype)) unsupported_dtype(n, ctx.in(i).dtype, "exponent");
    } else if (ctx.in(i).dtype != dt) {
      fail(ErrorCode::invalid_model, "{}: input {} has dtype {} but input {} has {}", n.label(), i,
           dtype_name(ctx.in(i).dtype), first, dtype_name(dt));
    }
  }
  std::optional<ir::Shape> shape = ctx.in(0).shape;
  for (size_t i = 1; i < ctx.num_inputs(); ++i) shape = broadcast_shapes(n, shape, ctx.in(i).shape);
  const DType out = is_compare(OP) || is_logic(OP) ? DType::boolean : dt;
  return {OutType{out, shape}};
}

// ---------------------------------------------------------------- kernels

/// Rejects a zero divisor before an integer Div/Mod would trap.
template <class T>
void check_no_zero_divisor(const KernelContext& ctx, const Tensor& b) {
  if constexpr (std::is_integral_v<T>) {
    const T* p = b.data<T>();
    for (int64_t i = 0; i < b.numel(); ++i)
      if (p[i] == T(0))
        fail(ErrorCode::invalid_input, "{}: integer division by zero (element {} of input 1)", ctx.node.label(), i);
  }
}

/// Same-dtype ops: out = in0 OP in1 (OP in in2 ... for the variadic ones,
/// folded in place into the output; Mean divides at the end).
template <Op OP, class T>
void fold_kernel(KernelContext& ctx) {
  const auto shape = broadcast_all(ctx);
  using O = decltype(scalar_op<OP, T>(T{}, T{}));
  Tensor& out = ctx.output(0, dtype_of<O>(), shape);
  if constexpr (OP == Op::div || OP == Op::mod_trunc || OP == Op::mod_floor) check_no_zero_divisor<T>(ctx, ctx.in(1));
  const auto f = [](T a, T b) { return scalar_op<OP, T>(a, b); };
  if (ctx.num_inputs() == 1) {  // a single input is a copy (Sum(x) = x)
    if (out.nbytes()) std::memcpy(out.raw(), ctx.in(0).raw(), out.nbytes());
  } else {
    broadcast_binary<O, T, T>(ctx.in(0), ctx.in(1), out, f);
  }
  if constexpr (std::is_same_v<O, T>) {
    for (size_t i = 2; i < ctx.num_inputs(); ++i) broadcast_binary<T, T, T>(out, ctx.in(i), out, f);
  }
  if constexpr (OP == Op::mean) {
    const T inv_count = T(1) / static_cast<T>(ctx.num_inputs());
    T* p = out.data<T>();
    if (ctx.num_inputs() > 1)
      parallel_tiles(out.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) p[i] *= inv_count;
      });
  }
}

template <Op OP>
void binary_kernel(KernelContext& ctx) {
  check_arity(ctx.node, OP, ctx.num_inputs());
  const DType dt = ctx.in(0).dtype();
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.in(i).dtype() != dt)
      fail(ErrorCode::invalid_input, "{}: input {} has dtype {} but input 0 has {}", ctx.node.label(), i,
           dtype_name(ctx.in(i).dtype()), dtype_name(dt));
  if (!supports(OP, dt)) unsupported_dtype(ctx.node, dt, "input 0");
  if (is_16bit_float(dt)) return run_widened_16(ctx, binary_kernel<OP>);
  if constexpr (is_logic(OP)) {
    fold_kernel<OP, bool>(ctx);
  } else if constexpr (is_bitwise(OP)) {
    visit<KILN_BITWISE_TYPES>(dt, ctx.node, "input 0", [&](auto tag) { fold_kernel<OP, decltype(tag)>(ctx); });
  } else if constexpr (is_shift(OP)) {
    visit<KILN_SHIFT_TYPES>(dt, ctx.node, "input 0", [&](auto tag) { fold_kernel<OP, decltype(tag)>(ctx); });
  } else if constexpr (OP == Op::equal) {
    visit<KILN_ARITH_TYPES, bool>(dt, ctx.node, "input 0", [&](auto tag) { fold_kernel<OP, decltype(tag)>(ctx); });
  } else if constexpr (OP == Op::mean) {
    visit<KILN_FLOAT_TYPES>(dt, ctx.node, "input 0", [&](auto tag) { fold_kernel<OP, decltype(tag)>(ctx); });
  } else {
    visit<KILN_ARITH_TYPES>(dt, ctx.node, "input 0", [&](auto tag) { fold_kernel<OP, decltype(tag)>(ctx); });
  }
}

/// Mod: fmod=1 truncates like C fmod, fmod=0 takes the divisor's sign.
void mod_kernel(KernelContext& ctx) {
  const int64_t fmod = ctx.node.i("fmod", 0);
  if (fmod != 0 && fmod != 1)
    fail(ErrorCode::invalid_model, "{}: attribute 'fmod' must be 0 or 1, got {}", ctx.node.label(), fmod);
  fmod ? binary_kernel<Op::mod_trunc>(ctx) : binary_kernel<Op::mod_floor>(ctx);
}

/// BitShift: direction "LEFT" or "RIGHT" (required).
void bitshift_kernel(KernelContext& ctx) {
  const std::string dir = ctx.node.s("direction", "");
  if (dir == "LEFT") return binary_kernel<Op::shift_left>(ctx);
  if (dir == "RIGHT") return binary_kernel<Op::shift_right>(ctx);
  fail(ErrorCode::invalid_model, "{}: attribute 'direction' must be LEFT or RIGHT, got '{}'", ctx.node.label(), dir);
}

/// Pow: output has the base's dtype; the exponent may have another numeric dtype.
void pow_kernel(KernelContext& ctx) {
  check_arity(ctx.node, Op::pow, ctx.num_inputs());
  const Tensor& base = ctx.in(0);
  const Tensor& expo = ctx.in(1);
  if (is_16bit_float(base.dtype()) || is_16bit_float(expo.dtype())) return run_widened_16(ctx, pow_kernel);
  const auto shape = broadcast_all(ctx);
  visit<KILN_ARITH_TYPES>(base.dtype(), ctx.node, "base", [&](auto btag) {
    using B = decltype(btag);
    visit<KILN_ARITH_TYPES>(expo.dtype(), ctx.node, "exponent", [&](auto etag) {
      using E = decltype(etag);
      Tensor& out = ctx.output(0, dtype_of<B>(), shape);
      broadcast_binary<B, B, E>(base, expo, out, [](B b, E e) { return power(b, e); });
    });
  });
}

/// Where(cond, x, y): a pure selection, so any dtype is moved by its width.
template <class T>
void where_typed(const Tensor& c, const Tensor& x, const Tensor& y, Tensor& out) {
  const bool* pc = c.data<bool>();
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  T* po = out.data<T>();
  const int64_t n = out.numel();
  if (n == 0) return;
  if (c.numel() == n && x.numel() == n && y.numel() == n) {
    parallel_tiles(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i] = pc[i] ? px[i] : py[i];
    });
    return;
  }
  const Plan p = make_plan(out.shape(), {&c.shape(), &x.shape(), &y.shape()});
  const int64_t sc = p.strides[0].back(), sx = p.strides[1].back(), sy = p.strides[2].back();
  for_each_segment(p, [&](int64_t o, const std::array<int64_t, kMaxOperands>& off, int64_t len) {
    const bool* cc = pc + off[0];
    const T* xx = px + off[1];
    const T* yy = py + off[2];
    T* oo = po + o;
    if (sc && sx && sy) {
      for (int64_t i = 0; i < len; ++i) oo[i] = cc[i] ? xx[i] : yy[i];
    } else {
      for (int64_t i = 0; i < len; ++i) oo[i] = cc[i * sc] ? xx[i * sx] : yy[i * sy];
    }
  });
}

void where_kernel(KernelContext& ctx) {
  check_arity(ctx.node, Op::where, ctx.num_inputs());
  const Tensor& c = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& y = ctx.in(2);
  if (c.dtype() != DType::boolean) unsupported_dtype(ctx.node, c.dtype(), "condition must be bool");
  if (x.dtype() != y.dtype())
    fail(ErrorCode::invalid_input, "{}: X has dtype {} but Y has {}", ctx.node.label(), dtype_name(x.dtype()),
         dtype_name(y.dtype()));
  auto shape = broadcast_sizes(ctx.node, broadcast_sizes(ctx.node, c.shape(), x.shape()), y.shape());
  Tensor& out = ctx.output(0, x.dtype(), shape);
  switch (dtype_size(x.dtype())) {
    case 1: where_typed<uint8_t>(c, x, y, out); break;
    case 2: where_typed<uint16_t>(c, x, y, out); break;
    case 4: where_typed<uint32_t>(c, x, y, out); break;
    case 8: where_typed<uint64_t>(c, x, y, out); break;
    default: unsupported_dtype(ctx.node, x.dtype(), "input 1");
  }
}

}  // namespace

/// Registers the elementwise binary family. Inference: numpy broadcast of all
/// inputs; dtype of input 0 (bool for comparisons and logic, Where: input 1).
void register_elementwise_binary(Registry& r) {
  auto add = [&](const char* name, InferFn infer, KernelFn kernel) { r.add({"", name, infer, kernel}); };
  add("Add", infer_binary<Op::add>, binary_kernel<Op::add>);
  add("Sub", infer_binary<Op::sub>, binary_kernel<Op::sub>);
  add("Mul", infer_binary<Op::mul>, binary_kernel<Op::mul>);
  add("Div", infer_binary<Op::div>, binary_kernel<Op::div>);
  add("Mod", infer_binary<Op::mod_trunc>, mod_kernel);
  add("Pow", infer_binary<Op::pow>, pow_kernel);
  add("Max", infer_binary<Op::max>, binary_kernel<Op::max>);
  add("Min", infer_binary<Op::min>, binary_kernel<Op::min>);
  add("Sum", infer_binary<Op::sum>, binary_kernel<Op::sum>);
  add("Mean", infer_binary<Op::mean>, binary_kernel<Op::mean>);
  add("Equal", infer_binary<Op::equal>, binary_kernel<Op::equal>);
  add("Less", infer_binary<Op::less>, binary_kernel<Op::less>);
  add("Greater", infer_binary<Op::greater>, binary_kernel<Op::greater>);
  add("LessOrEqual", infer_binary<Op::less_eq>, binary_kernel<Op::less_eq>);
  add("GreaterOrEqual", infer_binary<Op::greater_eq>, binary_kernel<Op::greater_eq>);
  add("And", infer_binary<Op::logic_and>, binary_kernel<Op::logic_and>);
  add("Or", infer_binary<Op::logic_or>, binary_kernel<Op::logic_or>);
  add("Xor", infer_binary<Op::logic_xor>, binary_kernel<Op::logic_xor>);
  add("BitwiseAnd", infer_binary<Op::bit_and>, binary_kernel<Op::bit_and>);
  add("BitwiseOr", infer_binary<Op::bit_or>, binary_kernel<Op::bit_or>);
  add("BitwiseXor", infer_binary<Op::bit_xor>, binary_kernel<Op::bit_xor>);
  add("BitShift", infer_binary<Op::shift_left>, bitshift_kernel);
  add("Where", infer_binary<Op::where>, where_kernel);
}

}  // namespace kiln::ops

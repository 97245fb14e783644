// Reductions (https://onnx.ai/onnx/operators/, opset 18 forms): ReduceMean,
// ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, and ArgMax / ArgMin (13).
//
// Reduce*: input 0 data, optional input 1 `axes` (int64; the parser moves the
// attribute of older opsets there), attributes keepdims (default 1) and
// noop_with_empty_axes (default 0). Empty or absent axes reduce every axis,
// unless noop_with_empty_axes=1: then no axis is reduced and each output
// element is the reduction of the single input element at its position
// (ReduceSumSquare gives x*x, ReduceL1 |x|, ReduceLogSum log x, ... — the
// ONNX reference implementation's behaviour). Reducing over a zero-sized axis
// gives the identity of the reduction (0 for sums, 1 for Prod, -inf/+inf for
// Max/Min (lowest/highest for integers), -inf for LogSum/LogSumExp, NaN for
// the float Mean). Max and Min propagate NaN.
//
// dtypes: float32, float64, int32, int64 (output = input dtype), and bool
// for ReduceMax / ReduceMin (any / all); float16 and
// bfloat16 are computed in float32 and rounded back. Float sums accumulate
// in double, integer ones in int64 (wrapping to the output type).
//
// ArgMax/ArgMin: attributes axis (default 0), keepdims (1),
// select_last_index (0); int64 output. NaN counts as the extreme value (the
// first NaN wins, as in numpy); an empty axis is an error.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/registry.h"
#include "ops/util.h"

namespace kiln::ops {

// Defined in elementwise_unary.cpp (see there).
bool is_16bit_float(DType t);
void run_widened_16(KernelContext& ctx, KernelFn kernel);

namespace {

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else static_assert(sizeof(T) == 0, "no DType for this type");
}

/// Calls f(T{}) for the T among Ts whose DType is t; unsupported_dtype otherwise.
template <class... Ts, class F>
void visit(DType t, const ir::Node& n, const char* where, F&& f) {
  bool hit = ((t == dtype_of<Ts>() && (f(Ts{}), true)) || ...);
  if (!hit) unsupported_dtype(n, t, where);
}

#define KILN_REDUCE_TYPES float, double, int32_t, int64_t

bool supported(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64 || is_16bit_float(t);
}

enum class R { mean, sum, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };

// ---------------------------------------------------------------- axes and shapes

/// Which axes a Reduce* node reduces, given the axes list (nullopt: axes
/// input present but not known). Returns nullopt when unknown.
std::optional<std::vector<bool>> reduced_axes(const ir::Node& n, const std::optional<std::vector<int64_t>>& axes,
                                              int64_t rank) {
  if (!axes) return std::nullopt;
  const bool noop = n.i("noop_with_empty_axes", 0) != 0;
  std::vector<bool> red(static_cast<size_t>(rank), axes->empty() && !noop);
  for (int64_t a : *axes) red[static_cast<size_t>(normalize_axis(n, a, rank, "axes entry"))] = true;
  return red;
}

/// Output dims of a reduction: reduced dims become 1 (keepdims) or vanish.
template <class D>
std::vector<D> reduced_shape(const std::vector<D>& in, const std::vector<bool>& red, bool keepdims, D one) {
  std::vector<D> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!red[i]) out.push_back(in[i]);
    else if (keepdims) out.push_back(one);
  }
  return out;
}

template <R OP>
std::vector<OutType> infer_reduce(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  if (ctx.num_inputs() < 1 || ctx.num_inputs() > 2)
    fail(ErrorCode::invalid_model, "{}: expects 1 or 2 inputs, got {}", n.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  const bool bool_ok = (OP == R::max || OP == R::min) && x.dtype == DType::boolean;
  if (!supported(x.dtype) && !bool_ok) unsupported_dtype(n, x.dtype, "input 0");
  if (!x.shape) return {OutType{x.dtype, std::nullopt}};
  const bool keepdims = n.i("keepdims", 1) != 0;
  std::optional<std::vector<int64_t>> axes = std::vector<int64_t>{};
  if (ctx.has(1)) {
    const InType& a = ctx.inputs[1];
    if (a.dtype != DType::i64 && a.dtype != DType::i32)
      fail(ErrorCode::invalid_model, "{}: axes must be int64, got {}", n.label(), dtype_name(a.dtype));
    axes = a.value ? std::optional(to_int64s(*a.value)) : std::nullopt;
  }
  const auto red = reduced_axes(n, axes, static_cast<int64_t>(x.shape->size()));
  if (red) return {OutType{x.dtype, reduced_shape(*x.shape, *red, keepdims, ir::Dim::known(1))}};
  if (!keepdims) return {OutType{x.dtype, std::nullopt}};
  // Axes unknown but rank kept: dims of size 1 stay 1, the others are unknown.
  ir::Shape s = *x.shape;
  for (auto& d : s)
    if (!(d.is_static() && d.value == 1)) d = ir::Dim::sym("");
  return {OutType{x.dtype, s}};
}

// ---------------------------------------------------------------- the reduction walk

/// The input viewed as blocks of consecutive dims that are all reduced or all
/// kept (size-1 dims dropped). Input strides are row-major; output strides
/// are those of the kept blocks in the output and 0 for reduced ones.
struct Blocks {
  std::vector<int64_t> size, in_stride, out_stride;
  std::vector<bool> reduced;
};

Blocks make_blocks(const std::vector<int64_t>& shape, const std::vector<bool>& red) {
  Blocks b;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!b.size.empty() && b.reduced.back() == red[i]) {
      b.size.back() *= shape[i];
    } else {
      b.size.push_back(shape[i]);
      b.reduced.push_back(red[i]);
    }
  }
  if (b.size.empty()) {  // a single element
    b.size.push_back(1);
    b.reduced.push_back(false);
  }
  const size_t k = b.size.size();
  b.in_stride.assign(k, 1);
  b.out_stride.assign(k, 0);
  int64_t is = 1, os = 1;
  for (size_t i = k; i-- > 0;) {
    b.in_stride[i] = is;
    is *= b.size[i];
    if (!b.reduced[i]) {
      b.out_stride[i] = os;
      os *= b.size[i];
    }
  }
  return b;
}

/// Calls step(out_index, x_pointer, count, reduced) for every innermost run:
/// `count` contiguous inputs that all fold into out_index (reduced) or each
/// into out_index + j (kept). The outermost kept block is split across threads
/// (disjoint outputs); an outermost reduced block runs on one thread.
template <class Step>
void walk(const Blocks& b, const void* base, size_t elem, Step&& step) {
  const size_t k = b.size.size();
  auto rec = [&](auto&& self, size_t level, int64_t in_off, int64_t out_off) -> void {
    if (level + 1 == k) {
      step(out_off, static_cast<const char*>(base) + in_off * static_cast<int64_t>(elem), b.size[level],
           static_cast<bool>(b.reduced[level]));
      return;
    }
    for (int64_t i = 0; i < b.size[level]; ++i)
      self(self, level + 1, in_off + i * b.in_stride[level], out_off + i * b.out_stride[level]);
  };
  if (k > 1 && !b.reduced[0] && b.size[0] > 1 && prod(b.size) >= (1 << 16)) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < b.size[0]; ++i) rec(rec, 1, i * b.in_stride[0], i * b.out_stride[0]);
  } else {
    rec(rec, 0, 0, 0);
  }
}

template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <R OP, class A>
A identity() {
  if constexpr (OP == R::prod) return A(1);
  else if constexpr (OP == R::max) return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                                                : std::numeric_limits<A>::lowest();
  else if constexpr (OP == R::min) return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                                                : std::numeric_limits<A>::max();
  else return A(0);
}

/// acc (op) x for the single-pass reductions.
template <R OP, class A>
inline A combine(A acc, A x) {
  if constexpr (OP == R::prod) return acc * x;
  else if constexpr (OP == R::max) {
    if constexpr (std::is_floating_point_v<A>)
      if (std::isnan(x)) return x;
    return acc < x ? x : acc;
  } else if constexpr (OP == R::min) {
    if constexpr (std::is_floating_point_v<A>)
      if (std::isnan(x)) return x;
    return x < acc ? x : acc;
  } else if constexpr (OP == R::l1) return acc + (x < A(0) ? -x : x);
  else if constexpr (OP == R::l2 || OP == R::sum_square) return acc + x * x;
  else return acc + x;  // sum, mean, log_sum
}

/// acc[o] folds the inputs that map to o, for single-pass OP.
template <R OP, class T>
void accumulate(const Blocks& b, const Tensor& x, std::vector<acc_t<T>>& acc) {
  using A = acc_t<T>;
  A* pa = acc.data();
  walk(b, x.raw(), sizeof(T), [&](int64_t o, const void* p, int64_t n, bool reduced) {
    const T* px = static_cast<const T*>(p);
    if (reduced) {
      A a = pa[o];
      for (int64_t j = 0; j < n; ++j) a = combine<OP, A>(a, static_cast<A>(px[j]));
      pa[o] = a;
    } else {
      for (int64_t j = 0; j < n; ++j) pa[o + j] = combine<OP, A>(pa[o + j], static_cast<A>(px[j]));
    }
  });
}

/// acc = log(sum(exp(x - max))) + max per output, the overflow-free LogSumExp.
template <class T>
void log_sum_exp(const Blocks& b, const Tensor& x, std::vector<double>& out) {
  std::vector<acc_t<T>> mx(out.size(), identity<R::max, acc_t<T>>());
  accumulate<R::max, T>(b, x, mx);
  std::vector<double> m(mx.begin(), mx.end());
  std::fill(out.begin(), out.end(), 0.0);
  double* po = out.data();
  walk(b, x.raw(), sizeof(T), [&](int64_t o, const void* p, int64_t n, bool reduced) {
    const T* px = static_cast<const T*>(p);
    if (reduced) {
      const double mo = m[o];
      double s = po[o];
      for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(px[j]) - mo);
      po[o] = s;
    } else {
      for (int64_t j = 0; j < n; ++j) po[o + j] += std::exp(static_cast<double>(px[j]) - m[o + j]);
    }
  });
  // An infinite or NaN max is the answer itself (all -inf, some +inf, or NaN).
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::isfinite(m[i]) ? std::log(out[i]) + m[i] : m[i];
}

/// Converts a finished double result to the output dtype (truncating for integers).
template <class T>
T to_out(double v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v)) return T(0);
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    return static_cast<T>(v);
  }
}

template <R OP, class T>
void reduce_typed(KernelContext& ctx, const std::vector<bool>& red, bool keepdims) {
  using A = acc_t<T>;
  const Tensor& x = ctx.in(0);
  Tensor& out = ctx.output(0, x.dtype(), reduced_shape<int64_t>(x.shape(), red, keepdims, 1));
  const int64_t on = out.numel();
  T* po = out.data<T>();
  int64_t count = 1;  // inputs per output
  for (size_t i = 0; i < red.size(); ++i)
    if (red[i]) count *= x.shape()[i];
  const Blocks b = make_blocks(x.shape(), red);
  if constexpr (OP == R::log_sum_exp) {
    std::vector<double> r(static_cast<size_t>(on), -std::numeric_limits<double>::infinity());
    if (x.numel() > 0) log_sum_exp<T>(b, x, r);
    for (int64_t i = 0; i < on; ++i) po[i] = to_out<T>(r[i]);
    return;
  } else {
    std::vector<A> acc(static_cast<size_t>(on), identity<OP, A>());
    if (x.numel() > 0) accumulate<OP, T>(b, x, acc);
    for (int64_t i = 0; i < on; ++i) {
      const A a = acc[i];
      if constexpr (OP == R::mean) {
        if constexpr (std::is_floating_point_v<T>) po[i] = static_cast<T>(a / static_cast<double>(count));
        else po[i] = count ? static_cast<T>(a / count) : T(0);
      } else if constexpr (OP == R::l2) {
        po[i] = to_out<T>(std::sqrt(static_cast<double>(a)));
      } else if constexpr (OP == R::log_sum) {
        po[i] = to_out<T>(std::log(static_cast<double>(a)));
      } else if constexpr ((OP == R::max || OP == R::min) && std::is_integral_v<T>) {
        // Only the empty-set identity (int64 lowest/max) lies outside T's range.
        po[i] = static_cast<T>(std::clamp<A>(a, std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()));
      } else {
        po[i] = static_cast<T>(a);  // integer sums and products wrap to the output width
      }
    }
  }
}

template <R OP>
void reduce_kernel(KernelContext& ctx);

/// ReduceMax / ReduceMin on bool (opset 20): any / all, computed on an int32
/// copy (0/1) and converted back.
template <R OP>
void reduce_bool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor wide(DType::i32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) wide.data<int32_t>()[i] = x.data<bool>()[i] ? 1 : 0;
  std::vector<const Tensor*> ptrs{&wide};
  if (ctx.has(1)) ptrs.push_back(&ctx.in(1));
  KernelContext inner(ctx.node, ptrs, nullptr);
  reduce_kernel<OP>(inner);
  const Tensor& r = inner.outputs()[0];
  Tensor& out = ctx.output(0, DType::boolean, r.shape());
  // An empty reduction yields int32 lowest (Max) / highest (Min): false / true.
  for (int64_t i = 0; i < r.numel(); ++i) out.data<bool>()[i] = r.data<int32_t>()[i] > 0;
}

template <R OP>
void reduce_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (is_16bit_float(x.dtype())) return run_widened_16(ctx, reduce_kernel<OP>);
  if constexpr (OP == R::max || OP == R::min)
    if (x.dtype() == DType::boolean) return reduce_bool<OP>(ctx);
  std::vector<int64_t> axes;
  if (ctx.has(1)) {
    const Tensor& a = ctx.in(1);
    if (a.dtype() != DType::i64 && a.dtype() != DType::i32)
      fail(ErrorCode::invalid_input, "{}: axes must be int64, got {}", n.label(), dtype_name(a.dtype()));
    axes = to_int64s(a);
  }
  const auto red = *reduced_axes(n, axes, x.rank());
  const bool keepdims = n.i("keepdims", 1) != 0;
  visit<KILN_REDUCE_TYPES>(x.dtype(), n, "input 0", [&](auto tag) { reduce_typed<OP, decltype(tag)>(ctx, red, keepdims); });
}

// ---------------------------------------------------------------- ArgMax / ArgMin

std::vector<OutType> infer_arg(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  if (ctx.num_inputs() != 1) fail(ErrorCode::invalid_model, "{}: expects 1 input, got {}", n.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  if (!supported(x.dtype)) unsupported_dtype(n, x.dtype, "input 0");
  if (!x.shape) return {OutType{DType::i64, std::nullopt}};
  const int64_t rank = static_cast<int64_t>(x.shape->size());
  std::vector<bool> red(x.shape->size(), false);
  red[static_cast<size_t>(normalize_axis(n, n.i("axis", 0), rank))] = true;
  return {OutType{DType::i64, reduced_shape(*x.shape, red, n.i("keepdims", 1) != 0, ir::Dim::known(1))}};
}

/// Whether v replaces the current best b (max: MAX=true). NaN is the extreme;
/// ties and NaN-vs-NaN keep the first unless `last`.
template <bool MAX, class T>
inline bool better(T v, T b, bool last) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(b)) return last && std::isnan(v);
    if (std::isnan(v)) return true;
  }
  if (v == b) return last;
  return MAX ? v > b : v < b;
}

template <bool MAX, class T>
void arg_typed(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const int64_t axis = normalize_axis(n, n.i("axis", 0), x.rank());
  const bool last = n.i("select_last_index", 0) != 0;
  const auto& s = x.shape();
  const int64_t outer = prod(s, 0, axis), len = s[axis], inner = prod(s, axis + 1);
  std::vector<bool> red(s.size(), false);
  red[axis] = true;
  Tensor& out = ctx.output(0, DType::i64, reduced_shape<int64_t>(s, red, n.i("keepdims", 1) != 0, 1));
  if (out.numel() == 0) return;
  if (len == 0)
    fail(ErrorCode::invalid_input, "{}: cannot take {} over axis {} of size 0 ({})", n.label(), n.op_type, axis,
         x.describe());
  const T* px = x.data<T>();
  int64_t* po = out.data<int64_t>();
  std::vector<T> best(static_cast<size_t>(inner));
  for (int64_t o = 0; o < outer; ++o) {
    const T* row = px + o * len * inner;
    int64_t* idx = po + o * inner;
    for (int64_t j = 0; j < inner; ++j) {
      best[j] = row[j];
      idx[j] = 0;
    }
    for (int64_t k = 1; k < len; ++k)
      for (int64_t j = 0; j < inner; ++j) {
        const T v = row[k * inner + j];
        if (better<MAX>(v, best[j], last)) {
          best[j] = v;
          idx[j] = k;
        }
      }
  }
}

template <bool MAX>
void arg_kernel(KernelContext& ctx) {
  if (is_16bit_float(ctx.in(0).dtype())) return run_widened_16(ctx, arg_kernel<MAX>);
  visit<KILN_REDUCE_TYPES>(ctx.in(0).dtype(), ctx.node, "input 0", [&](auto tag) { arg_typed<MAX, decltype(tag)>(ctx); });
}

}  // namespace

/// Registers the reduction family (see the file comment).
void register_reduce(Registry& r) {
  r.add({"", "ReduceMean", infer_reduce<R::mean>, reduce_kernel<R::mean>});
  r.add({"", "ReduceSum", infer_reduce<R::sum>, reduce_kernel<R::sum>});
  r.add({"", "ReduceMax", infer_reduce<R::max>, reduce_kernel<R::max>});
  r.add({"", "ReduceMin", infer_reduce<R::min>, reduce_kernel<R::min>});
  r.add({"", "ReduceProd", infer_reduce<R::prod>, reduce_kernel<R::prod>});
  r.add({"", "ReduceL1", infer_reduce<R::l1>, reduce_kernel<R::l1>});
  r.add({"", "ReduceL2", infer_reduce<R::l2>, reduce_kernel<R::l2>});
  r.add({"", "ReduceLogSum", infer_reduce<R::log_sum>, reduce_kernel<R::log_sum>});
  r.add({"", "ReduceLogSumExp", infer_reduce<R::log_sum_exp>, reduce_kernel<R::log_sum_exp>});
  r.add({"", "ReduceSumSquare", infer_reduce<R::sum_square>, reduce_kernel<R::sum_square>});
  r.add({"", "ArgMax", infer_arg, arg_kernel<true>});
  r.add({"", "ArgMin", infer_arg, arg_kernel<false>});
}

}  // namespace kiln::ops

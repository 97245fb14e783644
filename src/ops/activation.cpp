// Activation functions (https://onnx.ai/onnx/operators/, newest opset of each):
// Relu, LeakyRelu, PRelu, Sigmoid, HardSigmoid, HardSwish, Tanh, Elu, Selu,
// Celu, Softplus, Softsign, Gelu (opset 20, approximate = none | tanh), Mish,
// ThresholdedRelu and Clip (opset 13 form: optional scalar min / max inputs;
// the parser turns the opset < 11 attributes into those inputs).
//
// dtypes: float32 and float64 for all; Relu, PRelu and Clip also take the
// 8- to 64-bit integers (Relu on integer tensors and Clip on indices occur in
// exported graphs). float16 / bfloat16 inputs are computed in float32 and
// the result rounded back. Output shape and dtype = input X's. Float results are computed in
// the input's precision with numerically stable forms (Sigmoid, Softplus
// never overflow exp for large |x|).
#include <cmath>
#include <limits>
#include <numbers>
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
  else if constexpr (std::is_same_v<T, int8_t>) return DType::i8;
  else if constexpr (std::is_same_v<T, int16_t>) return DType::i16;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<T, uint16_t>) return DType::u16;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::u32;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::u64;
  else static_assert(sizeof(T) == 0, "no DType for this type");
}

/// Calls f(T{}) for the T among Ts whose DType is t; unsupported_dtype otherwise.
template <class... Ts, class F>
void visit(DType t, const ir::Node& n, const char* where, F&& f) {
  bool hit = ((t == dtype_of<Ts>() && (f(Ts{}), true)) || ...);
  if (!hit) unsupported_dtype(n, t, where);
}

#define KILN_ACT_FLOAT float, double
#define KILN_ACT_NUMERIC float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

template <class... Ts>
bool dtype_in(DType t) {
  return ((t == dtype_of<Ts>()) || ...);
}
bool is_float(DType t) { return dtype_in<KILN_ACT_FLOAT>(t) || is_16bit_float(t); }
bool is_numeric(DType t) { return dtype_in<KILN_ACT_NUMERIC>(t) || is_16bit_float(t); }

/// x < 0, without a comparison that is always false for unsigned types.
template <class T>
constexpr bool negative(T x) {
  if constexpr (std::is_unsigned_v<T>) return false;
  else return x < T(0);
}

constexpr int64_t kTile = 16384;
constexpr int64_t kParallelMin = 1 << 15;

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

// ---------------------------------------------------------------- pointwise

enum class Act {
  relu, leaky_relu, sigmoid, hard_sigmoid, hard_swish, tanh, elu, selu, celu, softplus, softsign, gelu,
  gelu_tanh, mish, thresholded_relu
};

/// Attribute values of one node, in the compute type.
template <class T>
struct Params {
  T alpha, beta, gamma;
};

/// ONNX default attribute values of each activation.
Params<double> read_params(Act op, const ir::Node& n) {
  switch (op) {
    case Act::leaky_relu: return {n.f("alpha", 0.01f), 0, 0};
    case Act::hard_sigmoid: return {n.f("alpha", 0.2f), n.f("beta", 0.5f), 0};
    case Act::elu: case Act::celu: case Act::thresholded_relu: return {n.f("alpha", 1.0f), 0, 0};
    case Act::selu: return {n.f("alpha", 1.67326319217681884765625f), 0, n.f("gamma", 1.05070102214813232421875f)};
    default: return {0, 0, 0};
  }
}

/// log(1 + exp(x)) without overflow.
template <class T>
inline T softplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

template <Act OP, class T>
inline T activate(T x, const Params<T>& p) {
  if constexpr (OP == Act::relu) {
    return negative(x) ? T(0) : x;  // NaN passes through, as max(0, NaN) does in ONNX Runtime
  } else if constexpr (OP == Act::leaky_relu) {
    return x < T(0) ? p.alpha * x : x;
  } else if constexpr (OP == Act::sigmoid) {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    const T e = std::exp(x);
    return e / (T(1) + e);
  } else if constexpr (OP == Act::hard_sigmoid) {
    return std::max(T(0), std::min(T(1), p.alpha * x + p.beta));
  } else if constexpr (OP == Act::hard_swish) {
    return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
  } else if constexpr (OP == Act::tanh) {
    return std::tanh(x);
  } else if constexpr (OP == Act::elu) {
    return x < T(0) ? p.alpha * std::expm1(x) : x;
  } else if constexpr (OP == Act::selu) {
    return x > T(0) ? p.gamma * x : p.gamma * p.alpha * std::expm1(x);
  } else if constexpr (OP == Act::celu) {
    return std::max(T(0), x) + std::min(T(0), p.alpha * std::expm1(x / p.alpha));
  } else if constexpr (OP == Act::softplus) {
    return softplus(x);
  } else if constexpr (OP == Act::softsign) {
    return x / (T(1) + std::fabs(x));
  } else if constexpr (OP == Act::gelu) {
    return T(0.5) * x * (T(1) + std::erf(x * T(std::numbers::sqrt2 / 2)));
  } else if constexpr (OP == Act::gelu_tanh) {
    const T k = T(0.79788456080286535587989211986876);  // sqrt(2 / pi)
    return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
  } else if constexpr (OP == Act::mish) {
    return x * std::tanh(softplus(x));
  } else if constexpr (OP == Act::thresholded_relu) {
    return x > p.alpha ? x : T(0);
  }
}

constexpr bool takes_integers(Act op) { return op == Act::relu; }

template <Act OP>
std::vector<OutType> infer_pointwise(const InferContext& ctx) {
  if (ctx.num_inputs() != 1)
    fail(ErrorCode::invalid_model, "{}: expects 1 input, got {}", ctx.node.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  if (!(takes_integers(OP) ? is_numeric(x.dtype) : is_float(x.dtype))) unsupported_dtype(ctx.node, x.dtype, "input 0");
  return {OutType{x.dtype, x.shape}};
}

template <Act OP, class T>
void run_pointwise(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Params<double> pd = read_params(OP, ctx.node);
  const Params<T> p{static_cast<T>(pd.alpha), static_cast<T>(pd.beta), static_cast<T>(pd.gamma)};
  Tensor& out = ctx.output(0, x.dtype(), x.shape());
  const T* px = x.data<T>();
  T* po = out.data<T>();
  parallel_tiles(x.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = activate<OP, T>(px[i], p);
  });
}

template <Act OP>
void pointwise_kernel(KernelContext& ctx) {
  const DType dt = ctx.in(0).dtype();
  if (is_16bit_float(dt)) return run_widened_16(ctx, pointwise_kernel<OP>);
  auto body = [&](auto tag) { run_pointwise<OP, decltype(tag)>(ctx); };
  if constexpr (takes_integers(OP)) visit<KILN_ACT_NUMERIC>(dt, ctx.node, "input 0", body);
  else visit<KILN_ACT_FLOAT>(dt, ctx.node, "input 0", body);
}

// ---------------------------------------------------------------- Gelu

/// Gelu's `approximate`: "none" (erf form) or "tanh"; anything else is unsupported.
bool gelu_uses_tanh(const ir::Node& n) {
  const std::string a = n.s("approximate", "none");
  if (a != "none" && a != "tanh")
    fail(ErrorCode::unsupported, "{}: attribute 'approximate' = '{}' is not supported (opset {})", n.label(), a,
         n.opset);
  return a == "tanh";
}

std::vector<OutType> infer_gelu(const InferContext& ctx) {
  gelu_uses_tanh(ctx.node);
  return infer_pointwise<Act::gelu>(ctx);
}

void gelu_kernel(KernelContext& ctx) {
  gelu_uses_tanh(ctx.node) ? pointwise_kernel<Act::gelu_tanh>(ctx) : pointwise_kernel<Act::gelu>(ctx);
}

// ---------------------------------------------------------------- PRelu

/// PRelu(X, slope): slope broadcasts to X (unidirectionally); y = x < 0 ? slope * x : x.
std::vector<OutType> infer_prelu(const InferContext& ctx) {
  if (ctx.num_inputs() != 2)
    fail(ErrorCode::invalid_model, "{}: expects 2 inputs, got {}", ctx.node.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  const InType& s = ctx.in(1);
  if (!is_numeric(x.dtype)) unsupported_dtype(ctx.node, x.dtype, "input 0");
  if (s.dtype != x.dtype)
    fail(ErrorCode::invalid_model, "{}: slope has dtype {} but X has {}", ctx.node.label(), dtype_name(s.dtype),
         dtype_name(x.dtype));
  auto b = broadcast_shapes(ctx.node, x.shape, s.shape);
  if (b && x.shape && b->size() != x.shape->size())
    fail(ErrorCode::invalid_model, "{}: slope {} has a higher rank than X {}", ctx.node.label(), ir::shape_str(s.shape),
         ir::shape_str(x.shape));
  return {OutType{x.dtype, x.shape}};
}

template <class T>
void run_prelu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& s = ctx.in(1);
  if (broadcast_sizes(ctx.node, x.shape(), s.shape()) != x.shape())
    fail(ErrorCode::invalid_input, "{}: slope {} does not broadcast to X {}", ctx.node.label(), s.describe(),
         x.describe());
  Tensor& out = ctx.output(0, x.dtype(), x.shape());
  const T* px = x.data<T>();
  const T* ps = s.data<T>();
  T* po = out.data<T>();
  const int64_t n = x.numel();
  if (n == 0) return;
  if (s.numel() == 1 || s.numel() == n) {  // scalar slope or one slope per element
    const int64_t ss = s.numel() == 1 ? 0 : 1;
    parallel_tiles(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) po[i] = negative(px[i]) ? static_cast<T>(ps[i * ss] * px[i]) : px[i];
    });
    return;
  }
  // General case: walk X row by row (last dim), keeping the slope offset with an odometer.
  const auto& xs = x.shape();
  const size_t r = xs.size();
  std::vector<int64_t> sst(r, 0);  // slope strides aligned to X's dims, 0 where broadcast
  int64_t st = 1;
  for (size_t i = s.shape().size(); i-- > 0;) {
    const size_t xi = i + r - s.shape().size();
    sst[xi] = s.shape()[i] == 1 ? 0 : st;
    st *= s.shape()[i];
  }
  const int64_t inner = xs.back(), rows = n / inner, inner_stride = sst.back();
  std::vector<int64_t> idx(r, 0);
  int64_t soff = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = px + row * inner;
    T* orow = po + row * inner;
    for (int64_t j = 0; j < inner; ++j)
      orow[j] = negative(xr[j]) ? static_cast<T>(ps[soff + j * inner_stride] * xr[j]) : xr[j];
    for (size_t d = r - 1; d-- > 0;) {  // advance the odometer over the outer dims
      soff += sst[d];
      if (++idx[d] < xs[d]) break;
      soff -= sst[d] * xs[d];
      idx[d] = 0;
    }
  }
}

void prelu_kernel(KernelContext& ctx) {
  if (is_16bit_float(ctx.in(0).dtype())) return run_widened_16(ctx, prelu_kernel);
  visit<KILN_ACT_NUMERIC>(ctx.in(0).dtype(), ctx.node, "input 0", [&](auto tag) {
    if (ctx.in(1).dtype() != ctx.in(0).dtype())
      fail(ErrorCode::invalid_input, "{}: slope has dtype {} but X has {}", ctx.node.label(),
           dtype_name(ctx.in(1).dtype()), dtype_name(ctx.in(0).dtype()));
    run_prelu<decltype(tag)>(ctx);
  });
}

// ---------------------------------------------------------------- Clip

/// Clip(X, min?, max?): y = min(max(x, min), max); min > max gives max
/// everywhere (as the opset 13 spec says); NaN passes through.
std::vector<OutType> infer_clip(const InferContext& ctx) {
  if (ctx.num_inputs() < 1 || ctx.num_inputs() > 3)
    fail(ErrorCode::invalid_model, "{}: expects 1 to 3 inputs, got {}", ctx.node.label(), ctx.num_inputs());
  const InType& x = ctx.in(0);
  if (!is_numeric(x.dtype)) unsupported_dtype(ctx.node, x.dtype, "input 0");
  for (size_t i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has(i)) continue;
    if (ctx.inputs[i].dtype != x.dtype)
      fail(ErrorCode::invalid_model, "{}: input {} has dtype {} but X has {}", ctx.node.label(), i,
           dtype_name(ctx.inputs[i].dtype), dtype_name(x.dtype));
    if (ctx.inputs[i].shape && ir::is_static(*ctx.inputs[i].shape) && prod(ir::to_sizes(*ctx.inputs[i].shape)) != 1)
      fail(ErrorCode::invalid_model, "{}: {} must be a scalar, got shape {}", ctx.node.label(), i == 1 ? "min" : "max",
           ir::shape_str(ctx.inputs[i].shape));
  }
  return {OutType{x.dtype, x.shape}};
}

template <class T>
void run_clip(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  auto bound = [&](size_t i, T def) {
    if (!ctx.has(i)) return def;
    const Tensor& b = ctx.in(i);
    if (b.dtype() != x.dtype() || b.numel() != 1)
      fail(ErrorCode::invalid_input, "{}: {} must be a one-element {} tensor, got {}", ctx.node.label(),
           i == 1 ? "min" : "max", dtype_name(x.dtype()), b.describe());
    return b.data<T>()[0];
  };
  const T lo = bound(1, std::numeric_limits<T>::lowest());
  const T hi = bound(2, std::numeric_limits<T>::max());
  Tensor& out = ctx.output(0, x.dtype(), x.shape());
  const T* px = x.data<T>();
  T* po = out.data<T>();
  parallel_tiles(x.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T v = px[i] < lo ? lo : px[i];
      po[i] = hi < v ? hi : v;
    }
  });
}

void clip_kernel(KernelContext& ctx) {
  if (is_16bit_float(ctx.in(0).dtype())) return run_widened_16(ctx, clip_kernel);
  visit<KILN_ACT_NUMERIC>(ctx.in(0).dtype(), ctx.node, "input 0", [&](auto tag) { run_clip<decltype(tag)>(ctx); });
}

template <Act OP>
void add(Registry& r, const char* name) {
  r.add({"", name, infer_pointwise<OP>, pointwise_kernel<OP>});
}

}  // namespace

/// Registers the activation family (see the file comment).
void register_activation(Registry& r) {
  add<Act::relu>(r, "Relu");
  add<Act::leaky_relu>(r, "LeakyRelu");
  add<Act::sigmoid>(r, "Sigmoid");
  add<Act::hard_sigmoid>(r, "HardSigmoid");
  add<Act::hard_swish>(r, "HardSwish");
  add<Act::tanh>(r, "Tanh");
  add<Act::elu>(r, "Elu");
  add<Act::selu>(r, "Selu");
  add<Act::celu>(r, "Celu");
  add<Act::softplus>(r, "Softplus");
  add<Act::softsign>(r, "Softsign");
  add<Act::mish>(r, "Mish");
  add<Act::thresholded_relu>(r, "ThresholdedRelu");
  r.add({"", "Gelu", infer_gelu, gelu_kernel});
  r.add({"", "PRelu", infer_prelu, prelu_kernel});
  r.add({"", "Clip", infer_clip, clip_kernel});
}

}  // namespace kiln::ops

// Normalizations: BatchNormalization-15 (inference only), InstanceNormalization-6,
// LayerNormalization-17, GroupNormalization-18/21 and LpNormalization-1.
// X is float32 or float64; per-channel parameters may be any float type and
// are read as double. Statistics are accumulated in double, which is at least
// as precise as any stash_type the spec allows.
#include <omp.h>

#include <cmath>

#include "ops/util.h"

namespace kiln::ops {

namespace {

bool float_x(DType t) { return t == DType::f32 || t == DType::f64; }

void check_x(const ir::Node& n, DType t) {
  if (!float_x(t)) unsupported_dtype(n, t, "input X");
}

/// A float parameter tensor (scale, bias, mean, var) read as doubles.
std::vector<double> as_doubles(const ir::Node& n, const Tensor& t, const char* what) {
  if (!dtype_is_float(t.dtype())) unsupported_dtype(n, t.dtype(), what);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = element_as_double(t, i);
  return v;
}

/// A parameter with one value per channel (or a single value broadcast).
std::vector<double> per_channel(const ir::Node& n, const Tensor& t, int64_t C, const char* what) {
  std::vector<double> v = as_doubles(n, t, what);
  if (v.size() == 1 && C != 1) v.assign(static_cast<size_t>(C), v[0]);
  if (static_cast<int64_t>(v.size()) != C)
    fail(ErrorCode::invalid_input, "{}: {} {} must have {} elements (one per channel)", n.label(), what,
         t.describe(), C);
  return v;
}

/// Mean and 1/sqrt(var + eps) of n values (population variance, two passes).
template <class T>
void moments(const T* x, int64_t n, double eps, double& mean, double& inv_std) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  mean = n ? s / static_cast<double>(n) : 0.0;
  double q = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    q += d * d;
  }
  inv_std = 1.0 / std::sqrt((n ? q / static_cast<double>(n) : 0.0) + eps);
}

/// Shape inference for ops whose first output has X's type and shape.
std::vector<OutType> infer_same_as_x(const InferContext& c) {
  check_x(c.node, c.in(0).dtype);
  std::vector<OutType> out(c.num_outputs, OutType{c.in(0).dtype, c.in(0).shape});
  return out;
}

/// Y[n, c, i] = X[n, c, i] * a[c] + b[c] over a [N, C, inner] view.
template <class T>
void affine_per_channel(const T* x, T* y, int64_t N, int64_t C, int64_t inner, const std::vector<double>& a,
                        const std::vector<double>& b) {
#pragma omp parallel for schedule(static) if (N * C * inner > (1 << 16))
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const T ac = static_cast<T>(a[nc % C]), bc = static_cast<T>(b[nc % C]);
    const T* xp = x + nc * inner;
    T* yp = y + nc * inner;
    for (int64_t i = 0; i < inner; ++i) yp[i] = xp[i] * ac + bc;
  }
}

// ---------------------------------------------------------------- BatchNormalization

std::vector<OutType> infer_batch_norm(const InferContext& c) {
  if (c.node.i("training_mode", 0) != 0)
    fail(ErrorCode::unsupported, "{}: training_mode=1 is not supported (inference only)", c.node.label());
  check_x(c.node, c.in(0).dtype);
  if (c.num_outputs > 1)
    fail(ErrorCode::unsupported, "{}: the training outputs (running mean/var) are not supported", c.node.label());
  return {OutType{c.in(0).dtype, c.in(0).shape}};
}

/// Y = (X - mean) / sqrt(var + epsilon) * scale + B, per channel (dim 1).
void kernel_batch_norm(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  if (n.i("training_mode", 0) != 0)
    fail(ErrorCode::unsupported, "{}: training_mode=1 is not supported (inference only)", n.label());
  const Tensor& x = ctx.in(0);
  check_x(n, x.dtype());
  if (x.rank() < 2) fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, ...]", n.label(), x.describe());
  const int64_t N = x.dim(0), C = x.dim(1), inner = prod(x.shape(), 2);
  const double eps = n.f("epsilon", 1e-5f);
  const auto scale = per_channel(n, ctx.in(1), C, "scale");
  const auto bias = per_channel(n, ctx.in(2), C, "B");
  const auto mean = per_channel(n, ctx.in(3), C, "input_mean");
  const auto var = per_channel(n, ctx.in(4), C, "input_var");
  std::vector<double> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    a[c] = scale[c] / std::sqrt(var[c] + eps);
    b[c] = bias[c] - mean[c] * a[c];
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.dtype() == DType::f32)
    affine_per_channel(x.data<float>(), y.data<float>(), N, C, inner, a, b);
  else
    affine_per_channel(x.data<double>(), y.data<double>(), N, C, inner, a, b);
}

// ---------------------------------------------------------------- Instance / Group

/// Normalizes each of `groups` consecutive blocks of `block` values of each
/// batch item; then applies scale/bias per channel (channel = block of
/// `inner` values; `per_group_params` selects scale index by group instead).
template <class T>
void group_norm(const T* x, T* y, int64_t N, int64_t C, int64_t groups, int64_t inner, double eps,
                const std::vector<double>& scale, const std::vector<double>& bias, bool per_group_params) {
  const int64_t cpg = C / groups, block = cpg * inner;
#pragma omp parallel for schedule(static) if (N * C * inner > (1 << 15))
  for (int64_t ng = 0; ng < N * groups; ++ng) {
    const int64_t g = ng % groups;
    const T* xp = x + ng * block;
    T* yp = y + ng * block;
    double mean, inv_std;
    moments(xp, block, eps, mean, inv_std);
    for (int64_t cc = 0; cc < cpg; ++cc) {
      const int64_t p = per_group_params ? g : g * cpg + cc;
      const double a = inv_std * scale[p], b = bias[p] - mean * a;
      for (int64_t i = 0; i < inner; ++i)
        yp[cc * inner + i] = static_cast<T>(static_cast<double>(xp[cc * inner + i]) * a + b);
    }
  }
}

void kernel_instance_norm(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_x(n, x.dtype());
  if (x.rank() < 2) fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, ...]", n.label(), x.describe());
  const int64_t N = x.dim(0), C = x.dim(1), inner = prod(x.shape(), 2);
  const auto scale = per_channel(n, ctx.in(1), C, "scale");
  const auto bias = per_channel(n, ctx.in(2), C, "B");
  const double eps = n.f("epsilon", 1e-5f);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.dtype() == DType::f32)
    group_norm(x.data<float>(), y.data<float>(), N, C, C, inner, eps, scale, bias, false);
  else
    group_norm(x.data<double>(), y.data<double>(), N, C, C, inner, eps, scale, bias, false);
}

/// GroupNormalization: opset 21 has scale/bias per channel [C], opset 18 per
/// group [num_groups]. The parameter size tells which (when num_groups == C
/// both readings agree), so models of either opset run unchanged.
void kernel_group_norm(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_x(n, x.dtype());
  if (x.rank() < 2) fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, ...]", n.label(), x.describe());
  const int64_t N = x.dim(0), C = x.dim(1), inner = prod(x.shape(), 2);
  const int64_t G = n.i("num_groups");
  if (G < 1 || C % G != 0)
    fail(ErrorCode::invalid_input, "{}: num_groups {} does not divide the {} channels", n.label(), G, C);
  const Tensor& st = ctx.in(1);
  const bool per_group = st.numel() == G && G != C;
  const auto scale = per_channel(n, st, per_group ? G : C, "scale");
  const auto bias = per_channel(n, ctx.in(2), per_group ? G : C, "bias");
  const double eps = n.f("epsilon", 1e-5f);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.dtype() == DType::f32)
    group_norm(x.data<float>(), y.data<float>(), N, C, G, inner, eps, scale, bias, per_group);
  else
    group_norm(x.data<double>(), y.data<double>(), N, C, G, inner, eps, scale, bias, per_group);
}

// ---------------------------------------------------------------- LayerNormalization

/// Mean/InvStdDev type: stash_type (TensorProto dtype number), float by default.
DType stash_dtype(const ir::Node& n) {
  const int64_t s = n.i("stash_type", 1);
  if (s == 1) return DType::f32;
  if (s == 11) return DType::f64;
  fail(ErrorCode::unsupported, "{}: stash_type {} is not supported (1 = float, 11 = double)", n.label(), s);
}

std::vector<OutType> infer_layer_norm(const InferContext& c) {
  const InType& x = c.in(0);
  check_x(c.node, x.dtype);
  std::vector<OutType> out(c.num_outputs, OutType{stash_dtype(c.node), std::nullopt});
  out[0] = OutType{x.dtype, x.shape};
  if (x.shape && c.num_outputs > 1) {
    const int64_t rank = static_cast<int64_t>(x.shape->size());
    const int64_t axis = normalize_axis(c.node, c.node.i("axis", -1), rank);
    ir::Shape s = *x.shape;
    for (int64_t i = axis; i < rank; ++i) s[i] = ir::Dim::known(1);
    for (size_t i = 1; i < out.size(); ++i) out[i].shape = s;
  }
  return out;
}

/// Expands a parameter broadcastable to `shape` (numpy rules, unidirectional)
/// into prod(shape) doubles.
std::vector<double> expand_param(const ir::Node& n, const Tensor& t, const std::vector<int64_t>& shape,
                                 const char* what) {
  const std::vector<double> v = as_doubles(n, t, what);
  if (t.shape() == shape) return v;
  const std::vector<int64_t> b = broadcast_sizes(n, t.shape(), shape);
  if (b != shape)
    fail(ErrorCode::invalid_input, "{}: {} {} does not broadcast to the normalized shape [{}]", n.label(), what,
         t.describe(), shape_to_string(shape));
  const size_t r = shape.size();
  std::vector<int64_t> ts(r, 1);
  std::copy(t.shape().begin(), t.shape().end(), ts.begin() + static_cast<int64_t>(r - t.shape().size()));
  const std::vector<int64_t> tstr = strides_of(ts), ostr = strides_of(shape);
  std::vector<double> out(static_cast<size_t>(prod(shape)));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < r; ++d)
      if (ts[d] != 1) src += (i / ostr[d]) % shape[d] * tstr[d];
    out[i] = v[src];
  }
  return out;
}

template <class T, class U>
void layer_norm_rows(const T* x, T* y, U* mean_out, U* inv_out, int64_t rows, int64_t D, double eps,
                     const std::vector<double>& scale, const std::vector<double>* bias) {
#pragma omp parallel for schedule(static) if (rows * D > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xp = x + r * D;
    T* yp = y + r * D;
    double mean, inv_std;
    moments(xp, D, eps, mean, inv_std);
    if (mean_out) mean_out[r] = static_cast<U>(mean);
    if (inv_out) inv_out[r] = static_cast<U>(inv_std);
    for (int64_t i = 0; i < D; ++i) {
      const double v = (static_cast<double>(xp[i]) - mean) * inv_std * scale[i];
      yp[i] = static_cast<T>(bias ? v + (*bias)[i] : v);
    }
  }
}

void kernel_layer_norm(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_x(n, x.dtype());
  const int64_t axis = normalize_axis(n, n.i("axis", -1), x.rank());
  const std::vector<int64_t> norm_shape(x.shape().begin() + axis, x.shape().end());
  const int64_t rows = prod(x.shape(), 0, static_cast<size_t>(axis)), D = prod(norm_shape);
  const auto scale = expand_param(n, ctx.in(1), norm_shape, "Scale");
  std::vector<double> bias;
  if (ctx.has(2)) bias = expand_param(n, ctx.in(2), norm_shape, "B");
  const double eps = n.f("epsilon", 1e-5f);
  const DType u = stash_dtype(n);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  std::vector<int64_t> stat_shape = x.shape();
  for (size_t i = static_cast<size_t>(axis); i < stat_shape.size(); ++i) stat_shape[i] = 1;
  Tensor* mean = ctx.num_outputs() > 1 && n.outputs[1] != ir::kNoValue ? &ctx.output(1, u, stat_shape) : nullptr;
  Tensor* inv = ctx.num_outputs() > 2 && n.outputs[2] != ir::kNoValue ? &ctx.output(2, u, stat_shape) : nullptr;
  const std::vector<double>* bp = ctx.has(2) ? &bias : nullptr;
  auto run = [&](auto tx, auto tu) {
    using T = decltype(tx);
    using U = decltype(tu);
    layer_norm_rows<T, U>(x.data<T>(), y.data<T>(), mean ? mean->data<U>() : nullptr,
                          inv ? inv->data<U>() : nullptr, rows, D, eps, scale, bp);
  };
  if (x.dtype() == DType::f32)
    u == DType::f32 ? run(float{}, float{}) : run(float{}, double{});
  else
    u == DType::f32 ? run(double{}, float{}) : run(double{}, double{});
}

// ---------------------------------------------------------------- LpNormalization

/// Y = X / ||X||_p along `axis` (p = 1 or 2). A zero norm gives zeros, as
/// onnxruntime does, rather than the NaN of a literal 0/0.
template <class T>
void lp_normalize(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, int64_t p) {
#pragma omp parallel for schedule(static) if (outer * len * inner > (1 << 16))
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const T* xp = x + o * len * inner + in;
      T* yp = y + o * len * inner + in;
      double s = 0;
      for (int64_t i = 0; i < len; ++i) {
        const double v = static_cast<double>(xp[i * inner]);
        s += p == 1 ? std::abs(v) : v * v;
      }
      const double norm = p == 1 ? s : std::sqrt(s);
      for (int64_t i = 0; i < len; ++i)
        yp[i * inner] = norm == 0 ? T(0) : static_cast<T>(static_cast<double>(xp[i * inner]) / norm);
    }
  }
}

void kernel_lp_norm(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_x(n, x.dtype());
  const int64_t p = n.i("p", 2);
  if (p != 1 && p != 2) fail(ErrorCode::unsupported, "{}: p = {} is not supported (1 or 2)", n.label(), p);
  const int64_t axis = normalize_axis(n, n.i("axis", -1), x.rank());
  const int64_t outer = prod(x.shape(), 0, static_cast<size_t>(axis)), len = x.dim(axis);
  const int64_t inner = prod(x.shape(), static_cast<size_t>(axis) + 1);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.dtype() == DType::f32)
    lp_normalize(x.data<float>(), y.data<float>(), outer, len, inner, p);
  else
    lp_normalize(x.data<double>(), y.data<double>(), outer, len, inner, p);
}

}  // namespace

void register_normalization(Registry& r) {
  r.add({"", "BatchNormalization", infer_batch_norm, kernel_batch_norm});
  r.add({"", "InstanceNormalization", infer_same_as_x, kernel_instance_norm});
  r.add({"", "LayerNormalization", infer_layer_norm, kernel_layer_norm});
  r.add({"", "GroupNormalization", infer_same_as_x, kernel_group_norm});
  r.add({"", "LpNormalization", infer_same_as_x, kernel_lp_norm});
}

}  // namespace kiln::ops

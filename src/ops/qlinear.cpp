// Quantized integer products: MatMulInteger, ConvInteger (ONNX opset 10),
// QLinearMatMul (opset 21 form, int8/uint8 data) and QLinearConv (opset 10).
// https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html and siblings.
//
// All four subtract the zero points from the 8-bit data, accumulate exact
// products in int32 (wrapping on overflow, which the spec allows only there)
// and, for the QLinear ops, requantize: y = saturate(round_half_even(acc *
// (a_scale * b_scale / y_scale)) + y_zero_point). The multiplier is computed
// in the scales' dtype (float32, or float16/bfloat16 rounded after each
// operation) and the product with acc in float64, as ONNX's reference
// implementation does. Granularity: MatMulInteger/QLinearMatMul take
// per-tensor or per-row (a: [M] or [..., M, 1]) / per-column (b: [N] or
// [..., 1, N]) scales and zero points; y's are per-tensor. Conv weights take
// per-output-channel ([M]) scales and zero points; the rest are per-tensor.
// Padding in the convolutions reads the input's zero point (a zero after the
// subtraction). Conv geometry follows Conv-11 (auto_pad, pads, strides,
// dilations, group; 1 to 3 spatial dims).
#include <algorithm>
#include <cmath>

#include "ops/gemm_kernel.h"
#include "ops/quant_common.h"

namespace kiln::ops {
namespace {

bool is_8bit(DType t) { return t == DType::i8 || t == DType::u8; }

void check_8bit(const ir::Node& n, DType t, const char* where) {
  if (!is_8bit(t)) unsupported_dtype(n, t, where);
}

/// Data of an int8/uint8 tensor minus a zero point, as int32.
std::vector<int32_t> widen(const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::i8) std::copy_n(t.data<int8_t>(), t.numel(), v.begin());
  else std::copy_n(t.data<uint8_t>(), t.numel(), v.begin());
  return v;
}

/// A scalar (one-element) parameter as float; Error(invalid_input) otherwise.
float scalar_param(const ir::Node& n, const Tensor& t, const char* what) {
  if (t.numel() != 1)
    fail(ErrorCode::invalid_input, "{}: {} must be a scalar, got {}", n.label(), what, t.describe());
  return static_cast<float>(quant_element(t, 0));
}

/// Rounds a float to the precision of a scale dtype (float16/bfloat16 scales
/// are combined in their own precision, as numpy does).
float round_to(DType t, float v) {
  if (t == DType::f16) return half_to_float(float_to_half(v));
  if (t == DType::bf16) return bf16_to_float(float_to_bf16(v));
  return v;
}

/// a * b / c in the precision of dtype t.
float multiplier(DType t, float a, float b, float c) { return round_to(t, round_to(t, a * b) / c); }

// ---------------------------------------------------------------- matmul shapes

/// numpy matmul geometry: 1-D A is [1, K], 1-D B is [K, 1] (dropped from the
/// output); batch dims broadcast.
struct MatMulPlan {
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> out_shape;
  std::vector<int64_t> a_batch, b_batch;  ///< per output batch: index of A's / B's matrix
  std::vector<int64_t> a_shape, b_shape;  ///< with the 1-D promotion applied
};

MatMulPlan plan_matmul(const ir::Node& n, std::vector<int64_t> a, std::vector<int64_t> b) {
  if (a.empty() || b.empty())
    fail(ErrorCode::invalid_input, "{}: inputs must have rank >= 1, got [{}] and [{}]", n.label(),
         shape_to_string(a), shape_to_string(b));
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  MatMulPlan p;
  p.M = a[a.size() - 2];
  p.K = a.back();
  p.N = b.back();
  if (b[b.size() - 2] != p.K)
    fail(ErrorCode::invalid_input, "{}: inner dimensions differ: [{}] x [{}]", n.label(), shape_to_string(a),
         shape_to_string(b));
  const std::vector<int64_t> ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  const std::vector<int64_t> batch = broadcast_sizes(n, ba, bb);
  const int64_t count = prod(batch);
  // Map each output batch index to A's and B's batch index (broadcast dims read index 0).
  auto offsets = [&](const std::vector<int64_t>& own) {
    std::vector<int64_t> out(static_cast<size_t>(count));
    const size_t lead = batch.size() - own.size();
    const std::vector<int64_t> st = strides_of(own);
    for (int64_t i = 0; i < count; ++i) {
      int64_t rem = i, idx = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        const int64_t coord = rem % batch[d];
        rem /= batch[d];
        if (d >= lead && own[d - lead] != 1) idx += coord * st[d - lead];
      }
      out[static_cast<size_t>(i)] = idx;
    }
    return out;
  };
  p.a_batch = offsets(ba);
  p.b_batch = offsets(bb);
  p.out_shape = batch;
  if (!a_vec) p.out_shape.push_back(p.M);
  if (!b_vec) p.out_shape.push_back(p.N);
  p.a_shape = a;
  p.b_shape = b;
  return p;
}

/// Output shape of a matmul for shape inference (nullopt when a rank is unknown).
std::optional<ir::Shape> infer_matmul_shape(const ir::Node& n, const std::optional<ir::Shape>& a,
                                            const std::optional<ir::Shape>& b) {
  if (!a || !b) return std::nullopt;
  ir::Shape sa = *a, sb = *b;
  if (sa.empty() || sb.empty()) fail(ErrorCode::invalid_model, "{}: inputs must have rank >= 1", n.label());
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), ir::Dim::known(1));
  if (b_vec) sb.push_back(ir::Dim::known(1));
  const ir::Dim& ka = sa.back();
  const ir::Dim& kb = sb[sb.size() - 2];
  if (ka.is_static() && kb.is_static() && ka.value != kb.value)
    fail(ErrorCode::invalid_model, "{}: inner dimensions differ: {} x {}", n.label(), ir::shape_str(a),
         ir::shape_str(b));
  ir::Shape out = *broadcast_shapes(n, ir::Shape(sa.begin(), sa.end() - 2), ir::Shape(sb.begin(), sb.end() - 2));
  if (!a_vec) out.push_back(sa[sa.size() - 2]);
  if (!b_vec) out.push_back(sb.back());
  return out;
}

/// Expands a per-tensor / per-row (rows = true: shape [M], [..., M, 1]) or
/// per-column ([N], [..., 1, N]) parameter of a matmul operand with (promoted)
/// shape `x` to one value per (operand batch, row or column).
std::vector<float> expand_param(const ir::Node& n, const Tensor* t, const std::vector<int64_t>& x, bool rows,
                                const char* what) {
  const int64_t batches = prod(x, 0, x.size() - 2), len = rows ? x[x.size() - 2] : x.back();
  std::vector<float> out(static_cast<size_t>(batches * len), 0.0f);
  if (!t) return out;
  const std::vector<float> v = quant_values(*t);
  if (v.size() == 1) {
    std::fill(out.begin(), out.end(), v[0]);
    return out;
  }
  std::vector<int64_t> s = t->shape();
  if (s.size() == 1) s = rows ? std::vector<int64_t>{s[0], 1} : std::vector<int64_t>{1, s[0]};
  std::vector<int64_t> target = x;
  target[target.size() - (rows ? 1 : 2)] = 1;
  if (s.size() > target.size()) fail(ErrorCode::invalid_input, "{}: {} has too many dims", n.label(), what);
  const size_t lead = target.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != 1 && s[d] != target[d + lead])
      fail(ErrorCode::invalid_input, "{}: {} shape {} does not fit operand [{}]", n.label(), what, t->describe(),
           shape_to_string(x));
  const std::vector<int64_t> st = strides_of(s);
  for (int64_t i = 0; i < batches * len; ++i) {
    int64_t rem = i, idx = 0;
    for (size_t d = target.size(); d-- > 0;) {
      const int64_t coord = rem % target[d];
      rem /= target[d];
      if (d >= lead && s[d - lead] != 1) idx += coord * st[d - lead];
    }
    out[static_cast<size_t>(i)] = v[static_cast<size_t>(idx)];
  }
  return out;
}

/// acc[batch, M, N] = sum_k (A - azp)(B - bzp) in int32 for every output batch.
std::vector<int32_t> int_matmul(const MatMulPlan& p, const Tensor& a, const Tensor& b, const std::vector<float>& azp,
                                const std::vector<float>& bzp) {
  std::vector<int32_t> A = widen(a), B = widen(b);
  for (size_t i = 0; i < A.size(); ++i) A[i] -= static_cast<int32_t>(azp[i / static_cast<size_t>(p.K)]);
  const size_t N = static_cast<size_t>(p.N), KN = static_cast<size_t>(p.K * p.N);
  for (size_t i = 0; i < B.size(); ++i) B[i] -= static_cast<int32_t>(bzp[(i / KN) * N + i % N]);
  const int64_t batches = static_cast<int64_t>(p.a_batch.size()), MN = p.M * p.N;
  std::vector<int32_t> acc(static_cast<size_t>(batches * MN));
  for (int64_t i = 0; i < batches; ++i)
    gemm_simple<int32_t>(false, false, p.M, p.N, p.K, 1, A.data() + p.a_batch[i] * p.M * p.K, p.K,
                         B.data() + p.b_batch[i] * p.K * p.N, p.N, 0, acc.data() + i * MN, p.N);
  return acc;
}

// ---------------------------------------------------------------- MatMulInteger / QLinearMatMul

std::vector<OutType> infer_matmul_integer(const InferContext& ctx) {
  check_8bit(ctx.node, ctx.in(0).dtype, "input 0 (A)");
  check_8bit(ctx.node, ctx.in(1).dtype, "input 1 (B)");
  return {OutType{DType::i32, infer_matmul_shape(ctx.node, ctx.in(0).shape, ctx.in(1).shape)}};
}

void matmul_integer_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  check_8bit(n, a.dtype(), "input 0 (A)");
  check_8bit(n, b.dtype(), "input 1 (B)");
  const MatMulPlan p = plan_matmul(n, a.shape(), b.shape());
  const auto azp = expand_param(n, ctx.has(2) ? &ctx.in(2) : nullptr, p.a_shape, true, "a_zero_point");
  const auto bzp = expand_param(n, ctx.has(3) ? &ctx.in(3) : nullptr, p.b_shape, false, "b_zero_point");
  const std::vector<int32_t> acc = int_matmul(p, a, b, azp, bzp);
  Tensor& y = ctx.output(0, DType::i32, p.out_shape);
  std::copy(acc.begin(), acc.end(), y.data<int32_t>());
}

std::vector<OutType> infer_qlinear_matmul(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  check_8bit(n, ctx.in(0).dtype, "input 0 (a)");
  check_8bit(n, ctx.in(3).dtype, "input 3 (b)");
  for (size_t i : {size_t{1}, size_t{4}, size_t{6}})
    if (!is_scale_dtype(ctx.in(i).dtype)) unsupported_dtype(n, ctx.in(i).dtype, "scale input");
  const DType out = ctx.has(7) ? ctx.in(7).dtype : ctx.in(0).dtype;
  check_8bit(n, out, "input 7 (y_zero_point)");
  return {OutType{out, infer_matmul_shape(n, ctx.in(0).shape, ctx.in(3).shape)}};
}

void qlinear_matmul_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(3);
  check_8bit(n, a.dtype(), "input 0 (a)");
  check_8bit(n, b.dtype(), "input 3 (b)");
  const MatMulPlan p = plan_matmul(n, a.shape(), b.shape());
  const auto a_scale = expand_param(n, &ctx.in(1), p.a_shape, true, "a_scale");
  const auto b_scale = expand_param(n, &ctx.in(4), p.b_shape, false, "b_scale");
  const auto azp = expand_param(n, ctx.has(2) ? &ctx.in(2) : nullptr, p.a_shape, true, "a_zero_point");
  const auto bzp = expand_param(n, ctx.has(5) ? &ctx.in(5) : nullptr, p.b_shape, false, "b_zero_point");
  const float y_scale = scalar_param(n, ctx.in(6), "y_scale");
  const float y_zp = ctx.has(7) ? scalar_param(n, ctx.in(7), "y_zero_point") : 0.0f;
  const DType out_t = ctx.has(7) ? ctx.in(7).dtype() : a.dtype();
  check_8bit(n, out_t, "input 7 (y_zero_point)");
  const DType st = ctx.in(1).dtype();
  const std::vector<int32_t> acc = int_matmul(p, a, b, azp, bzp);
  Tensor& y = ctx.output(0, out_t, p.out_shape);
  double lo, hi;
  quant_range(out_t, &lo, &hi);
  const int64_t batches = static_cast<int64_t>(p.a_batch.size());
  for (int64_t i = 0; i < batches; ++i)
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t c = 0; c < p.N; ++c) {
        const float mult = multiplier(st, a_scale[static_cast<size_t>(p.a_batch[i] * p.M + m)],
                                      b_scale[static_cast<size_t>(p.b_batch[i] * p.N + c)], y_scale);
        const int64_t o = (i * p.M + m) * p.N + c;
        store_quant_int(y, o, round_saturate(acc[static_cast<size_t>(o)] * static_cast<double>(mult) + y_zp, lo, hi));
      }
}

// ---------------------------------------------------------------- convolution geometry

constexpr size_t kMaxSpatial = 3;

/// Conv-11 geometry, padded to 3 spatial dims with leading size-1 dims.
struct ConvGeom {
  int64_t batch = 0, channels = 0, maps = 0, group = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1},
          pb[3] = {0, 0, 0};
  std::vector<int64_t> out_shape;
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

/// Spatial output size of one dim; -1 when `in` is unknown (-1). Sets pads for auto_pad.
int64_t conv_out_dim(const ir::Node& n, int64_t in, int64_t k, int64_t s, int64_t d, int64_t& pb, int64_t& pe) {
  const std::string ap = n.s("auto_pad", "NOTSET");
  if (in < 0) return -1;
  const int64_t dk = (k - 1) * d + 1;
  if (ap == "VALID") {
    pb = pe = 0;
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    const int64_t out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + dk - in);
    pb = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
    pe = total - pb;
    return out;
  } else if (ap != "NOTSET") {
    fail(ErrorCode::unsupported, "{}: auto_pad '{}' is not supported", n.label(), ap);
  }
  const int64_t span = in + pb + pe - dk;
  return span >= 0 ? span / s + 1 : 0;
}

/// Reads the Conv attributes for x/w shapes (-1 for unknown dims) and
/// computes the output shape. Throws Error(invalid_model) for bad attributes.
ConvGeom conv_geometry(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
  if (x.size() < 3 || x.size() != w.size())
    fail(ErrorCode::invalid_model, "{}: x and w must have the same rank >= 3, got [{}] and [{}]", n.label(),
         shape_to_string(x), shape_to_string(w));
  const size_t r = x.size() - 2;
  if (r > kMaxSpatial) fail(ErrorCode::unsupported, "{}: {} spatial dims are not supported (1 to 3)", n.label(), r);
  auto per_dim = [&](const char* name, int64_t def, size_t mult) {
    std::vector<int64_t> v = n.ints(name, std::vector<int64_t>(r * mult, def));
    if (v.size() != r * mult)
      fail(ErrorCode::invalid_model, "{}: attribute '{}' has {} values, expected {}", n.label(), name, v.size(), r * mult);
    return v;
  };
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (n.has("kernel_shape")) {
    const std::vector<int64_t> ks = per_dim("kernel_shape", 1, 1);
    for (size_t i = 0; i < r; ++i)
      if (kernel[i] >= 0 && kernel[i] != ks[i])
        fail(ErrorCode::invalid_model, "{}: kernel_shape does not match the weight's spatial dims", n.label());
    kernel = ks;
  }
  const auto strides = per_dim("strides", 1, 1), dil = per_dim("dilations", 1, 1);
  auto pads = per_dim("pads", 0, 2);
  ConvGeom g;
  g.batch = x[0];
  g.channels = x[1];
  g.maps = w[0];
  g.group = n.i("group", 1);
  if (g.group < 1) fail(ErrorCode::invalid_model, "{}: group must be >= 1", n.label());
  if (g.channels >= 0 && w[1] >= 0 && g.channels != w[1] * g.group)
    fail(ErrorCode::invalid_model, "{}: x has {} channels, w expects {} x group {}", n.label(), g.channels, w[1],
         g.group);
  if (g.maps >= 0 && g.maps % g.group != 0)
    fail(ErrorCode::invalid_model, "{}: {} output channels are not divisible by group {}", n.label(), g.maps, g.group);
  g.out_shape = {x[0], w[0]};
  const size_t off = kMaxSpatial - r;
  for (size_t i = 0; i < r; ++i) {
    if (strides[i] < 1 || dil[i] < 1 || pads[i] < 0 || pads[i + r] < 0)
      fail(ErrorCode::invalid_model, "{}: strides and dilations must be >= 1 and pads >= 0", n.label());
    const int64_t o = kernel[i] < 0 ? -1 : conv_out_dim(n, x[i + 2], kernel[i], strides[i], dil[i], pads[i], pads[i + r]);
    g.out_shape.push_back(o);
    g.in[off + i] = x[i + 2];
    g.out[off + i] = o;
    g.k[off + i] = kernel[i];
    g.s[off + i] = strides[i];
    g.d[off + i] = dil[i];
    g.pb[off + i] = pads[i];
  }
  return g;
}

/// y[batch, maps, out] (int32) = conv(x, w) on zero-point-adjusted int32 data
/// (x [batch, channels, in], w [maps, channels/group, k]): im2col + integer GEMM.
std::vector<int32_t> int_conv(const ConvGeom& g, const std::vector<int32_t>& x, const std::vector<int32_t>& w) {
  const int64_t cg = g.channels / g.group, mg = g.maps / g.group, ks = g.k_size(), os = g.out_size();
  std::vector<int32_t> y(static_cast<size_t>(g.batch * g.maps * os));
  std::vector<int32_t> col(static_cast<size_t>(cg * ks * os));
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t gr = 0; gr < g.group; ++gr) {
      for (int64_t c = 0; c < cg; ++c) {
        const int32_t* xc = x.data() + (b * g.channels + gr * cg + c) * g.in_size();
        for (int64_t kk = 0; kk < ks; ++kk) {
          const int64_t kz = kk / (g.k[1] * g.k[2]), ky = (kk / g.k[2]) % g.k[1], kx = kk % g.k[2];
          int32_t* dst = col.data() + (c * ks + kk) * os;
          for (int64_t oz = 0; oz < g.out[0]; ++oz)
            for (int64_t oy = 0; oy < g.out[1]; ++oy)
              for (int64_t ox = 0; ox < g.out[2]; ++ox) {
                const int64_t iz = oz * g.s[0] - g.pb[0] + kz * g.d[0], iy = oy * g.s[1] - g.pb[1] + ky * g.d[1],
                              ix = ox * g.s[2] - g.pb[2] + kx * g.d[2];
                const bool inside = iz >= 0 && iz < g.in[0] && iy >= 0 && iy < g.in[1] && ix >= 0 && ix < g.in[2];
                *dst++ = inside ? xc[(iz * g.in[1] + iy) * g.in[2] + ix] : 0;
              }
        }
      }
      gemm_simple<int32_t>(false, false, mg, os, cg * ks, 1, w.data() + gr * mg * cg * ks, cg * ks, col.data(), os, 0,
                           y.data() + (b * g.maps + gr * mg) * os, os);
    }
  return y;
}

/// Per-output-channel values of an optional scalar-or-[maps] parameter.
std::vector<float> per_channel(const ir::Node& n, const Tensor* t, int64_t maps, const char* what) {
  if (!t) return std::vector<float>(static_cast<size_t>(maps), 0.0f);
  const std::vector<float> v = quant_values(*t);
  if (v.size() == 1) return std::vector<float>(static_cast<size_t>(maps), v[0]);
  if (t->rank() != 1 || t->dim(0) != maps)
    fail(ErrorCode::invalid_input, "{}: {} must be a scalar or have {} elements, got {}", n.label(), what, maps,
         t->describe());
  return v;
}

/// Zero-point-adjusted int32 copies of x (per-tensor zp) and w (per-channel zp).
void adjust_conv_inputs(const ir::Node& n, const Tensor& x, const Tensor* xzp, const Tensor& w, const Tensor* wzp,
                        std::vector<int32_t>& xs, std::vector<int32_t>& ws) {
  xs = widen(x);
  ws = widen(w);
  const int32_t xz = xzp ? static_cast<int32_t>(scalar_param(n, *xzp, "x_zero_point")) : 0;
  for (auto& v : xs) v -= xz;
  const std::vector<float> wz = per_channel(n, wzp, w.dim(0), "w_zero_point");
  const size_t per_map = static_cast<size_t>(w.numel() / std::max<int64_t>(1, w.dim(0)));
  for (size_t i = 0; i < ws.size(); ++i) ws[i] -= static_cast<int32_t>(wz[i / per_map]);
}

std::optional<ir::Shape> conv_out_shape(const ir::Node& n, const InType& x, const InType& w) {
  if (!x.shape || !w.shape) return std::nullopt;
  std::vector<int64_t> xs, ws;
  for (auto& d : *x.shape) xs.push_back(d.is_static() ? d.value : -1);
  for (auto& d : *w.shape) ws.push_back(d.is_static() ? d.value : -1);
  const ConvGeom g = conv_geometry(n, xs, ws);
  ir::Shape out;
  for (size_t i = 0; i < g.out_shape.size(); ++i)
    out.push_back(i == 0 ? (*x.shape)[0] : g.out_shape[i] >= 0 ? ir::Dim::known(g.out_shape[i]) : ir::Dim::sym(""));
  if (!(*w.shape)[0].is_static()) out[1] = (*w.shape)[0];
  return out;
}

// ---------------------------------------------------------------- ConvInteger / QLinearConv

std::vector<OutType> infer_conv_integer(const InferContext& ctx) {
  check_8bit(ctx.node, ctx.in(0).dtype, "input 0 (x)");
  check_8bit(ctx.node, ctx.in(1).dtype, "input 1 (w)");
  return {OutType{DType::i32, conv_out_shape(ctx.node, ctx.in(0), ctx.in(1))}};
}

void conv_integer_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  check_8bit(n, x.dtype(), "input 0 (x)");
  check_8bit(n, w.dtype(), "input 1 (w)");
  const ConvGeom g = conv_geometry(n, x.shape(), w.shape());
  std::vector<int32_t> xs, ws;
  adjust_conv_inputs(n, x, ctx.has(2) ? &ctx.in(2) : nullptr, w, ctx.has(3) ? &ctx.in(3) : nullptr, xs, ws);
  const std::vector<int32_t> acc = int_conv(g, xs, ws);
  Tensor& y = ctx.output(0, DType::i32, g.out_shape);
  std::copy(acc.begin(), acc.end(), y.data<int32_t>());
}

std::vector<OutType> infer_qlinear_conv(const InferContext& ctx) {
  const ir::Node& n = ctx.node;
  check_8bit(n, ctx.in(0).dtype, "input 0 (x)");
  check_8bit(n, ctx.in(3).dtype, "input 3 (w)");
  for (size_t i : {size_t{1}, size_t{4}, size_t{6}})
    if (!is_scale_dtype(ctx.in(i).dtype)) unsupported_dtype(n, ctx.in(i).dtype, "scale input");
  if (ctx.has(8) && ctx.in(8).dtype != DType::i32)
    fail(ErrorCode::invalid_model, "{}: bias must be int32, got {}", n.label(), dtype_name(ctx.in(8).dtype));
  const DType out = ctx.has(7) ? ctx.in(7).dtype : ctx.in(0).dtype;
  check_8bit(n, out, "input 7 (y_zero_point)");
  return {OutType{out, conv_out_shape(n, ctx.in(0), ctx.in(3))}};
}

void qlinear_conv_kernel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(3);
  check_8bit(n, x.dtype(), "input 0 (x)");
  check_8bit(n, w.dtype(), "input 3 (w)");
  const ConvGeom g = conv_geometry(n, x.shape(), w.shape());
  std::vector<int32_t> xs, ws;
  adjust_conv_inputs(n, x, ctx.has(2) ? &ctx.in(2) : nullptr, w, ctx.has(5) ? &ctx.in(5) : nullptr, xs, ws);
  std::vector<int32_t> acc = int_conv(g, xs, ws);
  const int64_t os = g.out_size();
  if (ctx.has(8)) {
    const Tensor& bias = ctx.in(8);
    if (bias.dtype() != DType::i32 || bias.numel() != g.maps)
      fail(ErrorCode::invalid_input, "{}: bias must be int32 with {} elements, got {}", n.label(), g.maps,
           bias.describe());
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += bias.data<int32_t>()[(i / static_cast<size_t>(os)) % static_cast<size_t>(g.maps)];
  }
  const float x_scale = scalar_param(n, ctx.in(1), "x_scale");
  const std::vector<float> w_scale = per_channel(n, &ctx.in(4), g.maps, "w_scale");
  const float y_scale = scalar_param(n, ctx.in(6), "y_scale");
  const float y_zp = ctx.has(7) ? scalar_param(n, ctx.in(7), "y_zero_point") : 0.0f;
  const DType out_t = ctx.has(7) ? ctx.in(7).dtype() : x.dtype();
  check_8bit(n, out_t, "input 7 (y_zero_point)");
  Tensor& y = ctx.output(0, out_t, g.out_shape);
  double lo, hi;
  quant_range(out_t, &lo, &hi);
  const DType st = ctx.in(1).dtype();
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t m = static_cast<int64_t>(i / static_cast<size_t>(os)) % g.maps;
    const float mult = multiplier(st, x_scale, w_scale[static_cast<size_t>(m)], y_scale);
    store_quant_int(y, static_cast<int64_t>(i), round_saturate(acc[i] * static_cast<double>(mult) + y_zp, lo, hi));
  }
}

}  // namespace

/// Registers MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv (see the file comment).
void register_qlinear(Registry& r) {
  r.add({"", "MatMulInteger", infer_matmul_integer, matmul_integer_kernel});
  r.add({"", "QLinearMatMul", infer_qlinear_matmul, qlinear_matmul_kernel});
  r.add({"", "ConvInteger", infer_conv_integer, conv_integer_kernel});
  r.add({"", "QLinearConv", infer_qlinear_conv, qlinear_conv_kernel});
}

}  // namespace kiln::ops

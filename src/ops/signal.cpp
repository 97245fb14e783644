// Signal processing: DFT-20, STFT-17, HannWindow / HammingWindow /
// BlackmanWindow-17 and MelWeightMatrix-17 (https://onnx.ai/onnx/operators/).
//
// DFT: x [..., n, ..., 1 | 2] (last dim: real, or real and imaginary parts),
// dft_length (optional scalar, default n: zero-pads or truncates the signal),
// axis (optional scalar, default -2; any dim but the last) -> y with the axis
// dim n_out and a last dim of 2 (complex). Forward: Y[k] = sum_j x[j]
// e^(-2 pi i jk / L); inverse=1: e^(+2 pi i jk / L) / L. onesided=1 keeps the
// first floor(L/2) + 1 frequencies (forward only: an inverse onesided DFT is
// rejected). Computed directly (O(L^2) per transform) in double with an exact
// twiddle table indexed by (j * k) mod L.
//
// STFT: signal [B, len, 1 | 2], frame_step, optional window [W], optional
// frame_length -> [B, frames, bins, 2] with frames = 1 + (len - W) / step and
// bins = W / 2 + 1 (onesided=1, the default) or W: the forward DFT of every
// windowed frame (rectangular window without the input).
//
// Windows: size (scalar int) -> [size] of output_datatype (default float32);
// with D = size (periodic=1, the default) or size - 1:
//   Hann 0.5 - 0.5 cos(2 pi n / D), Hamming 25/46 - 21/46 cos(2 pi n / D),
//   Blackman 0.42 - 0.5 cos(2 pi n / D) + 0.08 cos(4 pi n / D).
// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] triangular filters
// between num_mel_bins + 2 points spaced evenly on the mel scale
// (2595 log10(1 + f / 700)) from lower_edge_hertz with a step of
// (high - low) / (num_mel_bins + 2) mel, mapped to bins
// floor((dft_length + 1) * f / sample_rate): the spec's reference computation.
//
// dtypes: x, signal, window float32 / float64; generated outputs float32,
// float64, float16, bfloat16 or any integer type.
#include <cmath>
#include <numbers>

#include "ops/util.h"

namespace kiln::ops {

namespace {

bool is_f32_or_f64(DType t) { return t == DType::f32 || t == DType::f64; }

/// Reads the scalar integer input i.
int64_t scalar_int(const ir::Node& n, const Tensor& t, const char* what) {
  if (t.numel() != 1 || (t.dtype() != DType::i64 && t.dtype() != DType::i32))
    fail(ErrorCode::invalid_input, "{}: {} {} must be an int32/int64 scalar", n.label(), what, t.describe());
  return to_int64s(t)[0];
}

std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = element_as_double(t, i);
  return v;
}

/// cos and sin of 2 pi m / L for m in [0, L).
struct Twiddles {
  std::vector<double> c, s;
  explicit Twiddles(int64_t L) : c(static_cast<size_t>(L)), s(static_cast<size_t>(L)) {
    for (int64_t m = 0; m < L; ++m) {
      const double a = 2 * std::numbers::pi * static_cast<double>(m) / static_cast<double>(L);
      c[m] = std::cos(a);
      s[m] = std::sin(a);
    }
  }
};

/// One 1-D DFT of length L over `count` input samples (re, im; the rest are
/// zeros), writing `out_n` frequencies as (re, im) pairs.
void dft_1d(const std::vector<double>& re, const std::vector<double>& im, int64_t count, int64_t L, int64_t out_n,
            bool inverse, const Twiddles& tw, double* out) {
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(L) : 1.0;
  for (int64_t k = 0; k < out_n; ++k) {
    double sr = 0, si = 0;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t m = (j * k) % L;
      const double c = tw.c[m], s = sign * tw.s[m];
      sr += re[j] * c - im[j] * s;
      si += re[j] * s + im[j] * c;
    }
    out[2 * k] = sr * scale;
    out[2 * k + 1] = si * scale;
  }
}

template <class T>
void store_doubles(const std::vector<double>& v, Tensor& y) {
  for (size_t i = 0; i < v.size(); ++i) y.data<T>()[i] = static_cast<T>(v[i]);
}

// ---------------------------------------------------------------- DFT

struct DftArgs {
  int64_t axis, L, n_out;
  bool inverse;
};

std::vector<OutType> infer_dft(const InferContext& c) {
  const InType& x = c.in(0);
  if (!is_f32_or_f64(x.dtype)) unsupported_dtype(c.node, x.dtype, "input 0");
  if (c.node.i("inverse", 0) && c.node.i("onesided", 0))
    fail(ErrorCode::unsupported, "{}: inverse=1 with onesided=1 is not supported", c.node.label());
  if (!x.shape) return {OutType{x.dtype, std::nullopt}};
  const int64_t r = static_cast<int64_t>(x.shape->size());
  if (r < 2) fail(ErrorCode::invalid_model, "{}: input {} must have rank >= 2", c.node.label(), ir::shape_str(x.shape));
  ir::Shape s = *x.shape;
  s.back() = ir::Dim::known(2);
  if (c.has(2) && !c.in(2).value) {
    for (int64_t d = 0; d + 1 < r; ++d) s[static_cast<size_t>(d)] = ir::Dim::sym("");
    return {OutType{x.dtype, s}};
  }
  const int64_t axis =
      normalize_axis(c.node, c.has(2) ? to_int64s(*c.in(2).value).at(0) : -2, r, "axis");
  if (axis == r - 1) fail(ErrorCode::invalid_model, "{}: axis must not be the last dim", c.node.label());
  ir::Dim len = (*x.shape)[static_cast<size_t>(axis)];
  if (c.has(1)) len = c.in(1).value ? ir::Dim::known(to_int64s(*c.in(1).value).at(0)) : ir::Dim::sym("");
  if (c.node.i("onesided", 0)) len = len.is_static() ? ir::Dim::known(len.value / 2 + 1) : ir::Dim::sym("");
  s[static_cast<size_t>(axis)] = len;
  return {OutType{x.dtype, s}};
}

void kernel_dft(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (!is_f32_or_f64(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0");
  const int64_t r = x.rank();
  const int64_t comps = r >= 2 ? x.dim(r - 1) : 0;
  if (comps != 1 && comps != 2)
    fail(ErrorCode::invalid_input, "{}: input {} must be [..., 1] (real) or [..., 2] (complex)", n.label(),
         x.describe());
  const int64_t axis = normalize_axis(n, ctx.has(2) ? scalar_int(n, ctx.in(2), "axis") : -2, r, "axis");
  if (axis == r - 1) fail(ErrorCode::invalid_input, "{}: axis must not be the last dim", n.label());
  const bool inverse = n.i("inverse", 0) != 0, onesided = n.i("onesided", 0) != 0;
  if (inverse && onesided) fail(ErrorCode::unsupported, "{}: inverse=1 with onesided=1 is not supported", n.label());
  const int64_t nin = x.dim(axis);
  const int64_t L = ctx.has(1) ? scalar_int(n, ctx.in(1), "dft_length") : nin;
  if (L < 1) fail(ErrorCode::invalid_input, "{}: dft_length must be >= 1, got {}", n.label(), L);
  const int64_t n_out = onesided ? L / 2 + 1 : L, count = std::min(nin, L);
  const int64_t outer = prod(x.shape(), 0, static_cast<size_t>(axis));
  const int64_t inner = prod(x.shape(), static_cast<size_t>(axis) + 1, static_cast<size_t>(r - 1));
  std::vector<int64_t> out_shape = x.shape();
  out_shape[static_cast<size_t>(axis)] = n_out;
  out_shape.back() = 2;
  const std::vector<double> xv = doubles_of(x);
  std::vector<double> yv(static_cast<size_t>(outer * n_out * inner * 2));
  const Twiddles tw(L);
#pragma omp parallel for schedule(static) if (outer * inner * L * L > (1 << 18))
  for (int64_t oi = 0; oi < outer * inner; ++oi) {
    const int64_t o = oi / inner, i = oi % inner;
    std::vector<double> re(static_cast<size_t>(count)), im(static_cast<size_t>(count), 0.0), out(2 * n_out);
    for (int64_t j = 0; j < count; ++j) {
      const int64_t at = ((o * nin + j) * inner + i) * comps;
      re[j] = xv[at];
      if (comps == 2) im[j] = xv[at + 1];
    }
    dft_1d(re, im, count, L, n_out, inverse, tw, out.data());
    for (int64_t k = 0; k < n_out; ++k) {
      const int64_t at = ((o * n_out + k) * inner + i) * 2;
      yv[at] = out[2 * k];
      yv[at + 1] = out[2 * k + 1];
    }
  }
  Tensor& y = ctx.output(0, x.dtype(), out_shape);
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", { store_doubles<scalar_t>(yv, y); });
}

// ---------------------------------------------------------------- STFT

std::vector<OutType> infer_stft(const InferContext& c) {
  const InType& x = c.in(0);
  if (!is_f32_or_f64(x.dtype)) unsupported_dtype(c.node, x.dtype, "input 0 (signal)");
  if (c.has(2) && !is_f32_or_f64(c.in(2).dtype)) unsupported_dtype(c.node, c.in(2).dtype, "input 2 (window)");
  const ir::Dim any = ir::Dim::sym("");
  ir::Shape s{x.shape && !x.shape->empty() ? (*x.shape)[0] : any, any, any, ir::Dim::known(2)};
  // Exact when the signal length, step and frame length are known.
  int64_t W = -1;
  if (c.has(3) && c.in(3).value) W = to_int64s(*c.in(3).value).at(0);
  else if (c.has(2) && c.in(2).shape && c.in(2).shape->size() == 1 && (*c.in(2).shape)[0].is_static())
    W = (*c.in(2).shape)[0].value;
  if (W > 0) s[2] = ir::Dim::known(c.node.i("onesided", 1) ? W / 2 + 1 : W);
  if (W > 0 && c.in(1).value && x.shape && x.shape->size() == 3 && (*x.shape)[1].is_static()) {
    const int64_t step = to_int64s(*c.in(1).value).at(0), len = (*x.shape)[1].value;
    if (step > 0 && len >= W) s[1] = ir::Dim::known(1 + (len - W) / step);
  }
  return {OutType{x.dtype, s}};
}

void kernel_stft(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  if (!is_f32_or_f64(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0 (signal)");
  if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
    fail(ErrorCode::invalid_input, "{}: signal {} must be [batch, length, 1 | 2]", n.label(), x.describe());
  const int64_t step = scalar_int(n, ctx.in(1), "frame_step");
  std::vector<double> window;
  if (ctx.has(2)) {
    if (ctx.in(2).rank() != 1) fail(ErrorCode::invalid_input, "{}: window must be 1-D", n.label());
    window = doubles_of(ctx.in(2));
  }
  int64_t W = ctx.has(3) ? scalar_int(n, ctx.in(3), "frame_length") : static_cast<int64_t>(window.size());
  if (!ctx.has(3) && !ctx.has(2)) W = x.dim(1);
  if (!window.empty() && static_cast<int64_t>(window.size()) != W)
    fail(ErrorCode::invalid_input, "{}: window has {} entries but frame_length is {}", n.label(), window.size(), W);
  if (window.empty()) window.assign(static_cast<size_t>(W), 1.0);
  const int64_t B = x.dim(0), len = x.dim(1), comps = x.dim(2);
  if (step < 1 || W < 1 || W > len)
    fail(ErrorCode::invalid_input, "{}: frame_step {} and frame length {} do not fit a signal of length {}", n.label(),
         step, W, len);
  const int64_t frames = 1 + (len - W) / step, bins = n.i("onesided", 1) ? W / 2 + 1 : W;
  const std::vector<double> xv = doubles_of(x);
  std::vector<double> yv(static_cast<size_t>(B * frames * bins * 2));
  const Twiddles tw(W);
#pragma omp parallel for schedule(static) if (B * frames * W * bins > (1 << 18))
  for (int64_t bf = 0; bf < B * frames; ++bf) {
    const int64_t b = bf / frames, f = bf % frames;
    std::vector<double> re(static_cast<size_t>(W)), im(static_cast<size_t>(W), 0.0);
    for (int64_t j = 0; j < W; ++j) {
      const int64_t at = (b * len + f * step + j) * comps;
      re[j] = xv[at] * window[j];
      if (comps == 2) im[j] = xv[at + 1] * window[j];
    }
    dft_1d(re, im, W, W, bins, false, tw, yv.data() + bf * bins * 2);
  }
  Tensor& y = ctx.output(0, x.dtype(), {B, frames, bins, 2});
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", { store_doubles<scalar_t>(yv, y); });
}

// ---------------------------------------------------------------- generated tensors

/// output_datatype (TensorProto number, default float) as a DType kiln can write.
DType generated_dtype(const ir::Node& n) {
  const auto t = static_cast<DType>(n.i("output_datatype", 1));
  switch (t) {
    case DType::f32: case DType::f64: case DType::f16: case DType::bf16: case DType::i8: case DType::i16:
    case DType::i32: case DType::i64: case DType::u8: case DType::u16: case DType::u32: case DType::u64:
      return t;
    default:
      fail(ErrorCode::unsupported, "{}: output_datatype {} is not supported", n.label(), n.i("output_datatype", 1));
  }
}

/// Writes doubles into a tensor of any dtype generated_dtype allows.
void store_any(const ir::Node& n, const std::vector<double>& v, Tensor& y) {
  switch (y.dtype()) {
    case DType::f16:
      for (size_t i = 0; i < v.size(); ++i) y.data<uint16_t>()[i] = float_to_half(static_cast<float>(v[i]));
      return;
    case DType::bf16:
      for (size_t i = 0; i < v.size(); ++i) y.data<uint16_t>()[i] = float_to_bf16(static_cast<float>(v[i]));
      return;
    default: KILN_DISPATCH_NUMERIC(y.dtype(), n, "output 0", { store_doubles<scalar_t>(v, y); });
  }
}

enum class Window { hann, hamming, blackman };

template <Window W>
std::vector<OutType> infer_window(const InferContext& c) {
  const DType t = generated_dtype(c.node);
  if (c.in(0).dtype != DType::i64 && c.in(0).dtype != DType::i32) unsupported_dtype(c.node, c.in(0).dtype, "input 0");
  const ir::Dim len = c.in(0).value ? ir::Dim::known(to_int64s(*c.in(0).value).at(0)) : ir::Dim::sym("");
  return {OutType{t, ir::Shape{len}}};
}

template <Window W>
void kernel_window(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const int64_t size = scalar_int(n, ctx.in(0), "size");
  if (size < 0) fail(ErrorCode::invalid_input, "{}: size must be >= 0, got {}", n.label(), size);
  const double D = static_cast<double>(n.i("periodic", 1) ? size : size - 1);
  std::vector<double> v(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    if (D == 0) {  // a symmetric window of one point
      v[i] = 1.0;
      continue;
    }
    const double a = 2 * std::numbers::pi * static_cast<double>(i) / D;
    if constexpr (W == Window::hann) v[i] = 0.5 - 0.5 * std::cos(a);
    if constexpr (W == Window::hamming) v[i] = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
    if constexpr (W == Window::blackman) v[i] = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
  }
  Tensor& y = ctx.output(0, generated_dtype(n), {size});
  store_any(n, v, y);
}

std::vector<OutType> infer_mel(const InferContext& c) {
  const DType t = generated_dtype(c.node);
  ir::Dim rows = ir::Dim::sym(""), cols = ir::Dim::sym("");
  if (c.in(0).value) cols = ir::Dim::known(to_int64s(*c.in(0).value).at(0));
  if (c.in(1).value) rows = ir::Dim::known(to_int64s(*c.in(1).value).at(0) / 2 + 1);
  return {OutType{t, ir::Shape{rows, cols}}};
}

void kernel_mel(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const int64_t bins = scalar_int(n, ctx.in(0), "num_mel_bins");
  const int64_t dft_len = scalar_int(n, ctx.in(1), "dft_length");
  const int64_t rate = scalar_int(n, ctx.in(2), "sample_rate");
  const double lo = element_as_double(ctx.in(3), 0), hi = element_as_double(ctx.in(4), 0);
  if (bins < 1 || dft_len < 1 || rate < 1)
    fail(ErrorCode::invalid_input, "{}: num_mel_bins, dft_length and sample_rate must be positive", n.label());
  const int64_t rows = dft_len / 2 + 1;
  auto mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
  const double lo_mel = mel(lo), step = (mel(hi) - lo_mel) / static_cast<double>(bins + 2);
  std::vector<int64_t> pt(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double f = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595.0) - 1.0);
    pt[i] = static_cast<int64_t>(std::floor(static_cast<double>(dft_len + 1) * f / static_cast<double>(rate)));
  }
  std::vector<double> w(static_cast<size_t>(rows * bins), 0.0);
  auto at = [&](int64_t r, int64_t b) -> double& {
    if (r < 0 || r >= rows)
      fail(ErrorCode::invalid_input, "{}: a mel filter edge falls on bin {} outside [0, {})", n.label(), r, rows);
    return w[static_cast<size_t>(r * bins + b)];
  };
  for (int64_t b = 0; b < bins; ++b) {
    const int64_t l = pt[b], c = pt[b + 1], r = pt[b + 2];
    if (c == l) at(c, b) = 1;
    else
      for (int64_t j = l; j <= c; ++j) at(j, b) = static_cast<double>(j - l) / static_cast<double>(c - l);
    for (int64_t j = c; j < r; ++j) at(j, b) = static_cast<double>(r - j) / static_cast<double>(r - c);
  }
  Tensor& y = ctx.output(0, generated_dtype(n), {rows, bins});
  store_any(n, w, y);
}

}  // namespace

/// Registers DFT, STFT, the three windows and MelWeightMatrix.
void register_signal(Registry& r) {
  r.add({"", "DFT", infer_dft, kernel_dft});
  r.add({"", "STFT", infer_stft, kernel_stft});
  r.add({"", "HannWindow", infer_window<Window::hann>, kernel_window<Window::hann>});
  r.add({"", "HammingWindow", infer_window<Window::hamming>, kernel_window<Window::hamming>});
  r.add({"", "BlackmanWindow", infer_window<Window::blackman>, kernel_window<Window::blackman>});
  r.add({"", "MelWeightMatrix", infer_mel, kernel_mel});
}

}  // namespace kiln::ops

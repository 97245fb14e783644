// Convolutions: Conv (ONNX Conv-11) and ConvTranspose (ONNX ConvTranspose-11),
// float32, NCHW-style layout with 1 to 3 spatial dims.
//
// Conv lowers each (batch, group) to one GEMM: Y_g[M_g, out] = W_g[M_g, C_g*k]
// x col[C_g*k, out], where col is the im2col expansion of X_g (or X_g itself
// for a 1x1, stride-1, unpadded kernel). Depthwise convolutions (one input
// channel per group) run a direct loop instead, since their GEMMs would be
// a single row. ConvTranspose is the adjoint: col = W_g^T x X_g, then col2im
// scatters col into Y. Lower spatial ranks are handled as 3-D with leading
// size-1 dims, so one set of loops serves 1-D, 2-D and 3-D.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "ops/gemm_kernel.h"
#include "ops/util.h"

namespace kiln::ops {

namespace {

constexpr size_t kMaxSpatial = 3;

enum class AutoPad { notset, same_upper, same_lower, valid };

AutoPad read_auto_pad(const ir::Node& n) {
  const std::string s = n.s("auto_pad", "NOTSET");
  if (s == "NOTSET") return AutoPad::notset;
  if (s == "SAME_UPPER") return AutoPad::same_upper;
  if (s == "SAME_LOWER") return AutoPad::same_lower;
  if (s == "VALID") return AutoPad::valid;
  fail(ErrorCode::unsupported, "{}: auto_pad '{}' is not supported", n.label(), s);
}

/// An ints attribute of length r (one value per spatial dim), or `def` everywhere.
std::vector<int64_t> per_dim(const ir::Node& n, const char* name, size_t r, int64_t def, size_t mult = 1) {
  std::vector<int64_t> v = n.ints(name, std::vector<int64_t>(r * mult, def));
  if (v.size() != r * mult)
    fail(ErrorCode::invalid_model, "{}: attribute '{}' has {} values, expected {}", n.label(), name, v.size(),
         r * mult);
  return v;
}

/// Convolution attributes for r spatial dims. `kernel` entries are -1 when
/// neither kernel_shape nor a static W dim gives them.
struct ConvAttrs {
  std::vector<int64_t> kernel, strides, dilations, pads;  ///< pads: r begins then r ends
  int64_t group = 1;
  AutoPad auto_pad = AutoPad::notset;
};

ConvAttrs read_attrs(const ir::Node& n, size_t r, const std::vector<int64_t>& w_kernel) {
  if (r == 0) fail(ErrorCode::invalid_model, "{}: X and W need at least one spatial dim", n.label());
  if (r > kMaxSpatial) fail(ErrorCode::unsupported, "{}: {} spatial dims are not supported (1 to 3)", n.label(), r);
  ConvAttrs a;
  a.kernel = n.has("kernel_shape") ? per_dim(n, "kernel_shape", r, 1) : w_kernel;
  if (n.has("kernel_shape"))
    for (size_t i = 0; i < r; ++i)
      if (w_kernel[i] >= 0 && w_kernel[i] != a.kernel[i])
        fail(ErrorCode::invalid_model, "{}: kernel_shape does not match the weight's spatial dims", n.label());
  a.strides = per_dim(n, "strides", r, 1);
  a.dilations = per_dim(n, "dilations", r, 1);
  a.pads = per_dim(n, "pads", r, 0, 2);
  a.group = n.i("group", 1);
  a.auto_pad = read_auto_pad(n);
  for (size_t i = 0; i < r; ++i)
    if (a.strides[i] < 1 || a.dilations[i] < 1 || a.pads[i] < 0 || a.pads[i + r] < 0)
      fail(ErrorCode::invalid_model, "{}: strides and dilations must be >= 1 and pads >= 0", n.label());
  check_window_bounds(n, {&a.kernel, &a.strides, &a.dilations, &a.pads});
  if (a.group < 1) fail(ErrorCode::invalid_model, "{}: group must be >= 1, got {}", n.label(), a.group);
  return a;
}

/// Spatial dims of W (from index 2) as sizes, -1 where unknown.
std::vector<int64_t> weight_kernel(const std::optional<ir::Shape>& w, size_t r) {
  std::vector<int64_t> k(r, -1);
  if (w && w->size() == r + 2)
    for (size_t i = 0; i < r; ++i) k[i] = (*w)[i + 2].value;
  return k;
}

/// Output size and pads of one Conv spatial dim (ONNX Conv "auto_pad" and
/// the output-shape formula). Updates pb/pe for SAME_* and VALID.
int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t d, AutoPad ap, int64_t& pb, int64_t& pe) {
  const int64_t dk = (k - 1) * d + 1;
  switch (ap) {
    case AutoPad::valid:
      pb = pe = 0;
      return in >= dk ? (in - dk) / s + 1 : 0;
    case AutoPad::same_upper:
    case AutoPad::same_lower: {
      const int64_t out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + dk - in);
      pb = ap == AutoPad::same_upper ? total / 2 : total - total / 2;
      pe = total - pb;
      return out;
    }
    case AutoPad::notset: break;
  }
  const int64_t span = in + pb + pe - dk;
  return span >= 0 ? span / s + 1 : 0;
}

/// Output size and pads of one ConvTranspose spatial dim (ONNX
/// ConvTranspose-11: output_shape, output_padding, auto_pad). A given
/// output_shape (`want` >= 0) fixes the total padding, split as the spec's
/// formula says (extra at the end for SAME_UPPER, at the start otherwise);
/// it may be negative, which extends the output past the last kernel tap.
int64_t convt_out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t out_pad, int64_t want, AutoPad ap,
                       int64_t& pb, int64_t& pe) {
  const int64_t full = s * (in - 1) + out_pad + (k - 1) * d + 1;
  if (want < 0 && (ap == AutoPad::same_upper || ap == AutoPad::same_lower)) want = in * s;
  if (want >= 0) {
    const int64_t total = full - want;
    const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor division
    if (ap == AutoPad::same_upper) {
      pb = half;
      pe = total - half;
    } else {
      pb = total - half;
      pe = half;
    }
    return want;
  }
  if (ap == AutoPad::valid) pb = pe = 0;
  return full - pb - pe;
}

/// The reads of an im2col/col2im pair, padded to 3 spatial dims: column
/// position p of the grid reads image position p*s - pb + k*d.
struct Geom {
  int64_t img[3], grid[3], k[3], s[3], d[3], pb[3];
  int64_t img_size() const { return img[0] * img[1] * img[2]; }
  int64_t grid_size() const { return grid[0] * grid[1] * grid[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

Geom make_geom(const std::vector<int64_t>& img, const std::vector<int64_t>& grid, const ConvAttrs& a) {
  Geom g;
  const size_t r = img.size(), off = kMaxSpatial - r;
  for (size_t i = 0; i < kMaxSpatial; ++i) {
    const bool real = i >= off;
    g.img[i] = real ? img[i - off] : 1;
    g.grid[i] = real ? grid[i - off] : 1;
    g.k[i] = real ? a.kernel[i - off] : 1;
    g.s[i] = real ? a.strides[i - off] : 1;
    g.d[i] = real ? a.dilations[i - off] : 1;
    g.pb[i] = real ? a.pads[i - off] : 0;
  }
  return g;
}

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/// Range [lo, hi) of grid positions q in [0, n) with 0 <= q*s + off < limit.
void valid_range(int64_t n, int64_t s, int64_t off, int64_t limit, int64_t& lo, int64_t& hi) {
  lo = std::clamp<int64_t>(ceil_div(-off, s), 0, n);
  hi = std::clamp<int64_t>(ceil_div(limit - off, s), lo, n);
}

/// Expands `channels` image channels into col[channels*k_size][rows*grid[2]]
/// for the grid rows [r0, r1) (a row = one (z, y) pair of the grid).
void im2col(const float* x, int64_t channels, const Geom& g, int64_t r0, int64_t r1, float* col) {
  const int64_t ks = g.k_size(), width = g.grid[2], n_cols = (r1 - r0) * width, rows = channels * ks;
#pragma omp parallel for schedule(static) if (rows * n_cols > (1 << 16) && !omp_in_parallel())
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t c = row / ks, kk = row % ks;
    const int64_t kz = kk / (g.k[1] * g.k[2]), ky = (kk / g.k[2]) % g.k[1], kx = kk % g.k[2];
    const float* xc = x + c * g.img_size();
    const int64_t x_off = kx * g.d[2] - g.pb[2];
    int64_t lo, hi;
    valid_range(width, g.s[2], x_off, g.img[2], lo, hi);
    for (int64_t r = r0; r < r1; ++r) {
      float* dst = col + row * n_cols + (r - r0) * width;
      const int64_t iz = (r / g.grid[1]) * g.s[0] - g.pb[0] + kz * g.d[0];
      const int64_t iy = (r % g.grid[1]) * g.s[1] - g.pb[1] + ky * g.d[1];
      if (iz < 0 || iz >= g.img[0] || iy < 0 || iy >= g.img[1]) {
        std::fill(dst, dst + width, 0.f);
        continue;
      }
      const float* src = xc + (iz * g.img[1] + iy) * g.img[2] + x_off;
      std::fill(dst, dst + lo, 0.f);
      if (g.s[2] == 1) {
        std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo) * sizeof(float));
      } else {
        for (int64_t q = lo; q < hi; ++q) dst[q] = src[q * g.s[2]];
      }
      std::fill(dst + hi, dst + width, 0.f);
    }
  }
}

/// Adjoint of im2col: adds col[channels*k_size][grid_size] into the image
/// channels y (which the caller has initialised). Parallel over channels, so
/// no two threads write the same element.
void col2im(const float* col, int64_t channels, const Geom& g, float* y) {
  const int64_t ks = g.k_size(), n_cols = g.grid_size(), width = g.grid[2];
#pragma omp parallel for schedule(static) if (channels * ks * n_cols > (1 << 16) && !omp_in_parallel())
  for (int64_t c = 0; c < channels; ++c) {
    float* yc = y + c * g.img_size();
    for (int64_t kk = 0; kk < ks; ++kk) {
      const int64_t kz = kk / (g.k[1] * g.k[2]), ky = (kk / g.k[2]) % g.k[1], kx = kk % g.k[2];
      const float* src_row = col + (c * ks + kk) * n_cols;
      const int64_t x_off = kx * g.d[2] - g.pb[2];
      int64_t lo, hi;
      valid_range(width, g.s[2], x_off, g.img[2], lo, hi);
      for (int64_t r = 0; r < g.grid[0] * g.grid[1]; ++r) {
        const int64_t iz = (r / g.grid[1]) * g.s[0] - g.pb[0] + kz * g.d[0];
        const int64_t iy = (r % g.grid[1]) * g.s[1] - g.pb[1] + ky * g.d[1];
        if (iz < 0 || iz >= g.img[0] || iy < 0 || iy >= g.img[1]) continue;
        float* dst = yc + (iz * g.img[1] + iy) * g.img[2] + x_off;
        const float* src = src_row + r * width;
        for (int64_t q = lo; q < hi; ++q) dst[q * g.s[2]] += src[q];
      }
    }
  }
}

/// Direct depthwise convolution of one image channel x into `mult` output
/// channels y (weights w[mult][k_size]). The channel is first copied into a
/// zero-bordered buffer so the inner loop has no bounds checks.
void depthwise_channel(const float* x, const float* w, const float* bias, int64_t mult, const Geom& g, float* y,
                       std::vector<float>& padded) {
  int64_t ext[3];
  for (int i = 0; i < 3; ++i)
    ext[i] = std::max(g.pb[i] + g.img[i], (g.grid[i] - 1) * g.s[i] + (g.k[i] - 1) * g.d[i] + 1);
  padded.assign(static_cast<size_t>(ext[0] * ext[1] * ext[2]), 0.f);
  for (int64_t z = 0; z < g.img[0]; ++z)
    for (int64_t yy = 0; yy < g.img[1]; ++yy)
      std::memcpy(padded.data() + ((z + g.pb[0]) * ext[1] + yy + g.pb[1]) * ext[2] + g.pb[2],
                  x + (z * g.img[1] + yy) * g.img[2], static_cast<size_t>(g.img[2]) * sizeof(float));
  const int64_t width = g.grid[2];
  for (int64_t m = 0; m < mult; ++m) {
    const float* wm = w + m * g.k_size();
    float* ym = y + m * g.grid_size();
    for (int64_t oz = 0; oz < g.grid[0]; ++oz) {
      for (int64_t oy = 0; oy < g.grid[1]; ++oy) {
        float* out = ym + (oz * g.grid[1] + oy) * width;
        std::fill(out, out + width, bias ? bias[m] : 0.f);
        for (int64_t kz = 0; kz < g.k[0]; ++kz)
          for (int64_t ky = 0; ky < g.k[1]; ++ky) {
            const float* row =
                padded.data() + ((oz * g.s[0] + kz * g.d[0]) * ext[1] + oy * g.s[1] + ky * g.d[1]) * ext[2];
            for (int64_t kx = 0; kx < g.k[2]; ++kx) {
              const float wv = wm[(kz * g.k[1] + ky) * g.k[2] + kx];
              const float* p = row + kx * g.d[2];
              if (g.s[2] == 1) {
                for (int64_t q = 0; q < width; ++q) out[q] += wv * p[q];
              } else {
                for (int64_t q = 0; q < width; ++q) out[q] += wv * p[q * g.s[2]];
              }
            }
          }
      }
    }
  }
}

/// Checks the dtypes (float32 only) of X, W and the optional bias.
void check_f32(const ir::Node& n, DType x, DType w, std::optional<DType> b) {
  if (x != DType::f32) unsupported_dtype(n, x, "input X");
  if (w != DType::f32) unsupported_dtype(n, w, "input W");
  if (b && *b != DType::f32) unsupported_dtype(n, *b, "input B");
}

// ---------------------------------------------------------------- Conv

std::vector<OutType> infer_conv(const InferContext& c) {
  const InType& x = c.in(0);
  const InType& w = c.in(1);
  check_f32(c.node, x.dtype, w.dtype, c.has(2) ? std::optional(c.in(2).dtype) : std::nullopt);
  std::optional<size_t> r;
  if (x.shape) r = x.shape->size() >= 2 ? x.shape->size() - 2 : 0;
  else if (w.shape) r = w.shape->size() >= 2 ? w.shape->size() - 2 : 0;
  if (!r) return {OutType{x.dtype, std::nullopt}};
  if (x.shape && w.shape && x.shape->size() != w.shape->size())
    fail(ErrorCode::invalid_model, "{}: X {} and W {} have different ranks", c.node.label(), ir::shape_str(x.shape),
         ir::shape_str(w.shape));
  const ConvAttrs a = read_attrs(c.node, *r, weight_kernel(w.shape, *r));
  if (c.has(2) && c.in(2).shape && w.shape && (*w.shape)[0].is_static()) {
    const ir::Shape& b = *c.in(2).shape;
    if (b.size() != 1 || (b[0].is_static() && b[0].value != (*w.shape)[0].value))
      fail(ErrorCode::invalid_model, "{}: bias B has shape {}; it must be [{}] (one value per output channel of W)",
           c.node.label(), ir::shape_str(c.in(2).shape), (*w.shape)[0].value);
  }
  ir::Shape y(*r + 2, ir::Dim::sym(""));
  if (x.shape) y[0] = (*x.shape)[0];
  if (w.shape) y[1] = (*w.shape)[0];
  if (x.shape && w.shape) {
    const ir::Dim &cx = (*x.shape)[1], &cw = (*w.shape)[1];
    if (cx.is_static() && cw.is_static() && cx.value != cw.value * a.group)
      fail(ErrorCode::invalid_model, "{}: X has {} channels but W expects {} x group {}", c.node.label(), cx.value,
           cw.value, a.group);
  }
  for (size_t i = 0; x.shape && i < *r; ++i) {
    const ir::Dim& in = (*x.shape)[i + 2];
    if (!in.is_static() || a.kernel[i] < 0) continue;
    int64_t pb = a.pads[i], pe = a.pads[i + *r];
    const int64_t o = conv_out_size(in.value, a.kernel[i], a.strides[i], a.dilations[i], a.auto_pad, pb, pe);
    check_window_output(c.node, i, in.value, pb, pe, (a.kernel[i] - 1) * a.dilations[i] + 1, o);
    y[i + 2] = ir::Dim::known(o);
  }
  return {OutType{x.dtype, y}};
}

/// Adds bias[m] to every element of channel m of a [N, M, size] tensor.
void add_bias(float* y, const float* bias, int64_t N, int64_t M, int64_t size) {
#pragma omp parallel for schedule(static) if (N * M * size > (1 << 16))
  for (int64_t nm = 0; nm < N * M; ++nm) {
    float* p = y + nm * size;
    const float b = bias[nm % M];
    for (int64_t i = 0; i < size; ++i) p[i] += b;
  }
}

/// Validated run-time shapes of X/W/B for Conv and ConvTranspose.
struct ConvShapes {
  std::vector<int64_t> x, w, spatial;
  int64_t N, C;
};

ConvShapes check_shapes(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  check_f32(n, x.dtype(), w.dtype(), ctx.has(2) ? std::optional(ctx.in(2).dtype()) : std::nullopt);
  if (x.rank() < 3 || w.rank() != x.rank())
    fail(ErrorCode::invalid_input, "{}: X {} and W {} must have the same rank >= 3", n.label(), x.describe(),
         w.describe());
  ConvShapes s{x.shape(), w.shape(), {x.shape().begin() + 2, x.shape().end()}, x.dim(0), x.dim(1)};
  return s;
}

void kernel_conv(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const ConvShapes s = check_shapes(ctx);
  const size_t r = s.spatial.size();
  const ConvAttrs a = read_attrs(n, r, {s.w.begin() + 2, s.w.end()});
  const int64_t M = s.w[0], G = a.group;
  if (s.C != s.w[1] * G || M % G != 0)
    fail(ErrorCode::invalid_input, "{}: X {} and W {} do not match group {}", n.label(), ctx.in(0).describe(),
         ctx.in(1).describe(), G);
  const float* bias = nullptr;
  if (ctx.has(2)) {
    if (ctx.in(2).numel() != M)
      fail(ErrorCode::invalid_input, "{}: bias {} must have {} elements", n.label(), ctx.in(2).describe(), M);
    bias = ctx.in(2).data<float>();
  }
  std::vector<int64_t> out(r), pads = a.pads;
  for (size_t i = 0; i < r; ++i)
    out[i] = conv_out_size(s.spatial[i], a.kernel[i], a.strides[i], a.dilations[i], a.auto_pad, pads[i], pads[i + r]);
  ConvAttrs ap = a;
  ap.pads = pads;
  const Geom g = make_geom(s.spatial, out, ap);
  std::vector<int64_t> y_shape{s.N, M};
  y_shape.insert(y_shape.end(), out.begin(), out.end());
  Tensor& yt = ctx.output(0, DType::f32, y_shape);
  float* Y = yt.data<float>();
  const float* X = ctx.in(0).data<float>();
  const float* W = ctx.in(1).data<float>();
  const int64_t Cg = s.C / G, Mg = M / G, ks = g.k_size(), in_size = g.img_size(), out_size = g.grid_size();
  if (yt.numel() == 0) return;

  if (Cg == 1 && G > 1) {  // depthwise (channel multiplier Mg)
#pragma omp parallel
    {
      std::vector<float> padded;
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < s.N * G; ++i) {
        const int64_t b = i / G, c = i % G;
        depthwise_channel(X + i * in_size, W + c * Mg * ks, bias ? bias + c * Mg : nullptr, Mg, g,
                          Y + (b * M + c * Mg) * out_size, padded);
      }
    }
    return;
  }

  bool pointwise = true;
  for (int i = 0; i < 3; ++i)
    pointwise = pointwise && g.k[i] == 1 && g.s[i] == 1 && g.pb[i] == 0 && g.img[i] == g.grid[i];
  // im2col is done a band of output rows at a time to bound its buffer (~8 MiB).
  const int64_t rows_total = g.grid[0] * g.grid[1];
  const int64_t band =
      std::clamp<int64_t>((int64_t{2} << 20) / std::max<int64_t>(1, Cg * ks * g.grid[2]), 1, rows_total);
  static thread_local std::vector<float> col_buf;
  if (!pointwise) col_buf.resize(static_cast<size_t>(std::max<int64_t>(Cg * ks * band * g.grid[2], 1)));
  for (int64_t b = 0; b < s.N; ++b) {
    for (int64_t grp = 0; grp < G; ++grp) {
      const float* xg = X + (b * s.C + grp * Cg) * in_size;
      const float* wg = W + grp * Mg * Cg * ks;
      float* yg = Y + (b * M + grp * Mg) * out_size;
      if (pointwise) {
        sgemm(false, false, Mg, out_size, Cg, 1.f, wg, Cg, xg, in_size, 0.f, yg, out_size);
        continue;
      }
      for (int64_t r0 = 0; r0 < rows_total; r0 += band) {
        const int64_t r1 = std::min(rows_total, r0 + band), cols = (r1 - r0) * g.grid[2];
        im2col(xg, Cg, g, r0, r1, col_buf.data());
        sgemm(false, false, Mg, cols, Cg * ks, 1.f, wg, Cg * ks, col_buf.data(), cols, 0.f, yg + r0 * g.grid[2],
              out_size);
      }
    }
  }
  if (bias) add_bias(Y, bias, s.N, M, out_size);
}

// ---------------------------------------------------------------- ConvTranspose

/// output_padding and output_shape (spatial part) for r spatial dims.
void read_transpose_attrs(const ir::Node& n, size_t r, std::vector<int64_t>& out_pad, std::vector<int64_t>& want) {
  out_pad = per_dim(n, "output_padding", r, 0);
  want.assign(r, -1);
  if (n.has("output_shape")) {
    std::vector<int64_t> os = n.ints("output_shape");
    if (os.size() != r && os.size() != r + 2)
      fail(ErrorCode::invalid_model, "{}: output_shape has {} values for {} spatial dims", n.label(), os.size(), r);
    std::copy(os.end() - static_cast<int64_t>(r), os.end(), want.begin());
  }
}

std::vector<OutType> infer_conv_transpose(const InferContext& c) {
  const InType& x = c.in(0);
  const InType& w = c.in(1);
  check_f32(c.node, x.dtype, w.dtype, c.has(2) ? std::optional(c.in(2).dtype) : std::nullopt);
  std::optional<size_t> r;
  if (x.shape) r = x.shape->size() >= 2 ? x.shape->size() - 2 : 0;
  else if (w.shape) r = w.shape->size() >= 2 ? w.shape->size() - 2 : 0;
  if (!r) return {OutType{x.dtype, std::nullopt}};
  const ConvAttrs a = read_attrs(c.node, *r, weight_kernel(w.shape, *r));
  std::vector<int64_t> out_pad, want;
  read_transpose_attrs(c.node, *r, out_pad, want);
  ir::Shape y(*r + 2, ir::Dim::sym(""));
  if (x.shape) y[0] = (*x.shape)[0];
  if (w.shape && (*w.shape)[1].is_static()) y[1] = ir::Dim::known((*w.shape)[1].value * a.group);
  for (size_t i = 0; i < *r; ++i) {
    if (want[i] >= 0) {
      y[i + 2] = ir::Dim::known(want[i]);
      continue;
    }
    if (!x.shape || !(*x.shape)[i + 2].is_static() || a.kernel[i] < 0) continue;
    int64_t pb = a.pads[i], pe = a.pads[i + *r];
    y[i + 2] = ir::Dim::known(convt_out_size((*x.shape)[i + 2].value, a.kernel[i], a.strides[i], a.dilations[i],
                                             out_pad[i], -1, a.auto_pad, pb, pe));
  }
  return {OutType{x.dtype, y}};
}

void kernel_conv_transpose(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const ConvShapes s = check_shapes(ctx);
  const size_t r = s.spatial.size();
  ConvAttrs a = read_attrs(n, r, {s.w.begin() + 2, s.w.end()});
  const int64_t G = a.group;
  if (s.C != s.w[0] || s.C % G != 0)
    fail(ErrorCode::invalid_input, "{}: X {} and W {} do not match group {}", n.label(), ctx.in(0).describe(),
         ctx.in(1).describe(), G);
  const int64_t Cg = s.C / G, Mg = s.w[1], M = Mg * G;
  const float* bias = nullptr;
  if (ctx.has(2)) {
    if (ctx.in(2).numel() != M)
      fail(ErrorCode::invalid_input, "{}: bias {} must have {} elements", n.label(), ctx.in(2).describe(), M);
    bias = ctx.in(2).data<float>();
  }
  std::vector<int64_t> out_pad, want, out(r);
  read_transpose_attrs(n, r, out_pad, want);
  for (size_t i = 0; i < r; ++i) {
    out[i] = convt_out_size(s.spatial[i], a.kernel[i], a.strides[i], a.dilations[i], out_pad[i], want[i],
                            a.auto_pad, a.pads[i], a.pads[i + r]);
    if (out[i] < 0) fail(ErrorCode::invalid_input, "{}: negative output size along spatial dim {}", n.label(), i);
  }
  // Image = Y, grid = X: X position q feeds Y position q*s - pb + k*d.
  const Geom g = make_geom(out, s.spatial, a);
  std::vector<int64_t> y_shape{s.N, M};
  y_shape.insert(y_shape.end(), out.begin(), out.end());
  Tensor& yt = ctx.output(0, DType::f32, y_shape);
  float* Y = yt.data<float>();
  const float* X = ctx.in(0).data<float>();
  const float* W = ctx.in(1).data<float>();
  const int64_t ks = g.k_size(), in_size = g.grid_size(), out_size = g.img_size();
  std::fill(Y, Y + yt.numel(), 0.f);
  std::vector<float> col(static_cast<size_t>(Mg * ks * in_size));
  for (int64_t b = 0; b < s.N; ++b) {
    for (int64_t grp = 0; grp < G; ++grp) {
      const float* xg = X + (b * s.C + grp * Cg) * in_size;
      const float* wg = W + grp * Cg * Mg * ks;  // [Cg, Mg*ks]
      sgemm(true, false, Mg * ks, in_size, Cg, 1.f, wg, Mg * ks, xg, in_size, 0.f, col.data(), in_size);
      col2im(col.data(), Mg, g, Y + (b * M + grp * Mg) * out_size);
    }
  }
  if (bias) add_bias(Y, bias, s.N, M, out_size);
}

}  // namespace

void register_conv(Registry& r) {
  r.add({"", "Conv", infer_conv, kernel_conv});
  r.add({"", "ConvTranspose", infer_conv_transpose, kernel_conv_transpose});
}

}  // namespace kiln::ops

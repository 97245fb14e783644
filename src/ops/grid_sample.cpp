// Spatial sampling with normalized coordinates: GridSample-22 (same as 20)
// and AffineGrid-20 (https://onnx.ai/onnx/operators/).
//
// GridSample: X [N, C, D1..Dr], Grid [N, O1..Or, r] -> Y [N, C, O1..Or], for
// any r >= 1. Grid's last dim lists the coordinates innermost first (x for
// Dr, then y for D(r-1), ...), each in [-1, 1]; they are mapped to input
// positions by
//   align_corners=1: p = (g + 1) / 2 * (size - 1)   (-1, 1 = centres of the end pixels)
//   align_corners=0: p = ((g + 1) * size - 1) / 2   (-1, 1 = outer edges of the end pixels)
// A position outside the valid range ([0, size-1] aligned, [-0.5, size-0.5]
// otherwise) is first clamped to [0, size-1] (padding_mode border) or
// reflected into the range (reflection). Then:
//   nearest: the pixel at the position rounded half to even;
//   linear:  the 2^r neighbours weighted by 1 - |distance|;
//   cubic:   the 4^r neighbours weighted by Keys' cubic kernel, a = -0.75;
// and a neighbour index outside the input reads 0 (zeros), the clamped index
// (border) or the reflected index (reflection). This matches the spec's
// reference implementation and PyTorch's grid_sample. The weights are
// separable, so the N-D result equals the spec's nested 1-D interpolation.
//
// AffineGrid: theta [N, 2, 3] (2-D) or [N, 3, 4] (3-D) and size [N, C, H, W]
// or [N, C, D, H, W] -> grid [N, H, W, 2] or [N, D, H, W, 3]: each output
// point's base coordinates (x, y[, z], 1), spaced evenly in [-1, 1] as
// align_corners says, multiplied by theta.
//
// dtypes: X, Grid and theta float32 / float64 (computed in double).
#include <algorithm>
#include <cmath>
#include <string>

#include "ops/util.h"

namespace kiln::ops {

namespace {

enum class Mode { nearest, linear, cubic };
enum class Padding { zeros, border, reflection };

Mode mode_of(const ir::Node& n) {
  const std::string m = n.s("mode", "linear");
  if (m == "nearest") return Mode::nearest;
  if (m == "linear" || m == "bilinear") return Mode::linear;
  if (m == "cubic" || m == "bicubic") return Mode::cubic;
  fail(ErrorCode::unsupported, "{}: mode '{}' is not supported (nearest, linear, cubic)", n.label(), m);
}

Padding padding_of(const ir::Node& n) {
  const std::string p = n.s("padding_mode", "zeros");
  if (p == "zeros") return Padding::zeros;
  if (p == "border") return Padding::border;
  if (p == "reflection") return Padding::reflection;
  fail(ErrorCode::unsupported, "{}: padding_mode '{}' is not supported (zeros, border, reflection)", n.label(), p);
}

bool is_f32_or_f64(DType t) { return t == DType::f32 || t == DType::f64; }

/// Reflects x into [lo, hi] by bouncing off the nearer border repeatedly.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double d = lo - x;
    const double k = std::floor(d / range), r = d - k * range;
    return static_cast<int64_t>(k) % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double d = x - hi;
    const double k = std::floor(d / range), r = d - k * range;
    return static_cast<int64_t>(k) % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

/// One spatial dimension of the input: its size and valid coordinate range.
struct Axis {
  int64_t size;
  double lo, hi;  ///< [0, size-1] (align_corners) or [-0.5, size-0.5]
};

/// Index actually read for a neighbour index i, or -1 for a zero (zeros padding).
int64_t source_index(int64_t i, const Axis& a, Padding pad) {
  if (i >= 0 && i < a.size) return i;
  switch (pad) {
    case Padding::zeros: return -1;
    case Padding::border: return i < 0 ? 0 : a.size - 1;
    case Padding::reflection: {
      const int64_t r = static_cast<int64_t>(reflect(static_cast<double>(i), a.lo, a.hi));
      return std::clamp<int64_t>(r, 0, a.size - 1);
    }
  }
  return -1;
}

/// Keys' cubic convolution weights (a = -0.75) of the neighbours at offsets
/// -1, 0, 1, 2 from floor(x), for t = x - floor(x) in [0, 1).
void cubic_weights(double t, double w[4]) {
  constexpr double A = -0.75;
  auto near = [](double s) { return ((A + 2) * s - (A + 3)) * s * s + 1; };           // |s| <= 1
  auto far = [](double s) { return ((A * s - 5 * A) * s + 8 * A) * s - 4 * A; };       // 1 < |s| < 2
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

/// The neighbours of position p along one axis: indices read and weights.
struct Taps {
  int n = 0;
  int64_t idx[4];
  double w[4];
};

Taps taps_for(double p, const Axis& a, Mode mode, Padding pad) {
  Taps t;
  if (mode == Mode::nearest) {
    t.n = 1;
    t.idx[0] = source_index(static_cast<int64_t>(std::nearbyint(p)), a, pad);
    t.w[0] = 1;
    return t;
  }
  const double f = std::floor(p);
  const int64_t i0 = static_cast<int64_t>(f);
  if (mode == Mode::linear) {
    t.n = 2;
    t.w[0] = 1 - (p - f);
    t.w[1] = p - f;
    for (int k = 0; k < 2; ++k) t.idx[k] = source_index(i0 + k, a, pad);
    return t;
  }
  t.n = 4;
  cubic_weights(p - f, t.w);
  for (int k = 0; k < 4; ++k) t.idx[k] = source_index(i0 - 1 + k, a, pad);
  return t;
}

/// Position along axis a of normalized coordinate g, after clamping or
/// reflecting an out-of-range position (file comment). Nearest rounds first,
/// so that the border/reflection rules see the pixel it will read.
double position(double g, const Axis& a, bool align, Mode mode, Padding pad) {
  const double s = static_cast<double>(a.size);
  double p = align ? (g + 1) / 2 * (s - 1) : ((g + 1) * s - 1) / 2;
  if (mode == Mode::nearest) p = std::nearbyint(p);
  if (p < a.lo || p > a.hi) {
    if (pad == Padding::border) p = std::clamp(p, 0.0, s - 1);
    if (pad == Padding::reflection) p = reflect(p, a.lo, a.hi);
  }
  if (mode == Mode::nearest) p = std::trunc(p);
  return p;
}

std::vector<OutType> infer_grid_sample(const InferContext& c) {
  const InType& x = c.in(0);
  const InType& g = c.in(1);
  if (!is_f32_or_f64(x.dtype)) unsupported_dtype(c.node, x.dtype, "input 0 (X)");
  if (!is_f32_or_f64(g.dtype)) unsupported_dtype(c.node, g.dtype, "input 1 (grid)");
  mode_of(c.node);
  padding_of(c.node);
  if (!x.shape || !g.shape) return {OutType{x.dtype, std::nullopt}};
  const size_t r = x.shape->size() - 2;
  if (x.shape->size() < 3 || g.shape->size() != r + 2)
    fail(ErrorCode::invalid_model, "{}: X {} must be [N, C, D1..Dr] and grid {} [N, O1..Or, r]", c.node.label(),
         ir::shape_str(x.shape), ir::shape_str(g.shape));
  const ir::Dim& last = g.shape->back();
  if (last.is_static() && last.value != static_cast<int64_t>(r))
    fail(ErrorCode::invalid_model, "{}: grid {} must end in {} (one coordinate per spatial dim of X {})",
         c.node.label(), ir::shape_str(g.shape), r, ir::shape_str(x.shape));
  ir::Shape out{(*x.shape)[0], (*x.shape)[1]};
  out.insert(out.end(), g.shape->begin() + 1, g.shape->end() - 1);
  return {OutType{x.dtype, out}};
}

template <class T, class G>
void grid_sample(const ir::Node& node, const Tensor& x, const Tensor& grid, Tensor& y) {
  const Mode mode = mode_of(node);
  const Padding pad = padding_of(node);
  const bool align = node.i("align_corners", 0) != 0;
  const int64_t N = x.dim(0), C = x.dim(1), r = x.rank() - 2;
  std::vector<Axis> axes(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const double s = static_cast<double>(x.dim(2 + d));
    axes[d] = {x.dim(2 + d), align ? 0.0 : -0.5, align ? s - 1 : s - 0.5};
  }
  const std::vector<int64_t> xstr = strides_of(x.shape());
  const int64_t in_plane = prod(x.shape(), 2), out_plane = prod(grid.shape(), 1, grid.shape().size() - 1);
  const T* xp = x.data<T>();
  const G* gp = grid.data<G>();
  T* yp = y.data<T>();
#pragma omp parallel for schedule(static) if (N * out_plane > 4096)
  for (int64_t no = 0; no < N * out_plane; ++no) {
    const int64_t b = no / out_plane, o = no % out_plane;
    std::vector<Taps> taps(static_cast<size_t>(r));
    int64_t corners = 1;
    for (int64_t d = 0; d < r; ++d) {
      // Grid coordinate 0 is the innermost spatial dim.
      const double g = static_cast<double>(gp[no * r + (r - 1 - d)]);
      taps[d] = taps_for(position(g, axes[d], align, mode, pad), axes[d], mode, pad);
      corners *= taps[d].n;
    }
    for (int64_t ch = 0; ch < C; ++ch) {
      const T* plane = xp + (b * C + ch) * in_plane;
      double acc = 0;
      for (int64_t k = 0; k < corners; ++k) {
        double w = 1;
        int64_t off = 0, rest = k;
        for (int64_t d = r - 1; d >= 0 && w != 0; --d) {
          const Taps& t = taps[d];
          const int j = static_cast<int>(rest % t.n);
          rest /= t.n;
          if (t.idx[j] < 0) w = 0;
          w *= t.w[j];
          off += t.idx[j] * xstr[2 + d];
        }
        if (w != 0) acc += w * static_cast<double>(plane[off]);
      }
      yp[(b * C + ch) * out_plane + o] = static_cast<T>(acc);
    }
  }
}

void kernel_grid_sample(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& grid = ctx.in(1);
  if (!is_f32_or_f64(x.dtype())) unsupported_dtype(n, x.dtype(), "input 0 (X)");
  if (!is_f32_or_f64(grid.dtype())) unsupported_dtype(n, grid.dtype(), "input 1 (grid)");
  const int64_t r = x.rank() - 2;
  if (r < 1 || grid.rank() != r + 2 || grid.dim(0) != x.dim(0) || grid.shape().back() != r)
    fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, D1..Dr] and grid {} [N, O1..Or, r] with the same N",
         n.label(), x.describe(), grid.describe());
  std::vector<int64_t> out{x.dim(0), x.dim(1)};
  out.insert(out.end(), grid.shape().begin() + 1, grid.shape().end() - 1);
  Tensor& y = ctx.output(0, x.dtype(), out);
  if (y.numel() == 0) return;
  if (x.dtype() == DType::f32) {
    if (grid.dtype() == DType::f32) grid_sample<float, float>(n, x, grid, y);
    else grid_sample<float, double>(n, x, grid, y);
  } else {
    if (grid.dtype() == DType::f32) grid_sample<double, float>(n, x, grid, y);
    else grid_sample<double, double>(n, x, grid, y);
  }
}

// ---------------------------------------------------------------- AffineGrid

/// Spatial sizes from the size input ([N, C, H, W] or [N, C, D, H, W]).
std::vector<int64_t> affine_sizes(const ir::Node& n, const Tensor& size) {
  std::vector<int64_t> s = to_int64s(size);
  if (s.size() != 4 && s.size() != 5)
    fail(ErrorCode::invalid_input, "{}: size {} must hold [N, C, H, W] or [N, C, D, H, W]", n.label(),
         size.describe());
  for (int64_t v : s)
    if (v < 0) fail(ErrorCode::invalid_input, "{}: size has a negative entry {}", n.label(), v);
  return s;
}

std::vector<OutType> infer_affine_grid(const InferContext& c) {
  const InType& theta = c.in(0);
  if (!is_f32_or_f64(theta.dtype)) unsupported_dtype(c.node, theta.dtype, "input 0 (theta)");
  if (c.in(1).dtype != DType::i64) unsupported_dtype(c.node, c.in(1).dtype, "input 1 (size)");
  if (!c.in(1).value) {
    // The rank follows from theta's [N, 2, 3] or [N, 3, 4] when size is not constant.
    if (theta.shape && theta.shape->size() == 3 && (*theta.shape)[1].is_static()) {
      const int64_t r = (*theta.shape)[1].value;
      ir::Shape s(static_cast<size_t>(r + 2), ir::Dim::sym(""));
      s[0] = (*theta.shape)[0];
      s.back() = ir::Dim::known(r);
      return {OutType{theta.dtype, s}};
    }
    return {OutType{theta.dtype, std::nullopt}};
  }
  const std::vector<int64_t> s = affine_sizes(c.node, *c.in(1).value);
  std::vector<int64_t> out{s[0]};
  out.insert(out.end(), s.begin() + 2, s.end());
  out.push_back(static_cast<int64_t>(s.size()) - 2);
  return {OutType{theta.dtype, ir::static_shape(out)}};
}

/// Base coordinate of index i of n points spread over [-1, 1].
double base_coord(int64_t i, int64_t n, bool align) {
  if (align) return n > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1) : -1.0;
  return (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n) - 1.0;
}

template <class T>
void affine_grid(const T* theta, T* out, int64_t N, const std::vector<int64_t>& spatial, bool align) {
  const int64_t r = static_cast<int64_t>(spatial.size());
  const int64_t points = prod(spatial);
  std::vector<double> base(static_cast<size_t>(r + 1));
  for (int64_t b = 0; b < N; ++b) {
    const T* th = theta + b * r * (r + 1);
    for (int64_t p = 0; p < points; ++p) {
      // base = (x, y[, z], 1): x follows the innermost spatial dim.
      int64_t rest = p;
      for (int64_t d = r - 1; d >= 0; --d) {
        base[static_cast<size_t>(r - 1 - d)] = base_coord(rest % spatial[d], spatial[d], align);
        rest /= spatial[d];
      }
      base[static_cast<size_t>(r)] = 1.0;
      for (int64_t i = 0; i < r; ++i) {
        double acc = 0;
        for (int64_t j = 0; j <= r; ++j) acc += static_cast<double>(th[i * (r + 1) + j]) * base[j];
        out[(b * points + p) * r + i] = static_cast<T>(acc);
      }
    }
  }
}

void kernel_affine_grid(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& theta = ctx.in(0);
  if (!is_f32_or_f64(theta.dtype())) unsupported_dtype(n, theta.dtype(), "input 0 (theta)");
  const std::vector<int64_t> s = affine_sizes(n, ctx.in(1));
  const int64_t r = static_cast<int64_t>(s.size()) - 2;
  if (theta.rank() != 3 || theta.dim(0) != s[0] || theta.dim(1) != r || theta.dim(2) != r + 1)
    fail(ErrorCode::invalid_input, "{}: theta {} must be [{}, {}, {}] for size [{}]", n.label(), theta.describe(),
         s[0], r, r + 1, shape_to_string(s));
  const std::vector<int64_t> spatial(s.begin() + 2, s.end());
  std::vector<int64_t> out{s[0]};
  out.insert(out.end(), spatial.begin(), spatial.end());
  out.push_back(r);
  Tensor& y = ctx.output(0, theta.dtype(), out);
  const bool align = n.i("align_corners", 0) != 0;
  if (theta.dtype() == DType::f32)
    affine_grid(theta.data<float>(), y.data<float>(), s[0], spatial, align);
  else
    affine_grid(theta.data<double>(), y.data<double>(), s[0], spatial, align);
}

}  // namespace

/// Registers GridSample and AffineGrid.
void register_grid_sample(Registry& r) {
  r.add({"", "GridSample", infer_grid_sample, kernel_grid_sample});
  r.add({"", "AffineGrid", infer_affine_grid, kernel_affine_grid});
}

}  // namespace kiln::ops

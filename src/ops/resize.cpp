// Resize (ONNX Resize-19; older forms are normalised by the parser, and
// Upsample-7/9 becomes an asymmetric / floor Resize there).
//
// Every supported mode (nearest, linear, cubic) is separable: the N-D result
// equals resizing one axis at a time, each output coordinate mixing 1, 2 or 4
// input rows with fixed weights. So the kernel builds, per resized axis, the
// taps (input indices and weights) of every output coordinate and applies
// them as one pass over a [outer, in, inner] view, skipping axes whose taps
// are the identity. The coordinate mapping follows the spec's
// coordinate_transformation_mode formulas (see original_coord for the one
// reading that differs from onnxruntime). antialias=1 is not supported.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/util.h"

namespace kiln::ops {

namespace {

enum class Mode { nearest, linear, cubic };
enum class Coord {
  half_pixel,
  half_pixel_symmetric,
  pytorch_half_pixel,
  align_corners,
  asymmetric,
  tf_half_pixel_for_nn,
  tf_crop_and_resize
};
enum class Rounding { round_prefer_floor, round_prefer_ceil, floor, ceil };
enum class Policy { stretch, not_larger, not_smaller };

struct ResizeAttrs {
  Mode mode = Mode::nearest;
  Coord coord = Coord::half_pixel;
  Rounding rounding = Rounding::round_prefer_floor;
  Policy policy = Policy::stretch;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  std::vector<int64_t> axes;  ///< normalised; all axes when the attribute is absent
};

template <class E>
E pick(const ir::Node& n, const char* attr, const std::string& def, std::initializer_list<std::pair<const char*, E>> m) {
  const std::string v = n.s(attr, def);
  for (auto& [name, e] : m)
    if (v == name) return e;
  fail(ErrorCode::unsupported, "{}: {} '{}' is not supported", n.label(), attr, v);
}

ResizeAttrs read_attrs(const ir::Node& n, int64_t rank) {
  ResizeAttrs a;
  a.mode = pick<Mode>(n, "mode", "nearest",
                      {{"nearest", Mode::nearest}, {"linear", Mode::linear}, {"cubic", Mode::cubic}});
  a.coord = pick<Coord>(n, "coordinate_transformation_mode", "half_pixel",
                        {{"half_pixel", Coord::half_pixel},
                         {"half_pixel_symmetric", Coord::half_pixel_symmetric},
                         {"pytorch_half_pixel", Coord::pytorch_half_pixel},
                         {"align_corners", Coord::align_corners},
                         {"asymmetric", Coord::asymmetric},
                         {"tf_half_pixel_for_nn", Coord::tf_half_pixel_for_nn},
                         {"tf_crop_and_resize", Coord::tf_crop_and_resize}});
  a.rounding = pick<Rounding>(n, "nearest_mode", "round_prefer_floor",
                              {{"round_prefer_floor", Rounding::round_prefer_floor},
                               {"round_prefer_ceil", Rounding::round_prefer_ceil},
                               {"floor", Rounding::floor},
                               {"ceil", Rounding::ceil}});
  a.policy = pick<Policy>(n, "keep_aspect_ratio_policy", "stretch",
                          {{"stretch", Policy::stretch},
                           {"not_larger", Policy::not_larger},
                           {"not_smaller", Policy::not_smaller}});
  if (n.i("antialias", 0) != 0) fail(ErrorCode::unsupported, "{}: antialias=1 is not supported", n.label());
  a.cubic_a = n.f("cubic_coeff_a", -0.75f);
  a.exclude_outside = n.i("exclude_outside", 0) != 0;
  a.extrapolation = n.f("extrapolation_value", 0.f);
  if (n.has("axes")) {
    for (int64_t ax : n.ints("axes")) {
      const int64_t v = normalize_axis(n, ax, rank, "axes");
      if (std::find(a.axes.begin(), a.axes.end(), v) != a.axes.end())
        fail(ErrorCode::invalid_model, "{}: axis {} is repeated in axes", n.label(), ax);
      a.axes.push_back(v);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) a.axes.push_back(i);
  }
  return a;
}

/// One axis of the resize: sizes, the scale the coordinate formulas use and
/// the crop box (tf_crop_and_resize).
struct AxisPlan {
  int64_t in = -1, out = -1;  ///< -1: unknown (shape inference only)
  double scale = 1.0;
  double length = -1;  ///< resized length before flooring: scale * in (== out when sizes are given)
  double roi_start = 0.0, roi_end = 1.0;
};

/// The scales/sizes/roi inputs (absent or empty tensors are nullptr).
struct ResizeInputs {
  const Tensor* roi = nullptr;
  const Tensor* scales = nullptr;
  const Tensor* sizes = nullptr;
};

/// Output sizes and coordinate scales for every axis of X (in dims may be
/// -1 during shape inference; out dims then stay -1 where they depend on them).
std::vector<AxisPlan> make_plan(const ir::Node& n, const ResizeAttrs& a, const std::vector<int64_t>& in,
                                const ResizeInputs& inp) {
  const size_t r = in.size(), na = a.axes.size();
  std::vector<AxisPlan> p(r);
  for (size_t i = 0; i < r; ++i) {
    p[i].in = p[i].out = in[i];
    p[i].length = static_cast<double>(in[i]);
  }
  if (inp.scales && inp.sizes)
    fail(ErrorCode::invalid_model, "{}: only one of 'scales' and 'sizes' may be given", n.label());
  if (!inp.scales && !inp.sizes)
    fail(ErrorCode::invalid_model, "{}: one of 'scales' and 'sizes' must be given", n.label());
  const Tensor* given = inp.scales ? inp.scales : inp.sizes;
  if (static_cast<size_t>(given->numel()) != na)
    fail(ErrorCode::invalid_input, "{}: {} has {} values, expected {} (one per resized axis)", n.label(),
         inp.scales ? "scales" : "sizes", given->numel(), na);
  if (inp.scales) {
    for (size_t j = 0; j < na; ++j) {
      AxisPlan& ap = p[static_cast<size_t>(a.axes[j])];
      ap.scale = element_as_double(*inp.scales, static_cast<int64_t>(j));
      if (!(ap.scale > 0)) fail(ErrorCode::invalid_input, "{}: scale {} must be > 0", n.label(), ap.scale);
      ap.length = ap.scale * static_cast<double>(ap.in);
      ap.out = ap.in >= 0 ? static_cast<int64_t>(std::floor(ap.length)) : -1;
    }
  } else {
    const std::vector<int64_t> sz = to_int64s(*inp.sizes);
    for (size_t j = 0; j < na; ++j)
      if (sz[j] < 0) fail(ErrorCode::invalid_input, "{}: sizes[{}] = {} is negative", n.label(), j, sz[j]);
    if (a.policy == Policy::stretch) {
      for (size_t j = 0; j < na; ++j) {
        AxisPlan& ap = p[static_cast<size_t>(a.axes[j])];
        ap.out = sz[j];
        ap.length = static_cast<double>(sz[j]);
        ap.scale = ap.in > 0 ? static_cast<double>(sz[j]) / static_cast<double>(ap.in) : 1.0;
      }
    } else {
      // One scale for all resized axes: the smallest (not_larger) or largest
      // (not_smaller) of sizes/in, and out = round_half_up(scale * in).
      bool known = true;
      double s = a.policy == Policy::not_larger ? INFINITY : 0.0;
      for (size_t j = 0; j < na; ++j) {
        const int64_t d = in[static_cast<size_t>(a.axes[j])];
        if (d <= 0) {
          known = false;
          continue;
        }
        const double q = static_cast<double>(sz[j]) / static_cast<double>(d);
        s = a.policy == Policy::not_larger ? std::min(s, q) : std::max(s, q);
      }
      for (size_t j = 0; j < na; ++j) {
        AxisPlan& ap = p[static_cast<size_t>(a.axes[j])];
        ap.scale = s;
        ap.length = s * static_cast<double>(ap.in);
        ap.out = known ? static_cast<int64_t>(std::floor(s * static_cast<double>(ap.in) + 0.5)) : -1;
      }
    }
  }
  if (inp.roi && a.coord == Coord::tf_crop_and_resize) {
    if (static_cast<size_t>(inp.roi->numel()) != 2 * na)
      fail(ErrorCode::invalid_input, "{}: roi has {} values, expected {}", n.label(), inp.roi->numel(), 2 * na);
    for (size_t j = 0; j < na; ++j) {
      AxisPlan& ap = p[static_cast<size_t>(a.axes[j])];
      ap.roi_start = element_as_double(*inp.roi, static_cast<int64_t>(j));
      ap.roi_end = element_as_double(*inp.roi, static_cast<int64_t>(na + j));
    }
  } else if (a.coord == Coord::tf_crop_and_resize) {
    fail(ErrorCode::invalid_input, "{}: tf_crop_and_resize needs the roi input", n.label());
  }
  return p;
}

/// The input coordinate of output coordinate x along one axis (spec
/// formulas). Like the ONNX reference (and the backend test data), the
/// "length_resized" of align_corners and tf_crop_and_resize is scale * in
/// before flooring, which differs from the integer output length only when
/// a scale does not divide evenly.
double original_coord(const ResizeAttrs& a, const AxisPlan& p, int64_t xi) {
  const double x = static_cast<double>(xi), in = static_cast<double>(p.in), out = p.length;
  switch (a.coord) {
    case Coord::half_pixel: return (x + 0.5) / p.scale - 0.5;
    case Coord::half_pixel_symmetric: {
      const double adjustment = static_cast<double>(p.out) / (p.scale * in);
      const double offset = in / 2 * (1 - adjustment);
      return offset + (x + 0.5) / p.scale - 0.5;
    }
    case Coord::pytorch_half_pixel: return p.out > 1 ? (x + 0.5) / p.scale - 0.5 : 0.0;
    case Coord::align_corners: return p.out > 1 ? x * (in - 1) / (out - 1) : 0.0;
    case Coord::asymmetric: return x / p.scale;
    case Coord::tf_half_pixel_for_nn: return (x + 0.5) / p.scale;
    case Coord::tf_crop_and_resize:
      return p.out > 1 ? p.roi_start * (in - 1) + x * (p.roi_end - p.roi_start) * (in - 1) / (out - 1)
                       : 0.5 * (p.roi_start + p.roi_end) * (in - 1);
  }
  return 0.0;
}

/// Interpolation taps of every output coordinate of one axis: n input
/// indices (already clamped to the axis) and weights each, or extrapolate.
struct Taps {
  int n = 1;
  std::vector<int64_t> idx;
  std::vector<float> w;
  std::vector<uint8_t> extrapolate;
  bool identity = false;
};

/// Cubic convolution weights of the 4 taps floor(x)-1 .. floor(x)+2 for the
/// fractional offset t (Keys' kernel with coefficient A, as in the spec).
void cubic_weights(double t, double A, double w[4]) {
  const double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
  w[0] = ((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A;
  w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  w[2] = ((A + 2) * t2 - (A + 3)) * t2 * t2 + 1;
  w[3] = ((A * t3 - 5 * A) * t3 + 8 * A) * t3 - 4 * A;
}

int64_t round_nearest(double x, Rounding r) {
  const double f = std::floor(x), frac = x - f;
  switch (r) {
    case Rounding::floor: return static_cast<int64_t>(f);
    case Rounding::ceil: return static_cast<int64_t>(std::ceil(x));
    case Rounding::round_prefer_floor: return static_cast<int64_t>(frac <= 0.5 ? f : f + 1);
    case Rounding::round_prefer_ceil: return static_cast<int64_t>(frac < 0.5 ? f : f + 1);
  }
  return static_cast<int64_t>(f);
}

Taps make_taps(const ResizeAttrs& a, const AxisPlan& p) {
  Taps t;
  t.n = a.mode == Mode::nearest ? 1 : a.mode == Mode::linear ? 2 : 4;
  const size_t out = static_cast<size_t>(p.out), n = static_cast<size_t>(t.n);
  t.idx.resize(out * n);
  t.w.resize(out * n);
  t.extrapolate.assign(out, 0);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, p.in - 1); };
  t.identity = p.in == p.out;
  for (size_t o = 0; o < out; ++o) {
    const double x = original_coord(a, p, static_cast<int64_t>(o));
    int64_t* idx = &t.idx[o * n];
    float* w = &t.w[o * n];
    if (a.coord == Coord::tf_crop_and_resize && (x < 0 || x > static_cast<double>(p.in - 1))) {
      t.extrapolate[o] = 1;
      std::fill(idx, idx + n, 0);
      std::fill(w, w + n, 0.f);
      t.identity = false;
      continue;
    }
    const double f = std::floor(x), frac = x - f;
    const int64_t fi = static_cast<int64_t>(f);
    if (a.mode == Mode::nearest) {
      idx[0] = clamp(round_nearest(x, a.rounding));
      w[0] = 1.f;
    } else if (a.mode == Mode::linear) {
      idx[0] = clamp(fi);
      idx[1] = clamp(fi + 1);
      w[0] = static_cast<float>(1 - frac);
      w[1] = static_cast<float>(frac);
    } else {
      double cw[4];
      cubic_weights(frac, a.cubic_a, cw);
      double sum = 0;
      for (int k = 0; k < 4; ++k) {
        const int64_t i = fi - 1 + k;
        if (a.exclude_outside && (i < 0 || i >= p.in)) cw[k] = 0;
        sum += cw[k];
      }
      for (int k = 0; k < 4; ++k) {
        idx[k] = clamp(fi - 1 + k);
        w[k] = static_cast<float>(a.exclude_outside && sum != 0 ? cw[k] / sum : cw[k]);
      }
    }
    // Identity: all weight on input index o.
    double self = 0;
    for (size_t k = 0; k < n; ++k) {
      if (idx[k] == static_cast<int64_t>(o)) self += w[k];
      else if (w[k] != 0) t.identity = false;
    }
    if (self != 1.0) t.identity = false;
  }
  return t;
}

/// Resizes one axis: src [outer, in, inner] -> dst [outer, out, inner].
template <class T>
void resize_axis(const T* src, T* dst, int64_t outer, int64_t in, int64_t out, int64_t inner, const Taps& t,
                 T extrapolation) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t rows = outer * out;
#pragma omp parallel for schedule(static) if (rows * inner * t.n > (1 << 15))
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t b = row / out, o = row % out;
    const T* s = src + b * in * inner;
    T* d = dst + row * inner;
    if (t.extrapolate[o]) {
      std::fill(d, d + inner, extrapolation);
      continue;
    }
    const int64_t* idx = &t.idx[static_cast<size_t>(o * t.n)];
    const float* w = &t.w[static_cast<size_t>(o * t.n)];
    if (t.n == 1) {
      if (inner == 1) d[0] = s[idx[0]];  // last-axis nearest: one element
      else std::memcpy(d, s + idx[0] * inner, static_cast<size_t>(inner) * sizeof(T));
      continue;
    }
    if constexpr (std::is_floating_point_v<T>) {
      const T* s0 = s + idx[0] * inner;
      const Acc w0 = w[0];
      for (int64_t i = 0; i < inner; ++i) d[i] = static_cast<T>(w0 * static_cast<Acc>(s0[i]));
      for (int k = 1; k < t.n; ++k) {
        const T* sk = s + idx[k] * inner;
        const Acc wk = w[k];
        for (int64_t i = 0; i < inner; ++i)
          d[i] = static_cast<T>(static_cast<Acc>(d[i]) + wk * static_cast<Acc>(sk[i]));
      }
    }
  }
}

/// Reads the optional inputs, treating empty tensors as absent (opsets 11-12
/// pass an empty roi/scales to mean "not given").
ResizeInputs optional_inputs(const KernelContext& ctx) {
  ResizeInputs r;
  auto get = [&](size_t i) -> const Tensor* {
    return ctx.has(i) && ctx.in(i).numel() > 0 ? &ctx.in(i) : nullptr;
  };
  r.roi = get(1);
  r.scales = get(2);
  r.sizes = get(3);
  return r;
}

template <class T>
void run_resize(const Tensor& x, Tensor& y, const ResizeAttrs& a, const std::vector<AxisPlan>& plan) {
  std::vector<int64_t> cur = x.shape();
  std::vector<T> buf_a, buf_b;
  const T* src = x.data<T>();
  // Resize the axes that need it, last axis first; the final pass writes y.
  std::vector<size_t> todo;
  std::vector<Taps> taps(plan.size());
  for (size_t i = plan.size(); i-- > 0;) {
    taps[i] = make_taps(a, plan[i]);
    if (!taps[i].identity) todo.push_back(i);
  }
  if (todo.empty()) {
    std::memcpy(y.data<T>(), src, x.nbytes());
    return;
  }
  for (size_t k = 0; k < todo.size(); ++k) {
    const size_t ax = todo[k];
    const int64_t outer = prod(cur, 0, ax), inner = prod(cur, ax + 1);
    cur[ax] = plan[ax].out;
    T* dst;
    if (k + 1 == todo.size()) {
      dst = y.data<T>();
    } else {
      std::vector<T>& buf = (k % 2 == 0) ? buf_a : buf_b;
      buf.resize(static_cast<size_t>(prod(cur)));
      dst = buf.data();
    }
    resize_axis<T>(src, dst, outer, plan[ax].in, plan[ax].out, inner, taps[ax], static_cast<T>(a.extrapolation));
    src = dst;
  }
}

void kernel_resize(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const ResizeAttrs a = read_attrs(n, x.rank());
  const bool is_float = x.dtype() == DType::f32 || x.dtype() == DType::f64;
  const bool is_int = x.dtype() == DType::i8 || x.dtype() == DType::u8 || x.dtype() == DType::i32 ||
                      x.dtype() == DType::i64;
  if (!is_float && !(is_int && a.mode == Mode::nearest))
    unsupported_dtype(n, x.dtype(), a.mode == Mode::nearest ? "input X" : "input X (linear/cubic need a float)");
  const std::vector<AxisPlan> plan = make_plan(n, a, x.shape(), optional_inputs(ctx));
  std::vector<int64_t> out(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    out[i] = plan[i].out;
    if (plan[i].in == 0 && out[i] > 0)
      fail(ErrorCode::invalid_input, "{}: cannot resize an empty axis {} to {}", n.label(), i, out[i]);
  }
  Tensor& y = ctx.output(0, x.dtype(), out);
  if (y.numel() == 0) return;
  switch (x.dtype()) {
    case DType::f32: run_resize<float>(x, y, a, plan); break;
    case DType::f64: run_resize<double>(x, y, a, plan); break;
    case DType::i8: run_resize<int8_t>(x, y, a, plan); break;
    case DType::u8: run_resize<uint8_t>(x, y, a, plan); break;
    case DType::i32: run_resize<int32_t>(x, y, a, plan); break;
    case DType::i64: run_resize<int64_t>(x, y, a, plan); break;
    default: unsupported_dtype(n, x.dtype(), "input X");
  }
}

/// Shape inference: exact when X's dims and scales/sizes are known, else the
/// rank of X with unknown dims (axes with scale 1 keep their dim).
std::vector<OutType> infer_resize(const InferContext& c) {
  const InType& x = c.in(0);
  const DType t = x.dtype;
  if (t != DType::f32 && t != DType::f64 && t != DType::i8 && t != DType::u8 && t != DType::i32 && t != DType::i64)
    unsupported_dtype(c.node, t, "input X");
  if (!x.shape) return {OutType{t, std::nullopt}};
  const int64_t rank = static_cast<int64_t>(x.shape->size());
  const ResizeAttrs a = read_attrs(c.node, rank);
  if (a.mode != Mode::nearest && t != DType::f32 && t != DType::f64)
    unsupported_dtype(c.node, t, "input X (linear/cubic need a float)");
  ResizeInputs inp;
  bool known = true;
  auto get = [&](size_t i) -> const Tensor* {
    if (!c.has(i)) return nullptr;
    const InType& it = c.in(i);
    if (it.value) return it.value->numel() > 0 ? it.value : nullptr;
    if (it.shape && ir::is_static(*it.shape) && ir::to_sizes(*it.shape) == std::vector<int64_t>{0}) return nullptr;
    known = false;
    return nullptr;
  };
  inp.scales = get(2);
  inp.sizes = get(3);
  if (!known || (!inp.scales && !inp.sizes)) return {OutType{t, ir::Shape(x.shape->size(), ir::Dim::sym(""))}};
  inp.roi = nullptr;  // roi never changes the output shape
  ResizeAttrs shape_attrs = a;
  shape_attrs.coord = Coord::half_pixel;
  std::vector<int64_t> in(x.shape->size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = (*x.shape)[i].is_static() ? (*x.shape)[i].value : -1;
  const std::vector<AxisPlan> plan = make_plan(c.node, shape_attrs, in, inp);
  ir::Shape y(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const bool untouched = std::find(a.axes.begin(), a.axes.end(), static_cast<int64_t>(i)) == a.axes.end() ||
                           (inp.scales && plan[i].scale == 1.0);
    y[i] = untouched ? (*x.shape)[i] : plan[i].out >= 0 ? ir::Dim::known(plan[i].out) : ir::Dim::sym("");
  }
  return {OutType{t, y}};
}

}  // namespace

void register_resize(Registry& r) { r.add({"", "Resize", infer_resize, kernel_resize}); }

}  // namespace kiln::ops

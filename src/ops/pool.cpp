// Pooling: MaxPool (ONNX MaxPool-12, with the optional int64 Indices output),
// AveragePool-19, LpPool-18, GlobalAveragePool, GlobalMaxPool, GlobalLpPool.
// Layout [N, C, spatial...] with 1 to 3 spatial dims; lower ranks run as 3-D
// with leading size-1 dims. Types: float32 and float64 (MaxPool also int8 and
// uint8, as the spec allows).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/util.h"

namespace kiln::ops {

namespace {

constexpr size_t kMaxSpatial = 3;

enum class PoolKind { max, average, lp };

/// The attributes of a windowed pool for r spatial dims.
struct PoolAttrs {
  std::vector<int64_t> kernel, strides, dilations, pads;  ///< pads: r begins then r ends
  std::string auto_pad;
  bool ceil_mode = false;
};

std::vector<int64_t> per_dim(const ir::Node& n, const char* name, size_t r, int64_t def, size_t mult = 1) {
  std::vector<int64_t> v = n.ints(name, std::vector<int64_t>(r * mult, def));
  if (v.size() != r * mult)
    fail(ErrorCode::invalid_model, "{}: attribute '{}' has {} values, expected {}", n.label(), name, v.size(),
         r * mult);
  return v;
}

PoolAttrs read_attrs(const ir::Node& n, size_t r) {
  if (r == 0) fail(ErrorCode::invalid_model, "{}: the input needs at least one spatial dim", n.label());
  if (r > kMaxSpatial) fail(ErrorCode::unsupported, "{}: {} spatial dims are not supported (1 to 3)", n.label(), r);
  PoolAttrs a;
  a.kernel = n.ints("kernel_shape");
  if (a.kernel.size() != r)
    fail(ErrorCode::invalid_model, "{}: kernel_shape has {} values for {} spatial dims", n.label(), a.kernel.size(),
         r);
  a.strides = per_dim(n, "strides", r, 1);
  a.dilations = per_dim(n, "dilations", r, 1);
  a.pads = per_dim(n, "pads", r, 0, 2);
  a.auto_pad = n.s("auto_pad", "NOTSET");
  a.ceil_mode = n.i("ceil_mode", 0) != 0;
  if (a.auto_pad != "NOTSET" && a.auto_pad != "SAME_UPPER" && a.auto_pad != "SAME_LOWER" && a.auto_pad != "VALID")
    fail(ErrorCode::unsupported, "{}: auto_pad '{}' is not supported", n.label(), a.auto_pad);
  for (size_t i = 0; i < r; ++i)
    if (a.kernel[i] < 1 || a.strides[i] < 1 || a.dilations[i] < 1 || a.pads[i] < 0 || a.pads[i + r] < 0)
      fail(ErrorCode::invalid_model, "{}: kernel, strides, dilations must be >= 1 and pads >= 0", n.label());
  check_window_bounds(n, {&a.kernel, &a.strides, &a.dilations, &a.pads});
  // A window that could lie wholly in the padding has nothing to pool (ONNX
  // Runtime refuses it too: "Pad should be smaller than kernel").
  for (size_t i = 0; i < r; ++i)
    if (a.pads[i] >= a.kernel[i] || a.pads[i + r] >= a.kernel[i])
      fail(ErrorCode::invalid_model, "{}: pads ({}, {}) must be smaller than the kernel ({}) in spatial dim {}",
           n.label(), a.pads[i], a.pads[i + r], a.kernel[i], i);
  return a;
}

/// Output size of one spatial dim (ONNX MaxPool/AveragePool output-shape
/// formulas); sets pb/pe for SAME_* and VALID. In ceil mode a last window
/// that would start inside the end padding is dropped, as the spec says.
int64_t pool_out_size(int64_t in, size_t i, const PoolAttrs& a, int64_t& pb, int64_t& pe) {
  const int64_t s = a.strides[i], dk = (a.kernel[i] - 1) * a.dilations[i] + 1;
  if (a.auto_pad == "VALID") {
    pb = pe = 0;
    return in >= dk ? (in - dk) / s + 1 : 0;
  }
  if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
    const int64_t out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + dk - in);
    pb = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pe = total - pb;
    return out;
  }
  const int64_t span = in + pb + pe - dk;
  if (span < 0) return 0;
  int64_t out = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (a.ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

/// One spatial dim of a pooling window, padded to 3-D.
struct Axis {
  int64_t in = 1, out = 1, k = 1, s = 1, d = 1, pb = 0, pe = 0;
  /// Kernel taps [lo, hi) of output o that land inside the input.
  void taps(int64_t o, int64_t& lo, int64_t& hi) const {
    const int64_t start = o * s - pb;
    lo = start >= 0 ? 0 : (-start + d - 1) / d;
    hi = start >= in ? 0 : std::min(k, (in - 1 - start) / d + 1);
    hi = std::max(hi, lo);
  }
};

struct Geometry {
  Axis ax[3];
  int64_t in_size() const { return ax[0].in * ax[1].in * ax[2].in; }
  int64_t out_size() const { return ax[0].out * ax[1].out * ax[2].out; }
};

/// Geometry and output spatial shape from static input spatial dims.
Geometry make_geometry(const ir::Node& n, const std::vector<int64_t>& spatial, const PoolAttrs& a,
                       std::vector<int64_t>& out) {
  const size_t r = spatial.size(), off = kMaxSpatial - r;
  Geometry g;
  out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    Axis& x = g.ax[i + off];
    x.in = spatial[i];
    x.k = a.kernel[i];
    x.s = a.strides[i];
    x.d = a.dilations[i];
    x.pb = a.pads[i];
    x.pe = a.pads[i + r];
    x.out = out[i] = pool_out_size(x.in, i, a, x.pb, x.pe);
  }
  return g;
}

/// Calls f(T{}) with T the C++ type of the (already checked) pool dtype.
template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::i8: f(int8_t{}); break;
    case DType::u8: f(uint8_t{}); break;
    default: KILN_CHECK(false, "pool dtype {} not checked", dtype_name(t));
  }
}

DType check_dtype(const ir::Node& n, DType t, PoolKind kind) {
  const bool ok = t == DType::f32 || t == DType::f64 ||
                  (kind == PoolKind::max && (t == DType::i8 || t == DType::u8));
  if (!ok) unsupported_dtype(n, t, "input X");
  return t;
}

/// Shape inference of the windowed pools: [N, C, out...] (and the same for Indices).
template <PoolKind kind>
std::vector<OutType> infer_pool(const InferContext& c) {
  const InType& x = c.in(0);
  check_dtype(c.node, x.dtype, kind);
  std::vector<OutType> outs(c.num_outputs, OutType{x.dtype, std::nullopt});
  if (c.num_outputs > 1) outs[1].dtype = DType::i64;
  if (kind != PoolKind::max && c.num_outputs > 1)
    fail(ErrorCode::invalid_model, "{}: has {} outputs, expected 1", c.node.label(), c.num_outputs);
  if (!x.shape) return outs;
  if (x.shape->size() < 3)
    fail(ErrorCode::invalid_model, "{}: X {} must be [N, C, spatial...]", c.node.label(), ir::shape_str(x.shape));
  const size_t r = x.shape->size() - 2;
  const PoolAttrs a = read_attrs(c.node, r);
  ir::Shape y = *x.shape;
  for (size_t i = 0; i < r; ++i) {
    const ir::Dim& in = (*x.shape)[i + 2];
    int64_t pb = a.pads[i], pe = a.pads[i + r];
    if (!in.is_static()) {
      y[i + 2] = ir::Dim::sym("");
      continue;
    }
    const int64_t o = pool_out_size(in.value, i, a, pb, pe);
    check_window_output(c.node, i, in.value, pb, pe, (a.kernel[i] - 1) * a.dilations[i] + 1, o);
    y[i + 2] = ir::Dim::known(o);
  }
  for (auto& o : outs) o.shape = y;
  return outs;
}

/// Index of spatial position (z, y, x) as MaxPool's Indices output counts
/// it within one plane: row-major, or column-major for storage_order 1.
int64_t plane_index(const Geometry& g, int64_t z, int64_t y, int64_t x, bool column_major) {
  if (!column_major) return (z * g.ax[1].in + y) * g.ax[2].in + x;
  return z + g.ax[0].in * (y + g.ax[1].in * x);
}

template <class T, PoolKind kind>
void pool_planes(const T* X, T* Y, int64_t* indices, int64_t planes, const Geometry& g, bool include_pad, float p,
                 bool column_major) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Axis &az = g.ax[0], &ay = g.ax[1], &axx = g.ax[2];
#pragma omp parallel for schedule(static) if (planes * g.out_size() > (1 << 14))
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = X + pl * g.in_size();
    T* yp = Y + pl * g.out_size();
    for (int64_t oz = 0; oz < az.out; ++oz) {
      int64_t z0, z1;
      az.taps(oz, z0, z1);
      for (int64_t oy = 0; oy < ay.out; ++oy) {
        int64_t y0, y1;
        ay.taps(oy, y0, y1);
        for (int64_t ox = 0; ox < axx.out; ++ox) {
          int64_t x0, x1;
          axx.taps(ox, x0, x1);
          const int64_t o = (oz * ay.out + oy) * axx.out + ox;
          Acc acc = kind == PoolKind::max ? static_cast<Acc>(std::numeric_limits<T>::lowest()) : Acc(0);
          int64_t best = -1;
          for (int64_t kz = z0; kz < z1; ++kz) {
            const int64_t iz = oz * az.s - az.pb + kz * az.d;
            for (int64_t ky = y0; ky < y1; ++ky) {
              const int64_t iy = oy * ay.s - ay.pb + ky * ay.d;
              const T* row = xp + (iz * ay.in + iy) * axx.in;
              for (int64_t kx = x0; kx < x1; ++kx) {
                const int64_t ix = ox * axx.s - axx.pb + kx * axx.d;
                const Acc v = static_cast<Acc>(row[ix]);
                if constexpr (kind == PoolKind::max) {
                  if (v > acc || best < 0) {
                    acc = v;
                    best = plane_index(g, iz, iy, ix, column_major);
                  }
                } else if constexpr (kind == PoolKind::average) {
                  acc += v;
                } else {
                  acc += static_cast<Acc>(std::pow(std::abs(v), p));
                }
              }
            }
          }
          if constexpr (kind == PoolKind::max) {
            yp[o] = static_cast<T>(acc);
            if (indices) indices[pl * g.out_size() + o] = best < 0 ? -1 : pl * g.in_size() + best;
          } else if constexpr (kind == PoolKind::average) {
            // count_include_pad divides by the whole kernel, even where a ceil-mode
            // window hangs past the end padding (onnxruntime and the ONNX reference agree).
            const int64_t count = include_pad ? az.k * ay.k * axx.k : (z1 - z0) * (y1 - y0) * (x1 - x0);
            yp[o] = static_cast<T>(acc / static_cast<Acc>(count));
          } else {
            yp[o] = static_cast<T>(std::pow(acc, Acc(1) / static_cast<Acc>(p)));
          }
        }
      }
    }
  }
}

template <PoolKind kind>
void kernel_pool(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_dtype(n, x.dtype(), kind);
  if (x.rank() < 3) fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, spatial...]", n.label(), x.describe());
  const std::vector<int64_t> spatial(x.shape().begin() + 2, x.shape().end());
  const PoolAttrs a = read_attrs(n, spatial.size());
  std::vector<int64_t> out;
  const Geometry g = make_geometry(n, spatial, a, out);
  std::vector<int64_t> y_shape{x.dim(0), x.dim(1)};
  y_shape.insert(y_shape.end(), out.begin(), out.end());
  Tensor& y = ctx.output(0, x.dtype(), y_shape);
  int64_t* indices = nullptr;
  if (kind == PoolKind::max && ctx.num_outputs() > 1 && n.outputs[1] != ir::kNoValue)
    indices = ctx.output(1, DType::i64, y_shape).data<int64_t>();
  const bool include_pad = n.i("count_include_pad", 0) != 0;
  const bool column_major = n.i("storage_order", 0) != 0;
  const float p = static_cast<float>(n.i("p", 2));
  const int64_t planes = x.dim(0) * x.dim(1);
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    pool_planes<T, kind>(x.data<T>(), y.data<T>(), indices, planes, g, include_pad, p, column_major);
  });
}

// ---------------------------------------------------------------- global pools

template <PoolKind kind>
std::vector<OutType> infer_global(const InferContext& c) {
  const InType& x = c.in(0);
  check_dtype(c.node, x.dtype, kind);
  if (!x.shape) return {OutType{x.dtype, std::nullopt}};
  if (x.shape->size() < 3)
    fail(ErrorCode::invalid_model, "{}: X {} must be [N, C, spatial...]", c.node.label(), ir::shape_str(x.shape));
  ir::Shape y = *x.shape;
  for (size_t i = 2; i < y.size(); ++i) y[i] = ir::Dim::known(1);
  return {OutType{x.dtype, y}};
}

template <class T, PoolKind kind>
void global_planes(const T* X, T* Y, int64_t planes, int64_t size, float p) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
#pragma omp parallel for schedule(static) if (planes * size > (1 << 15))
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = X + pl * size;
    if constexpr (kind == PoolKind::max) {
      T m = std::numeric_limits<T>::lowest();
      for (int64_t i = 0; i < size; ++i) m = std::max(m, xp[i]);
      Y[pl] = m;
    } else if constexpr (kind == PoolKind::average) {
      // Double accumulation keeps large planes (e.g. 80x80) accurate.
      double s = 0;
      for (int64_t i = 0; i < size; ++i) s += static_cast<double>(xp[i]);
      Y[pl] = static_cast<T>(s / static_cast<double>(size));
    } else {
      Acc s = 0;
      for (int64_t i = 0; i < size; ++i) s += static_cast<Acc>(std::pow(std::abs(static_cast<Acc>(xp[i])), p));
      Y[pl] = static_cast<T>(std::pow(s, Acc(1) / static_cast<Acc>(p)));
    }
  }
}

template <PoolKind kind>
void kernel_global(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_dtype(n, x.dtype(), kind);
  if (x.rank() < 3) fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, spatial...]", n.label(), x.describe());
  std::vector<int64_t> y_shape = x.shape();
  for (size_t i = 2; i < y_shape.size(); ++i) y_shape[i] = 1;
  Tensor& y = ctx.output(0, x.dtype(), y_shape);
  const int64_t planes = x.dim(0) * x.dim(1), size = prod(x.shape(), 2);
  if (size == 0) fail(ErrorCode::invalid_input, "{}: X {} has empty spatial dims", n.label(), x.describe());
  const float p = static_cast<float>(n.i("p", 2));
  dispatch(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    global_planes<T, kind>(x.data<T>(), y.data<T>(), planes, size, p);
  });
}

}  // namespace

void register_pool(Registry& r) {
  r.add({"", "MaxPool", infer_pool<PoolKind::max>, kernel_pool<PoolKind::max>});
  r.add({"", "AveragePool", infer_pool<PoolKind::average>, kernel_pool<PoolKind::average>});
  r.add({"", "LpPool", infer_pool<PoolKind::lp>, kernel_pool<PoolKind::lp>});
  r.add({"", "GlobalMaxPool", infer_global<PoolKind::max>, kernel_global<PoolKind::max>});
  r.add({"", "GlobalAveragePool", infer_global<PoolKind::average>, kernel_global<PoolKind::average>});
  r.add({"", "GlobalLpPool", infer_global<PoolKind::lp>, kernel_global<PoolKind::lp>});
}

}  // namespace kiln::ops

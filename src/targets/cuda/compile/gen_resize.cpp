// Resize (codegen.h: gen_resize). The interpolation taps of every output
// coordinate of every axis (input indices and weights, the formulas of the
// reference kernel src/ops/resize.cpp) are computed here at compile time and
// stored as two constant tables; one thread per output element then sums
// over the taps of each axis. Nearest copies the one tapped element (any
// dtype); linear and cubic weight float32.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

struct Axis {
  int64_t in = 1, out = 1;
  double scale = 1.0, length = 1.0;
  bool resized = false;
};

double original_coord(const ir::Node& n, const std::string& ctm, const Axis& p, int64_t xi) {
  const double x = static_cast<double>(xi), in = static_cast<double>(p.in), out = p.length;
  if (ctm == "half_pixel") return (x + 0.5) / p.scale - 0.5;
  if (ctm == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(p.out) / (p.scale * in);
    const double offset = in / 2 * (1 - adjustment);
    return offset + (x + 0.5) / p.scale - 0.5;
  }
  if (ctm == "pytorch_half_pixel") return p.out > 1 ? (x + 0.5) / p.scale - 0.5 : 0.0;
  if (ctm == "align_corners") return p.out > 1 ? x * (in - 1) / (out - 1) : 0.0;
  if (ctm == "asymmetric") return x / p.scale;
  if (ctm == "tf_half_pixel_for_nn") return (x + 0.5) / p.scale;
  refuse(n, "coordinate_transformation_mode '" + ctm + "'");
}

int64_t round_nearest(const ir::Node& n, double x, const std::string& mode) {
  const double f = std::floor(x), frac = x - f;
  if (mode == "floor") return static_cast<int64_t>(f);
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  if (mode == "round_prefer_floor") return static_cast<int64_t>(frac <= 0.5 ? f : f + 1);
  if (mode == "round_prefer_ceil") return static_cast<int64_t>(frac < 0.5 ? f : f + 1);
  refuse(n, "nearest_mode '" + mode + "'");
}

void cubic_weights(double t, double A, double w[4]) {
  const double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
  w[0] = ((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A;
  w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  w[2] = ((A + 2) * t2 - (A + 3)) * t2 * t2 + 1;
  w[3] = ((A * t3 - 5 * A) * t3 + 8 * A) * t3 - 4 * A;
}

}  // namespace

std::vector<ir::Node> gen_resize(Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Resize") return {};
  ir::Model& m = L.model;
  const std::string mode = n.s("mode", "nearest"), ctm = n.s("coordinate_transformation_mode", "half_pixel");
  const std::string nm = n.s("nearest_mode", "round_prefer_floor");
  if (n.s("keep_aspect_ratio_policy", "stretch") != "stretch") refuse(n, "keep_aspect_ratio_policy other than stretch");
  if (n.i("antialias", 0) != 0) refuse(n, "antialias");
  if (ctm == "tf_crop_and_resize") refuse(n, "coordinate_transformation_mode tf_crop_and_resize");
  const int taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : mode == "cubic" ? 4 : 0;
  if (!taps) refuse(n, "mode '" + mode + "'");
  DType dt = m.value(n.inputs[0]).dtype;
  if (taps > 1 && dt != DType::f32) refuse(n, "linear / cubic resize of a non-float32 input");
  auto x = L.dims(n, n.inputs[0]), y = L.dims(n, n.outputs[0]);
  const int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes = n.ints("axes");
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  for (auto& a : axes) a = norm_axis(n, a, r);
  std::vector<Axis> ax(r);
  for (int64_t d = 0; d < r; ++d) ax[d].in = x[d], ax[d].out = y[d], ax[d].length = static_cast<double>(x[d]);
  const ir::Value* sc = n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue ? &m.value(n.inputs[2]) : nullptr;
  const ir::Value* sz = n.inputs.size() > 3 && n.inputs[3] != ir::kNoValue ? &m.value(n.inputs[3]) : nullptr;
  if (sc && sc->constant && sc->constant->numel() == 0) sc = nullptr;
  if (sc) {
    if (!sc->constant || sc->dtype != DType::f32 || sc->constant->numel() != static_cast<int64_t>(axes.size()))
      refuse(n, "scales must be a float32 constant with one entry per resized axis");
    for (size_t j = 0; j < axes.size(); ++j) {
      Axis& a = ax[axes[j]];
      a.scale = sc->constant->data<float>()[j];
      a.length = a.scale * static_cast<double>(a.in);
      a.resized = true;
    }
  } else {
    // sizes (constant or not): the static output shape says what they are.
    if (!sz) refuse(n, "neither scales nor sizes is given");
    for (int64_t a : axes) {
      Axis& p = ax[a];
      p.length = static_cast<double>(p.out);
      p.scale = p.in > 0 ? static_cast<double>(p.out) / static_cast<double>(p.in) : 1.0;
      p.resized = true;
    }
  }
  // Taps per axis; an axis that is not resized (or maps every index to
  // itself with weight 1) keeps one tap.
  const double A = n.f("cubic_coeff_a", -0.75f);
  const bool exclude = n.i("exclude_outside", 0) != 0;
  std::vector<int32_t> idx_table;
  std::vector<float> w_table;
  std::vector<int64_t> off(r), nt(r);
  for (int64_t d = 0; d < r; ++d) {
    const Axis& p = ax[d];
    std::vector<int32_t> idx;
    std::vector<float> w;
    bool identity = p.in == p.out;
    int k = taps;
    auto clamp = [&](int64_t i) { return static_cast<int32_t>(std::clamp<int64_t>(i, 0, p.in - 1)); };
    for (int64_t o = 0; o < p.out; ++o) {
      const double c = p.resized ? original_coord(n, ctm, p, o) : static_cast<double>(o);
      const double f = std::floor(c), frac = c - f;
      const int64_t fi = static_cast<int64_t>(f);
      int32_t ii[4] = {0, 0, 0, 0};
      float ww[4] = {0, 0, 0, 0};
      if (taps == 1) {
        ii[0] = clamp(p.resized ? round_nearest(n, c, nm) : o), ww[0] = 1.f;
      } else if (taps == 2) {
        ii[0] = clamp(fi), ii[1] = clamp(fi + 1);
        ww[0] = static_cast<float>(1 - frac), ww[1] = static_cast<float>(frac);
      } else {
        double cw[4], sum = 0;
        cubic_weights(frac, A, cw);
        for (int q = 0; q < 4; ++q) {
          if (exclude && (fi - 1 + q < 0 || fi - 1 + q >= p.in)) cw[q] = 0;
          sum += cw[q];
        }
        for (int q = 0; q < 4; ++q) {
          ii[q] = clamp(fi - 1 + q);
          ww[q] = static_cast<float>(exclude && sum != 0 ? cw[q] / sum : cw[q]);
        }
      }
      double self = 0;
      for (int q = 0; q < k; ++q) {
        if (ii[q] == o) self += ww[q];
        else if (ww[q] != 0) identity = false;
      }
      if (self != 1.0) identity = false;
      idx.insert(idx.end(), ii, ii + k);
      w.insert(w.end(), ww, ww + k);
    }
    off[d] = static_cast<int64_t>(idx_table.size());
    if (identity || !p.resized) {
      nt[d] = 1;
      for (int64_t o = 0; o < p.out; ++o) idx_table.push_back(static_cast<int32_t>(std::min(o, p.in - 1))), w_table.push_back(1.f);
    } else {
      nt[d] = k;
      idx_table.insert(idx_table.end(), idx.begin(), idx.end());
      w_table.insert(w_table.end(), w.begin(), w.end());
    }
  }
  auto add_const = [&](const std::string& suffix, DType t, const void* data, size_t count) {
    ir::Value v;
    v.name = n.name + suffix;
    v.dtype = t;
    v.shape = ir::static_shape({static_cast<int64_t>(count)});
    v.constant = Tensor::from_bytes(t, {static_cast<int64_t>(count)}, data, count * dtype_size(t));
    return m.add_value(v);
  };
  ir::ValueId idx_v = add_const("_taps_idx", DType::i32, idx_table.data(), idx_table.size());
  ir::ValueId w_v = add_const("_taps_w", DType::f32, w_table.data(), w_table.size());
  auto xs = strides_of(x);
  std::string body = "I r = i;";
  for (int64_t d = r - 1; d >= 0; --d) {
    body += fmt::format(" I o{0} = r % {1}u;", d, y[d]);
    if (d > 0) body += fmt::format(" r /= {}u;", y[d]);
  }
  std::string T = raw_type(dtype_size(dt));
  if (taps == 1) {
    std::string j = "0ull";
    for (int64_t d = 0; d < r; ++d) j += fmt::format(" + (unsigned long long)ti[{} + o{}] * {}ull", off[d], d, xs[d]);
    body += " y[i] = x[" + j + "];";
  } else {
    body += " float acc = 0.f;";
    std::string j = "0ull", w = "1.f";
    for (int64_t d = 0; d < r; ++d) {
      body += fmt::format(" for (int t{0} = 0; t{0} < {1}; ++t{0}) {{ const unsigned q{0} = {2} + o{0} * {1} + t{0};", d, nt[d], off[d]);
      j += fmt::format(" + (unsigned long long)ti[q{}] * {}ull", d, xs[d]);
      w += fmt::format(" * tw[q{}]", d);
    }
    body += fmt::format(" acc += {} * x[{}];", w, j);
    for (int64_t d = 0; d < r; ++d) body += " }";
    body += " y[i] = acc;";
    T = "float";
  }
  std::string name = L.kernel_name("resize");
  int64_t N = numel(y);
  L.source += fmt::format(
      "\n// {} {}, {}, {}\nextern \"C\" __global__ void __launch_bounds__(256) {}(const {} * __restrict__ x, "
      "const int* __restrict__ ti, const float* __restrict__ tw, {}* __restrict__ y) {{\n"
      "  typedef {} I;\n"
      "  for (I i = (I)blockIdx.x * 256u + threadIdx.x; i < (I){}ull; i += (I)gridDim.x * 256u) {{\n    {}\n  }}\n}}\n",
      n.label(), mode, ctm, nm, name, T, T, index_type(N), N, body);
  return {L.kernel_node(n, name, {n.inputs[0], idx_v, w_v}, {n.outputs[0]}, L.grid_for(N, 256), 256)};
}

}  // namespace kiln::targets::cuda

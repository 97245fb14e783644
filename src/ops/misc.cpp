// Small standalone operators: LRN-13, Shrink-9, Det-22 (same as 11) and
// MeanVarianceNormalization-13 (https://onnx.ai/onnx/operators/).
//
// LRN: X [N, C, ...]; for each element, the sum of squares over the channels
// c - floor((size-1)/2) .. c + ceil((size-1)/2) (clipped to [0, C)), and
//   Y = X / (bias + alpha / size * sum)^beta.
// Shrink: y = x + bias for x < -lambd, x - bias for x > lambd, else 0.
// Det: X [..., M, M] -> [...]: LU factorisation with partial pivoting in
// double (a singular matrix gives 0).
// MeanVarianceNormalization: over `axes` (default [0, 2, 3]),
//   Y = (X - mean) / (sqrt(variance) + 1e-9),
// the spec's function body (population variance), computed in double with
// two passes.
// dtypes: float32 / float64 (Shrink also the integer types).
#include <cmath>
#include <type_traits>

#include "ops/util.h"

namespace kiln::ops {

namespace {

bool is_f32_or_f64(DType t) { return t == DType::f32 || t == DType::f64; }

void check_float(const ir::Node& n, DType t) {
  if (!is_f32_or_f64(t)) unsupported_dtype(n, t, "input 0");
}

std::vector<OutType> infer_same_float(const InferContext& c) {
  check_float(c.node, c.in(0).dtype);
  return {OutType{c.in(0).dtype, c.in(0).shape}};
}

// ---------------------------------------------------------------- LRN

template <class T>
void lrn(const T* x, T* y, int64_t N, int64_t C, int64_t inner, int64_t size, double alpha, double beta,
         double bias) {
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
#pragma omp parallel for schedule(static) if (N * C * inner > (1 << 15))
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const int64_t b = nc / C, c = nc % C;
    const int64_t c0 = std::max<int64_t>(0, c - lo), c1 = std::min<int64_t>(C - 1, c + hi);
    for (int64_t i = 0; i < inner; ++i) {
      double sq = 0;
      for (int64_t k = c0; k <= c1; ++k) {
        const double v = static_cast<double>(x[(b * C + k) * inner + i]);
        sq += v * v;
      }
      const double v = static_cast<double>(x[nc * inner + i]);
      y[nc * inner + i] = static_cast<T>(v / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
    }
  }
}

void kernel_lrn(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_float(n, x.dtype());
  if (x.rank() < 2) fail(ErrorCode::invalid_input, "{}: X {} must be [N, C, ...]", n.label(), x.describe());
  const int64_t size = n.i("size");
  if (size < 1) fail(ErrorCode::invalid_model, "{}: size must be >= 1, got {}", n.label(), size);
  const double alpha = n.f("alpha", 1e-4f), beta = n.f("beta", 0.75f), bias = n.f("bias", 1.0f);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  const int64_t N = x.dim(0), C = x.dim(1), inner = prod(x.shape(), 2);
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0",
                      { lrn(x.data<scalar_t>(), y.data<scalar_t>(), N, C, inner, size, alpha, beta, bias); });
}

// ---------------------------------------------------------------- Shrink

std::vector<OutType> infer_shrink(const InferContext& c) {
  const DType t = c.in(0).dtype;
  switch (t) {
    case DType::f32: case DType::f64: case DType::i8: case DType::i16: case DType::i32: case DType::i64:
    case DType::u8: case DType::u16: case DType::u32: case DType::u64: break;
    default: unsupported_dtype(c.node, t, "input 0");
  }
  return {OutType{t, c.in(0).shape}};
}

void kernel_shrink(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const double lambd = n.f("lambd", 0.5f), bias = n.f("bias", 0.0f);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  KILN_DISPATCH_NUMERIC(x.dtype(), n, "input 0", {
    const scalar_t* xp = x.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = static_cast<double>(xp[i]);
      yp[i] = static_cast<scalar_t>(v < -lambd ? v + bias : v > lambd ? v - bias : 0.0);
    }
  });
}

// ---------------------------------------------------------------- Det

std::vector<OutType> infer_det(const InferContext& c) {
  const InType& x = c.in(0);
  check_float(c.node, x.dtype);
  if (!x.shape) return {OutType{x.dtype, std::nullopt}};
  const ir::Shape& s = *x.shape;
  if (s.size() < 2) fail(ErrorCode::invalid_model, "{}: X {} must be [..., M, M]", c.node.label(), ir::shape_str(x.shape));
  const ir::Dim &r = s[s.size() - 2], &col = s.back();
  if (r.is_static() && col.is_static() && r.value != col.value)
    fail(ErrorCode::invalid_model, "{}: X {} must hold square matrices", c.node.label(), ir::shape_str(x.shape));
  return {OutType{x.dtype, ir::Shape(s.begin(), s.end() - 2)}};
}

/// Determinant of the M x M matrix a (row-major, destroyed).
double determinant(std::vector<double>& a, int64_t M) {
  double det = 1;
  for (int64_t k = 0; k < M; ++k) {
    int64_t piv = k;
    for (int64_t r = k + 1; r < M; ++r)
      if (std::fabs(a[r * M + k]) > std::fabs(a[piv * M + k])) piv = r;
    if (a[piv * M + k] == 0) return 0.0;
    if (piv != k) {
      for (int64_t j = 0; j < M; ++j) std::swap(a[k * M + j], a[piv * M + j]);
      det = -det;
    }
    const double d = a[k * M + k];
    det *= d;
    for (int64_t r = k + 1; r < M; ++r) {
      const double f = a[r * M + k] / d;
      for (int64_t j = k + 1; j < M; ++j) a[r * M + j] -= f * a[k * M + j];
    }
  }
  return det;
}

void kernel_det(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_float(n, x.dtype());
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
    fail(ErrorCode::invalid_input, "{}: X {} must be [..., M, M]", n.label(), x.describe());
  const int64_t M = x.dim(x.rank() - 1), batch = prod(x.shape(), 0, static_cast<size_t>(x.rank() - 2));
  Tensor& y = ctx.output(0, x.dtype(), std::vector<int64_t>(x.shape().begin(), x.shape().end() - 2));
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", {
    std::vector<double> a(static_cast<size_t>(M * M));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < M * M; ++i) a[i] = static_cast<double>(x.data<scalar_t>()[b * M * M + i]);
      y.data<scalar_t>()[b] = static_cast<scalar_t>(determinant(a, M));
    }
  });
}

// ---------------------------------------------------------------- MeanVarianceNormalization

/// Normalised axes of the node (default [0, 2, 3]) as a mask over rank dims.
std::vector<bool> mvn_axes(const ir::Node& n, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : n.ints("axes", {0, 2, 3})) mask[static_cast<size_t>(normalize_axis(n, a, rank, "axes"))] = true;
  return mask;
}

std::vector<OutType> infer_mvn(const InferContext& c) {
  check_float(c.node, c.in(0).dtype);
  if (c.in(0).shape) mvn_axes(c.node, static_cast<int64_t>(c.in(0).shape->size()));
  return {OutType{c.in(0).dtype, c.in(0).shape}};
}

template <class T>
void mvn(const Tensor& x, Tensor& y, const std::vector<bool>& reduced) {
  // Each element belongs to the group given by its coordinates on the kept dims.
  const std::vector<int64_t>& shape = x.shape();
  const int64_t total = x.numel();
  std::vector<int64_t> group(static_cast<size_t>(total));
  int64_t groups = 1;
  {
    std::vector<int64_t> idx(shape.size(), 0);
    for (int64_t e = 0; e < total; ++e) {
      int64_t g = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        if (!reduced[d]) g = g * shape[d] + idx[d];
      group[static_cast<size_t>(e)] = g;
      for (size_t d = shape.size(); d-- > 0;) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    for (size_t d = 0; d < shape.size(); ++d)
      if (!reduced[d]) groups *= shape[d];
  }
  const T* xp = x.data<T>();
  std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
  std::vector<int64_t> cnt(static_cast<size_t>(groups), 0);
  for (int64_t e = 0; e < total; ++e) {
    sum[group[e]] += static_cast<double>(xp[e]);
    ++cnt[group[e]];
  }
  for (int64_t g = 0; g < groups; ++g) sum[g] = cnt[g] ? sum[g] / static_cast<double>(cnt[g]) : 0.0;
  for (int64_t e = 0; e < total; ++e) {
    const double d = static_cast<double>(xp[e]) - sum[group[e]];
    sq[group[e]] += d * d;
  }
  for (int64_t g = 0; g < groups; ++g) sq[g] = std::sqrt(cnt[g] ? sq[g] / static_cast<double>(cnt[g]) : 0.0) + 1e-9;
  T* yp = y.data<T>();
  for (int64_t e = 0; e < total; ++e)
    yp[e] = static_cast<T>((static_cast<double>(xp[e]) - sum[group[e]]) / sq[group[e]]);
}

void kernel_mvn(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  check_float(n, x.dtype());
  const std::vector<bool> reduced = mvn_axes(n, x.rank());
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  KILN_DISPATCH_FLOAT(x.dtype(), n, "input 0", { mvn<scalar_t>(x, y, reduced); });
}

}  // namespace

/// Registers LRN, Shrink, Det and MeanVarianceNormalization.
void register_misc(Registry& r) {
  r.add({"", "LRN", infer_same_float, kernel_lrn});
  r.add({"", "Shrink", infer_shrink, kernel_shrink});
  r.add({"", "Det", infer_det, kernel_det});
  r.add({"", "MeanVarianceNormalization", infer_mvn, kernel_mvn});
}

}  // namespace kiln::ops

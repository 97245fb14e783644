// Output comparison of the cuda GPU tests against the ref target (header
// only: each GPU test program includes it).
//
// An element passes when |cuda - ref| <= atol * scale + rtol * |ref|, with
// scale = max(1, max |ref|): atol is relative to the output's magnitude
// (test_cuda_precision_gpu.cpp derives the fp16 / bf16 / TF32 values).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kiln/session.h"
#include "kiln/tensor.h"

namespace kiln::testing {

/// Relative and scaled-absolute tolerance of one comparison.
struct Tol {
  double rtol, atol;
};

/// Largest |got - want| / (atol * scale + rtol * |want|) over the elements
/// (> 1: out of tolerance; infinity for NaN, a shape or a dtype mismatch);
/// adds a failure for the first few bad elements. got and want are float32
/// of one shape (the model's outputs stay float32 in every precision).
inline double expect_within(const Tensor& got, const Tensor& want, const std::string& what, Tol tol) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), DType::f32) << what << ": the model's outputs stay float32";
  if (got.shape() != want.shape() || got.dtype() != DType::f32) return INFINITY;
  double scale = 1;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
  double worst = 0;
  int bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.data<float>()[i], w = want.data<float>()[i];
    double ratio = std::fabs(g - w) / (tol.atol * scale + tol.rtol * std::fabs(w));
    if (!(ratio <= 1)) {
      if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: cuda " << g << ", ref " << w << " (scale " << scale << ")";
      ratio = std::isnan(ratio) ? INFINITY : ratio;
    }
    worst = std::max(worst, ratio);
  }
  return worst;
}

/// Options of a GPU test's session: target `t`, precision `p`, no cache
/// (every session compiles what the test asks, never an entry of an
/// earlier run).
inline SessionOptions uncached_options(Target t, Precision p) {
  SessionOptions o;
  o.target = t;
  o.precision = p;
  o.use_cache = false;
  return o;
}

}  // namespace kiln::testing

// RMS normalization as one row kernel (rms_norm.cpp) on a GPU (label
// `cuda`, part of kiln_cuda_gpu_tests, SKIPPED without a device): the three
// forms of rms_norm_model at D = 64 (a warp per row) and D = 2304 (a block
// per row) against the ref target, float32 and float16.
//
// Tolerances (gpu_compare.h's form): float32 1e-5 (a sum of D squares in
// another order: a few ulps); float16 1e-2 (x and y rounded to 16 bits,
// statistics in float32: 2 roundings of 2^-11 times |W| <= 1.25, with room).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "gpu_compare.h"
#include "kiln/session.h"
#include "norm_models.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

TEST(CudaRmsNormGpu, FusedChainsMatchRef) {
  TempDir dir;
  for (int64_t d : {64, 2304})
    for (int form : {0, 1, 2}) {
      const fs::path model = dir / ("rms" + std::to_string(form) + "_" + std::to_string(d) + ".onnx");
      rms_norm_model(form, d).save(model);
      Tensor x(DType::f32, {2, 6, d});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 3.f * std::sin(0.31f * static_cast<float>(i) + 0.5f);
      const auto want = Session(model, uncached_options(Target::ref(), Precision::fp32)).run({{"x", x}});
      for (Precision p : {Precision::fp32, Precision::fp16}) {
        const Tol tol = p == Precision::fp32 ? Tol{1e-5, 1e-5} : Tol{1e-2, 1e-2};
        const auto got = Session(model, uncached_options(Target::cuda(), p)).run({{"x", x}});
        for (auto& [name, w] : want) {
          const std::string what =
              "rms form " + std::to_string(form) + " D " + std::to_string(d) + " " + name + " " + precision_text(p, false);
          ASSERT_TRUE(got.count(name)) << what;
          std::printf("%-36s worst error / tolerance %.3f\n", what.c_str(), expect_within(got.at(name), w, what, tol));
        }
      }
    }
}

}  // namespace
}  // namespace kiln::testing

// KILN_CUDA_POINTWISE=cudnn on a GPU (label `cuda`, part of
// kiln_cuda_gpu_tests, SKIPPED without a device): resnet_tail_model's three
// outputs (a residual of 1x1 convolutions, a Gemm classifier, a MatMul + bias
// and a Gemm with transB 0, all as cuDNN 1x1 convolutions with graph-API
// epilogues) against the ref target in float32, float16 and bfloat16, and
// the default (cuBLASLt) alongside.
//
// Tolerances (gpu_compare.h's form): float32 1e-4 (cuDNN sums K <= 72
// products in another order than ref: a few float32 ulps; strict float32,
// no TF32); float16 3e-2 as test_cuda_nhwc_gpu.cpp derives it; bfloat16
// 0.1 by the same rule (2^-8: 3 * 2^-8 * sqrt(72) = 0.1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "gpu_compare.h"
#include "kiln/session.h"
#include "nhwc_models.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

TEST(CudaPointwiseGpu, CudnnFormMatchesRef) {
  TempDir dir;
  const fs::path model = dir / "resnet_tail.onnx";
  resnet_tail_model(3).save(model);
  Tensor x(DType::f32, {3, 8, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.23f * static_cast<float>(i) + 0.5f);
  const auto want = Session(model, uncached_options(Target::ref(), Precision::fp32)).run({{"x", x}});
  for (const char* mode : {"cudnn", "gemm"}) {
    setenv("KILN_CUDA_POINTWISE", mode, 1);
    for (Precision p : {Precision::fp32, Precision::fp16, Precision::bf16}) {
      const Tol tol = p == Precision::fp32 ? Tol{1e-4, 1e-4} : p == Precision::fp16 ? Tol{3e-2, 3e-2} : Tol{0.1, 0.1};
      const auto got = Session(model, uncached_options(Target::cuda(), p)).run({{"x", x}});
      for (auto& [name, w] : want) {
        const std::string what = std::string(name) + " " + precision_text(p, false) + " pointwise " + mode;
        ASSERT_TRUE(got.count(name)) << what;
        const double worst = expect_within(got.at(name), w, what, tol);
        std::printf("%-36s worst error / tolerance %.3f\n", what.c_str(), worst);
      }
    }
  }
  unsetenv("KILN_CUDA_POINTWISE");
}

}  // namespace
}  // namespace kiln::testing

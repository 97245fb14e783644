// Patch convolutions as a transpose and a matmul (patch_conv.cpp) on a GPU
// (label `cuda`, part of kiln_cuda_gpu_tests, SKIPPED without a device):
// patch_embed_model's two outputs against the ref target in float32 and
// float16, with the rewrite on and (KILN_CUDA_PATCH_GEMM=0) off.
//
// Tolerances (gpu_compare.h's form): float32 1e-4 (cuBLASLt and cuDNN sum
// K = 48 or 192 products in another order than ref: a few float32 ulps);
// float16 3e-2 as test_cuda_nhwc_gpu.cpp derives it (input, filter and
// result rounded: c = 3 roundings, sqrt(192) = 13.9: 3 * 2^-11 * 13.9 = 2e-2).
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

TEST(CudaPatchConvGpu, MatmulFormMatchesRef) {
  TempDir dir;
  const fs::path model = dir / "patch.onnx";
  patch_embed_model(3).save(model);
  Tensor x(DType::f32, {3, 3, 16, 16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.29f * static_cast<float>(i) + 0.2f);
  const auto want = Session(model, uncached_options(Target::ref(), Precision::fp32)).run({{"x", x}});
  for (const char* patch : {"1", "0"}) {
    setenv("KILN_CUDA_PATCH_GEMM", patch, 1);
    for (Precision p : {Precision::fp32, Precision::fp16}) {
      const Tol tol = p == Precision::fp32 ? Tol{1e-4, 1e-4} : Tol{3e-2, 3e-2};
      const auto got = Session(model, uncached_options(Target::cuda(), p)).run({{"x", x}});
      for (auto& [name, w] : want) {
        const std::string what = std::string(name) + " " + precision_text(p, false) + " patch gemm " + patch;
        ASSERT_TRUE(got.count(name)) << what;
        const double worst = expect_within(got.at(name), w, what, tol);
        std::printf("%-36s worst error / tolerance %.3f\n", what.c_str(), worst);
      }
    }
  }
  unsetenv("KILN_CUDA_PATCH_GEMM");
}

}  // namespace
}  // namespace kiln::testing

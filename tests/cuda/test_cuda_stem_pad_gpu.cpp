// Channel padding of RGB-stem convolutions (stem_pad.cpp) on a GPU (label
// `cuda`, part of kiln_cuda_gpu_tests, SKIPPED without a device): the RGB
// stems of rgb_stem_model (7x7 / 2 as ResNet's, 3x3 / 2 as EfficientNet's,
// each + bias + Relu, then a 16-channel 3x3 Conv) and shared_stem_model (two
// convolutions on one image) in float16 against the ref target in float32,
// padded to 8 and to 4 channels and unpadded (KILN_CUDA_STEM_PAD_C=0).
//
// Tolerance 3e-2 (gpu_compare.h's form), as test_cuda_patch_conv_gpu.cpp
// derives it for sums of 192 products (here 147 and 144): the padding adds
// only exact zeros, so it needs no more.
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

void expect_stem_matches_ref(const ModelBuilder& b, const std::string& label, std::vector<int64_t> x_dims) {
  TempDir dir;
  const fs::path model = dir / (label + ".onnx");
  b.save(model);
  Tensor x(DType::f32, x_dims);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.29f * static_cast<float>(i) + 0.2f);
  const auto want = Session(model, uncached_options(Target::ref(), Precision::fp32)).run({{"x", x}});
  for (const char* pad : {"8", "4", "0"}) {
    setenv("KILN_CUDA_STEM_PAD_C", pad, 1);
    const auto got = Session(model, uncached_options(Target::cuda(), Precision::fp16)).run({{"x", x}});
    for (auto& [name, w] : want) {
      const std::string what = label + " " + name + " fp16 stem pad " + pad;
      ASSERT_TRUE(got.count(name)) << what;
      const double worst = expect_within(got.at(name), w, what, Tol{3e-2, 3e-2});
      std::printf("%-40s worst error / tolerance %.3f\n", what.c_str(), worst);
    }
  }
  unsetenv("KILN_CUDA_STEM_PAD_C");
}

TEST(CudaStemPadGpu, ResNetStemMatchesRef) { expect_stem_matches_ref(rgb_stem_model(3, 7, 2), "stem7x7s2", {3, 3, 32, 32}); }

TEST(CudaStemPadGpu, MobileNetStemMatchesRef) { expect_stem_matches_ref(rgb_stem_model(3, 3, 2), "stem3x3s2", {3, 3, 32, 32}); }

TEST(CudaStemPadGpu, SharedImageMatchesRef) { expect_stem_matches_ref(shared_stem_model(2), "shared", {2, 3, 16, 16}); }

// The Pad gather itself beyond the stem: zeros before and after the input on
// one axis (channels, then the last axis), one Pad read by a Relu (a member
// of its element-wise chain) and one alone, float32 (exact: no arithmetic).
TEST(CudaStemPadGpu, OneAxisPadGathersMatchRef) {
  TempDir dir;
  one_axis_pad_model().save(dir / "pad.onnx");
  Tensor x(DType::f32, {2, 5, 3, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::cos(0.41f * static_cast<float>(i) + 0.3f);
  const auto want = Session(dir / "pad.onnx", uncached_options(Target::ref(), Precision::fp32)).run({{"x", x}});
  const auto got = Session(dir / "pad.onnx", uncached_options(Target::cuda(), Precision::fp32)).run({{"x", x}});
  for (auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const double worst = expect_within(got.at(name), w, name + " one-axis Pad", Tol{1e-6, 1e-6});
    std::printf("%-40s worst error / tolerance %.3f\n", (name + " one-axis Pad").c_str(), worst);
  }
}

}  // namespace
}  // namespace kiln::testing

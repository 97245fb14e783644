// InstanceNormalization on the cpu target (oneDNN layer normalisation over
// [N*C, spatial], then the per-channel affine): a case by hand, torch's
// GroupNorm export form and a per-channel scale / bias against ref.
#include <gtest/gtest.h>

#include <cmath>

#include "../passes/graph_pass_util.h"
#include "cpu_test_util.h"

namespace kiln::testing {
namespace {

/// y = InstanceNormalization(x [shape], scale s, B t), epsilon 1e-5.
ModelBuilder instance_norm(const std::vector<int64_t>& shape, const std::vector<float>& s, const std::vector<float>& t) {
  ModelBuilder b;
  b.input("x", 1, shape);
  b.initializer("s", {shape[1]}, s);
  b.initializer("t", {shape[1]}, t);
  attr_float(b.node("InstanceNormalization", {"x", "s", "t"}, {"y"}), "epsilon", 1e-5f);
  b.output("y");
  return b;
}

Tensor wave(const std::vector<int64_t>& shape, float f, float a) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = a * std::sin(f * static_cast<float>(i) + 0.3f) + 0.5f;
  return t;
}

void expect_cpu_matches_ref(const ModelBuilder& b, const Tensor& x) {
  const Tensor want = run_on(b, Target::ref(), {{"x", x}}).at("y");
  const Tensor got = run_on(b, Target::cpu(), {{"x", x}}).at("y");
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 + 1e-4 * std::fabs(want.data<float>()[i])) << i;
}

TEST(CpuInstanceNorm, ByHand) {
  // One instance, two channels of [1, 3] and [2, 2]: channel 0 has mean 2 and
  // variance 1 -> (x - 2) / sqrt(1 + 1e-5) * 2 + 1 = -0.99999, 2.99999 (scale 2,
  // B 1); channel 1 is constant -> 0 * 0.5 - 1 = -1.
  ModelBuilder b = instance_norm({1, 2, 2}, {2.f, 0.5f}, {1.f, -1.f});
  EXPECT_EQ(cpu_nodes(b, "LayerNorm"), 1);
  EXPECT_EQ(cpu_nodes(b, "Binary"), 1);
  Tensor x(DType::f32, {1, 2, 2});
  const float xs[] = {1.f, 3.f, 2.f, 2.f};
  std::copy(xs, xs + 4, x.data<float>());
  const Tensor y = run_on(b, Target::cpu(), {{"x", x}}).at("y");
  const float inv = 1.f / std::sqrt(1.f + 1e-5f);
  const float want[] = {-2.f * inv + 1.f, 2.f * inv + 1.f, -1.f, -1.f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y.data<float>()[i], want[i], 1e-5) << i;
}

TEST(CpuInstanceNorm, GroupNormExportIsOneLayerNorm) {
  // torch's GroupNorm(8 groups) export: x [2, 16, 5, 6] viewed as [2, 8, 60],
  // InstanceNormalization with ones and zeros, then the real affine.
  ModelBuilder b;
  b.input("x", 1, {2, 16, 5, 6});
  b.initializer_i64("grouped", {3}, {2, 8, -1});
  b.initializer_i64("back", {4}, {2, 16, 5, 6});
  b.initializer("ones", {8}, std::vector<float>(8, 1.f));
  b.initializer("zeros", {8}, std::vector<float>(8, 0.f));
  b.node("Reshape", {"x", "grouped"}, {"g"});
  attr_float(b.node("InstanceNormalization", {"g", "ones", "zeros"}, {"n"}), "epsilon", 1e-5f);
  b.node("Reshape", {"n", "back"}, {"y"});
  b.output("y");
  EXPECT_EQ(cpu_nodes(b, "LayerNorm"), 1);
  EXPECT_EQ(cpu_nodes(b, "Binary"), 0);
  expect_cpu_matches_ref(b, wave({2, 16, 5, 6}, 0.37f, 2.f));
}

TEST(CpuInstanceNorm, PerChannelAffineAgainstRef) {
  std::vector<float> s, t;
  for (int c = 0; c < 24; ++c) {
    s.push_back(0.5f + 0.1f * static_cast<float>(c));
    t.push_back(0.2f * static_cast<float>(c) - 1.f);
  }
  expect_cpu_matches_ref(instance_norm({2, 24, 7, 9}, s, t), wave({2, 24, 7, 9}, 0.61f, 3.f));
  expect_cpu_matches_ref(instance_norm({1, 24, 4, 3, 5}, s, t), wave({1, 24, 4, 3, 5}, 0.23f, 1.f));  // 3-D
}

// T5's RMSNorm as exported: x * 1 / sqrt(mean(Pow(x, 2)) + eps) * w. The
// square runs on oneDNN (eltwise square: x * x correctly rounded, checked
// bit for bit; the reference's powf within an ulp of it); another exponent
// stays on the reference kernel.
TEST(CpuRmsNorm, PowTwoIsTheCorrectlyRoundedSquare) {
  for (float exponent : {2.f, 3.f}) {
    ModelBuilder b;
    b.input("x", 1, {2, 16, 512});  // 16K elements: at the size oneDNN takes element-wise work
    b.initializer("e", {}, {exponent});
    b.node("Pow", {"x", "e"}, {"y"});
    b.output("y");
    EXPECT_EQ(cpu_nodes(b, "Eltwise"), exponent == 2.f ? 1 : 0) << exponent;
    const Tensor x = wave({2, 16, 512}, 0.37f, 3.f);
    const Tensor want = run_on(b, Target::ref(), {{"x", x}}).at("y");
    const Tensor got = run_on(b, Target::cpu(), {{"x", x}}).at("y");
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double v = x.data<float>()[i];
      const float r = want.data<float>()[i], c = got.data<float>()[i];
      if (exponent == 2.f) ASSERT_EQ(c, static_cast<float>(v * v)) << "[" << i << "]";  // the product is exact in double
      else ASSERT_EQ(c, r) << "[" << i << "]";  // the same reference kernel
      ASSERT_LE(std::fabs(c - r), std::fabs(r) * 0x1p-23f) << exponent << " [" << i << "]";
    }
  }
}

}  // namespace
}  // namespace kiln::testing

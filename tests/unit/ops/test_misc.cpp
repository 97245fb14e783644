// LRN, Shrink, Det and MeanVarianceNormalization reference kernels.
// Expected values: onnx 1.17's ReferenceEvaluator run offline on the same
// inputs (Shrink, Det, MeanVarianceNormalization), onnxruntime 1.20.1 for
// LRN with an odd size (onnx's reference LRN only fills channel 0 when N = 1),
// and hand arithmetic for the even-size LRN case (shown in its comment).
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 2e-5f) {
  testing::expect_tensor_near(t, shape, want, tol);
}

/// arange(8) - 3 as [1, 4, 1, 2]: channel c holds (2c - 3, 2c - 2).
Tensor lrn_input() { return make<float>({1, 4, 1, 2}, {-3, -2, -1, 0, 1, 2, 3, 4}); }

TEST(LRN, OddSize) {
  auto y = run_op("LRN", {{"size", int64_t{3}}, {"alpha", 0.5f}, {"beta", 0.75f}, {"bias", 1.0f}}, {lrn_input()});
  expect_near(y[0], {1, 4, 1, 2}, {-1.437622f, -1.363463f, -0.457906f, 0, 0.457906f, 0.665907f, 1.437622f, 1.331813f});
}

TEST(LRN, EvenSizeWindowLeansForward) {
  // size 2: channels c..c+1; alpha/size = 1, beta 1, bias 1: y = x / (1 + sum of squares).
  // c0: -3/(1+9+1), -2/(1+4+0); c1: -1/(1+1+1), 0; c2: 1/(1+1+9), 2/(1+4+16); c3: 3/(1+9), 4/(1+16).
  auto y = run_op("LRN", {{"size", int64_t{2}}, {"alpha", 2.0f}, {"beta", 1.0f}, {"bias", 1.0f}}, {lrn_input()});
  expect_near(y[0], {1, 4, 1, 2},
              {-3.f / 11, -2.f / 5, -1.f / 3, 0, 1.f / 11, 2.f / 21, 3.f / 10, 4.f / 17});
}

TEST(Shrink, FloatSoftShrink) {
  auto y = run_op("Shrink", {{"lambd", 1.5f}, {"bias", 0.5f}}, {make<float>({7}, {-3, -1.5f, -1, 0, 1, 1.5f, 2})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{-2.5f, 0, 0, 0, 0, 0, 1.5f}));
}

TEST(Shrink, IntegerInput) {
  auto y = run_op("Shrink", {{"lambd", 1.0f}, {"bias", 2.0f}}, {make<int32_t>({5}, {-3, -1, 0, 1, 4})});
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{-1, 0, 0, 0, 2}));
}

TEST(Det, BatchOf2x2) {
  auto y = run_op("Det", {}, {make<float>({2, 2, 2}, {1, 2, 3, 4, 2, 0, 0, 3})});
  expect_near(y[0], {2}, {-2, 6});
}

TEST(Det, NeedsPivoting3x3) {
  // The leading zero forces a row swap.
  auto y = run_op("Det", {}, {make<double>({3, 3}, {0, 2, 1, 1, 1, 1, 2, 0, 5})});
  ASSERT_EQ(y[0].shape(), Ints{});
  EXPECT_NEAR(y[0].data<double>()[0], -8.0, 1e-12);
}

TEST(Det, SingularIsZeroAndNonSquareIsAnError) {
  auto y = run_op("Det", {}, {make<float>({2, 2}, {1, 2, 2, 4})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0}));
  EXPECT_THROW(run_op("Det", {}, {make<float>({2, 3}, {1, 2, 3, 4, 5, 6})}), Error);
}

Tensor mvn_input() {
  return make<float>({2, 2, 2, 2}, {1, 2, 3, 4, 0, 0, 0, 1, 2, 2, 5, 1, 7, 3, 1, 1});
}

TEST(MeanVarianceNormalization, DefaultAxes) {
  auto y = run_op("MeanVarianceNormalization", {}, {mvn_input()});
  expect_near(y[0], {2, 2, 2, 2},
              {-1.133893f, -0.377964f, 0.377964f, 1.133893f, -0.72786f, -0.72786f, -0.72786f, -0.279946f,
               -0.377964f, -0.377964f, 1.889822f, -1.133893f, 2.407538f, 0.615882f, -0.279946f, -0.279946f});
}

TEST(MeanVarianceNormalization, ChannelAxisWithConstantGroup) {
  // Two groups have zero variance: the spec's 1e-9 keeps them at 0 (onnxruntime gives NaN there).
  auto y = run_op("MeanVarianceNormalization", {{"axes", Ints{1}}}, {mvn_input()});
  expect_near(y[0], {2, 2, 2, 2}, {1, 1, 1, 1, -1, -1, -1, -1, -1, -1, 1, 0, 1, 1, -1, 0});
}

}  // namespace
}  // namespace kiln

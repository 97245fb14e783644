// Loss reference kernels. Expected values come from onnx 1.17's reference
// implementation (onnx.reference.ops: _compute_negative_log_likelihood_loss,
// softmaxcrossentropy) run offline on the same inputs with numpy, and were
// checked by hand where the comment shows the arithmetic.
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 1e-5f) {
  testing::expect_tensor_near(t, shape, want, tol);
}

/// (arange(12) * 0.25 - 1) as [2, 3, 2].
Tensor ncd1() {
  Tensor t(DType::f32, {2, 3, 2});
  for (int64_t i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.25f - 1.0f;
  return t;
}

TEST(NegativeLogLikelihoodLoss, NoReduction) {
  auto y = run_op("NegativeLogLikelihoodLoss", {{"reduction", std::string("none")}},
                  {make<float>({2, 3}, {0.1f, -0.5f, 1.2f, 2.0f, 0.3f, -1.0f}), make<int64_t>({2}, {2, 0})});
  expect_near(y[0], {2}, {-1.2f, -2.0f});
}

TEST(NegativeLogLikelihoodLoss, WeightedMeanIgnoresIndex) {
  // Kept: (0,0) t=0: -(-1.0)*0.5 = 0.5 and (1,0) t=2: -(1.5)*1.5 = -2.25;
  // total weight 0.5 + 1.5 = 2, so the mean is -1.75 / 2.
  auto y = run_op("NegativeLogLikelihoodLoss", {{"reduction", std::string("mean")}, {"ignore_index", int64_t{1}}},
                  {ncd1(), make<int64_t>({2, 2}, {0, 1, 2, 1}), make<float>({3}, {0.5f, 2.0f, 1.5f})});
  expect_near(y[0], {}, {-0.875f});
}

TEST(NegativeLogLikelihoodLoss, WeightedSumInt32Target) {
  auto y = run_op("NegativeLogLikelihoodLoss", {{"reduction", std::string("sum")}},
                  {ncd1(), make<int32_t>({2, 2}, {0, 1, 2, 1}), make<float>({3}, {0.5f, 2.0f, 1.5f})});
  expect_near(y[0], {}, {-3.75f});
}

TEST(NegativeLogLikelihoodLoss, TargetOutOfRangeIsAnError) {
  try {
    run_op("NegativeLogLikelihoodLoss", {}, {make<float>({1, 2}, {0.f, 1.f}), make<int64_t>({1}, {2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_input);
    EXPECT_NE(std::string(e.what()).find("outside [0, 2)"), std::string::npos) << e.what();
  }
}

TEST(NegativeLogLikelihoodLoss, TargetShapeMustMatch) {
  EXPECT_THROW(run_op("NegativeLogLikelihoodLoss", {}, {ncd1(), make<int64_t>({2}, {0, 1})}), Error);
}

TEST(SoftmaxCrossEntropyLoss, SumWithLogProb) {
  auto y = run_op("SoftmaxCrossEntropyLoss", {{"reduction", std::string("sum")}},
                  {make<float>({2, 3}, {1.0f, 2.0f, 0.5f, 0.0f, -1.0f, 3.0f}), make<int64_t>({2}, {1, 2})}, 2);
  expect_near(y[0], {}, {0.530253f});
  expect_near(y[1], {2, 3}, {-1.46437f, -0.464369f, -1.96437f, -3.06588f, -4.06588f, -0.0658839f});
}

TEST(SoftmaxCrossEntropyLoss, MeanWithIgnoreIndex) {
  // Only row 0 counts: -log_softmax([1, 2, 0.5])[1] = 0.464369.
  auto y = run_op("SoftmaxCrossEntropyLoss", {{"ignore_index", int64_t{2}}},
                  {make<float>({2, 3}, {1.0f, 2.0f, 0.5f, 0.0f, -1.0f, 3.0f}), make<int64_t>({2}, {1, 2})});
  expect_near(y[0], {}, {0.464369f});
}

TEST(SoftmaxCrossEntropyLoss, Float64NoReductionKeepsSpatialDims) {
  Tensor x(DType::f64, {1, 2, 2});
  const double v[] = {0.0, 1.0, 1.0, 1.0};  // columns: (0, 1) and (1, 1)
  for (int i = 0; i < 4; ++i) x.data<double>()[i] = v[i];
  auto y = run_op("SoftmaxCrossEntropyLoss", {{"reduction", std::string("none")}}, {x, make<int64_t>({1, 2}, {1, 0})});
  ASSERT_EQ(y[0].dtype(), DType::f64);
  ASSERT_EQ(y[0].shape(), (Ints{1, 2}));
  // Column 0: -log(e / (1 + e)) = log(1 + e^-1); column 1: log 2.
  EXPECT_NEAR(y[0].data<double>()[0], 0.31326168751822286, 1e-12);
  EXPECT_NEAR(y[0].data<double>()[1], 0.69314718055994531, 1e-12);
}

}  // namespace
}  // namespace kiln

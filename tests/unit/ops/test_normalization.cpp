// Normalization reference kernels. Expected values come from one-node models
// run offline through onnx.reference.ReferenceEvaluator (onnx 1.17) and
// onnxruntime 1.20.1 (they agree unless a test says otherwise), printed to 6
// significant digits.
#include <cmath>

#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

/// (arange(n) % mod - shift) * mul as float32.
Tensor pattern(Ints shape, int mod, float shift, float mul) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (static_cast<float>(i % mod) - shift) * mul;
  return t;
}

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 2e-4f) {
  testing::expect_tensor_near(t, shape, want, tol);
}

TEST(BatchNormalization, Inference) {
  auto y = run_op("BatchNormalization", {{"epsilon", 1e-5f}},
                  {pattern({2, 3, 2, 2}, 7, 3, 0.5f), make<float>({3}, {1, 2, 0.5}), make<float>({3}, {0, 1, -1}),
                   make<float>({3}, {0.5, -1, 0}), make<float>({3}, {1, 4, 0.25})});
  expect_near(y[0], {2, 3, 2, 2},
              {-1.99999f, -1.49999f, -0.999995f, -0.499997f, 2.5f,     3,         3.5f,      0.500001f,
               -1.99998f, -1.49999f, -1,         -0.50001f,  0.499997f, 0.999995f, -1.99999f, -1.49999f,
               1.5f,      2,         2.5f,       3,          0.49997f,  -2.49997f, -1.99998f, -1.49999f});
}

TEST(BatchNormalization, TrainingModeIsRejected) {
  auto train = [] {
    run_op("BatchNormalization", {{"training_mode", int64_t{1}}},
           {pattern({1, 1, 2}, 3, 0, 1), make<float>({1}, {1}), make<float>({1}, {0}), make<float>({1}, {0}),
            make<float>({1}, {1})});
  };
  try {
    train();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("training_mode"), std::string::npos) << e.what();
  }
}

TEST(InstanceNormalization, PerSampleChannel) {
  auto y = run_op("InstanceNormalization", {{"epsilon", 1e-5f}},
                  {pattern({2, 3, 2, 2}, 7, 3, 0.5f), make<float>({3}, {1, 2, 0.5}), make<float>({3}, {0, 1, -1})});
  expect_near(y[0], {2, 3, 2, 2},
              {-1.34162f, -0.447206f, 0.447206f, 1.34162f,  1.21953f,  2.09764f,  2.97575f, -2.29292f,
               -1.67081f, -1.2236f,   -0.776397f, -0.32919f, 0.784462f, 1.17669f, -1.17669f, -0.784462f,
               -1.68324f, 0.105587f,  1.89441f,  3.68324f,  -0.176771f, -1.49394f, -1.27441f, -1.05488f});
}

TEST(LayerNormalization, LastAxisWithMeanAndInvStdDev) {
  auto y = run_op("LayerNormalization", {},
                  {pattern({2, 3, 4}, 5, 2, 0.7f), make<float>({4}, {1, 2, 0.5, -1}), make<float>({4}, {0, 1, -1, 0.5})},
                  3);
  expect_near(y[0], {2, 3, 4},
              {-1.34163f, 0.10558f,  -0.776395f, -0.84163f, 1.52127f,  -1.36642f, -1.25355f,  0.33097f,
               0.632453f, 3.52981f,  -1.63245f,  1.13245f,  -0.16903f, 2.01418f,  -0.408395f, 2.02127f,
               -1.34163f, 0.10558f,  -0.776395f, -0.84163f, -1.34163f, 0.10558f,  -0.776395f, -0.84163f});
  expect_near(y[1], {2, 3, 1}, {-0.35f, -0.175f, 0, 0.175f, 0.35f, -0.35f});
  expect_near(y[2], {2, 3, 1}, {1.27774f, 0.965886f, 0.903504f, 0.965886f, 1.27774f, 1.27774f});
}

TEST(LayerNormalization, Axis1NoBias) {
  Tensor scale(DType::f32, {3, 4});
  for (int i = 0; i < 12; ++i) scale.data<float>()[i] = 0.1f * static_cast<float>(i);
  auto y = run_op("LayerNormalization", {{"axis", int64_t{1}}, {"epsilon", 1e-3f}},
                  {pattern({2, 3, 4}, 5, 2, 0.7f), scale}, 3);
  expect_near(y[0], {2, 3, 4},
              {0,         -0.0527323f, 0.0351549f, 0.263662f,  0.632788f, -0.61521f,  -0.316394f, 0.123042f,
               0.703098f, 1.42377f,    -1.23042f,  -0.580056f, 0,         0.0693908f, 0.29018f,   -0.473119f,
               -0.328029f, -0.0315413f, 0.416345f, 1.01563f,   -1.26165f, -0.738066f, -0.0630825f, 0.763299f});
  expect_near(y[1], {2, 1, 1}, {-0.175f, 0.0583333f});
  expect_near(y[2], {2, 1, 1}, {1.00443f, 1.08141f});
}

TEST(LayerNormalization, BroadcastScaleAndBias) {
  // Scale [3,1] and B [4] broadcast to the normalized shape [3,4] as the spec
  // allows; values from the ONNX reference (onnxruntime requires exact sizes).
  auto y = run_op("LayerNormalization", {{"axis", int64_t{-2}}},
                  {pattern({2, 3, 4}, 5, 2, 0.7f), make<float>({3, 1}, {1, 2, 3}), make<float>({4}, {0.5, 0, 0, -0.5})});
  expect_near(y[0], {2, 3, 4},
              {-0.731036f, -0.527587f, 0.175862f, 0.379311f, 3.66552f,  -2.46207f, -1.05517f,  -0.148276f,
               3.13793f,   4.74828f,   -3.69311f, -2.08276f, 0.436881f, 0.69431f,  1.45174f,   -2.07798f,
               -1.1411f,   -0.126238f, 1.38862f,  2.40348f,  -4.23393f, -2.46164f, -0.189357f, 1.58293f});
}

TEST(GroupNormalization, Opset21PerChannelAndOpset18PerGroup) {
  auto y = run_op("GroupNormalization", {{"num_groups", int64_t{2}}},
                  {pattern({1, 4, 3}, 5, 1, 0.5f), make<float>({4}, {1, 2, 3, 4}), make<float>({4}, {0, 0, 1, 1})});
  expect_near(y[0], {1, 4, 3},
              {-1.11802f, -0.44721f, 0.223605f, 1.78884f, 3.13047f, -2.23605f, -0.8605f, 1.3721f, 3.6047f, 7.44974f,
               -4.45747f, -1.48067f});
  y = run_op("GroupNormalization", {{"num_groups", int64_t{2}}},
             {pattern({1, 4, 3}, 5, 1, 0.5f), make<float>({2}, {2, -1}), make<float>({2}, {1, 0.5})}, 1, 18);
  expect_near(y[0], {1, 4, 3},
              {-1.23605f, 0.105581f, 1.44721f, 2.78884f, 4.13047f, -1.23605f, 1.12017f, 0.375967f, -0.368234f,
               -1.11243f, 1.86437f, 1.12017f});
}

TEST(LpNormalization, P2AndP1) {
  // Zero rows give zeros as in onnxruntime (the ONNX reference gives NaN).
  auto y = run_op("LpNormalization", {{"p", int64_t{2}}, {"axis", int64_t{1}}},
                  {make<float>({2, 3}, {0, 0, 0, 3, 4, 0})});
  expect_near(y[0], {2, 3}, {0, 0, 0, 0.6f, 0.8f, 0});
  // p=1 along axis 0: onnxruntime values (the ONNX reference 1.17 sums x, not |x|).
  y = run_op("LpNormalization", {{"p", int64_t{1}}, {"axis", int64_t{0}}},
             {make<float>({3, 2}, {1, -3, 3, 4, 0, 1})});
  expect_near(y[0], {3, 2}, {0.25f, -0.375f, 0.75f, 0.5f, 0, 0.125f});
}

TEST(Normalization, DoubleInputAndUnsupportedDtype) {
  auto y = run_op("LpNormalization", {}, {make<double>({2}, {3, 4})});
  EXPECT_EQ(values<double>(y[0]), (std::vector<double>{0.6, 0.8}));
  Tensor h(DType::f16, {1, 2});
  try {
    run_op("LayerNormalization", {}, {h, make<float>({2}, {1, 1})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("LayerNormalization node 'test_LayerNormalization'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln

// GridSample and AffineGrid reference kernels. Expected values come from
// onnx 1.17's ReferenceEvaluator run offline on one-node models with the same
// inputs (rounded to 6 decimals). The linear and nearest cases also agree
// with torch.nn.functional.grid_sample (torch 1.13); bicubic with border
// padding differs from torch in the 3rd decimal, and the spec's reference
// is what kiln follows.
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

/// X = arange(6) as [1, 1, 2, 3]; three grid points: a corner, an inner
/// point, and one beyond the right edge.
Tensor x23() { return make<float>({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5}); }
Tensor grid3() { return make<float>({1, 1, 3, 2}, {-1, -1, 0.2f, 0.5f, 1.3f, -0.4f}); }

std::vector<float> sample(const std::string& mode, const std::string& pad, int64_t align) {
  auto y = run_op("GridSample", {{"mode", mode}, {"padding_mode", pad}, {"align_corners", align}}, {x23(), grid3()});
  EXPECT_EQ(y[0].shape(), (Ints{1, 1, 1, 3}));
  return values<float>(y[0]);
}

void expect_values(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5f) << i;
}

TEST(GridSample, LinearPaddingModes) {
  // Point 2 (x = 1.3, unaligned -> position 2.45): zeros fades towards 0,
  // border and reflection both read the last column.
  expect_values(sample("linear", "zeros", 0), {0.0f, 4.3f, 0.115f});
  expect_values(sample("linear", "border", 0), {0.0f, 4.3f, 2.3f});
  expect_values(sample("linear", "reflection", 0), {0.0f, 4.3f, 2.3f});
  expect_values(sample("linear", "zeros", 1), {0.0f, 3.45f, 2.03f});
  expect_values(sample("linear", "border", 1), {0.0f, 3.45f, 2.9f});
  expect_values(sample("linear", "reflection", 1), {0.0f, 3.45f, 2.6f});
}

TEST(GridSample, Nearest) {
  expect_values(sample("nearest", "zeros", 0), {0, 4, 0});
  expect_values(sample("nearest", "zeros", 1), {0, 4, 2});
  expect_values(sample("nearest", "border", 0), {0, 4, 2});
  expect_values(sample("nearest", "reflection", 1), {0, 4, 2});
}

TEST(GridSample, Cubic) {
  expect_values(sample("cubic", "zeros", 0), {-0.1875f, 4.6255f, 0.096301f});
  expect_values(sample("cubic", "zeros", 1), {0.0f, 4.205626f, 2.502408f});
  expect_values(sample("cubic", "border", 0), {-0.375f, 4.38925f, 2.246f});
  expect_values(sample("cubic", "border", 1), {0.0f, 3.592313f, 2.837f});
  expect_values(sample("cubic", "reflection", 0), {-0.75f, 4.38925f, 2.281625f});
  expect_values(sample("cubic", "reflection", 1), {0.0f, 3.82725f, 2.5265f});
}

TEST(GridSample, Volumetric) {
  Tensor x(DType::f32, {1, 1, 2, 2, 2});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto y = run_op("GridSample", {}, {x, make<float>({1, 1, 1, 2, 3}, {0.1f, -0.3f, 0.6f, -1.2f, 0.9f, 0.0f})});
  expect_near(y[0], {1, 1, 1, 1, 2}, {4.5f, 0.72f});
}

TEST(GridSample, GridMustMatchSpatialRank) {
  EXPECT_THROW(run_op("GridSample", {}, {x23(), make<float>({1, 1, 1, 3}, {0, 0, 0})}), Error);
}

TEST(AffineGrid, TwoDimensional) {
  auto y = run_op("AffineGrid", {{"align_corners", int64_t{0}}},
                  {make<float>({1, 2, 3}, {1.0f, 0.5f, 0.1f, -0.2f, 0.8f, 0.3f}), make<int64_t>({4}, {1, 1, 2, 3})});
  expect_near(y[0], {1, 2, 3, 2},
              {-0.816667f, 0.033333f, -0.15f, -0.1f, 0.516667f, -0.233333f, -0.316667f, 0.833333f, 0.35f, 0.7f,
               1.016667f, 0.566667f});
}

TEST(AffineGrid, ThreeDimensionalAlignedWithUnitDim) {
  // The size-1 dim (H) sits at -1 when corners are aligned.
  auto y = run_op("AffineGrid", {{"align_corners", int64_t{1}}},
                  {make<float>({1, 3, 4}, {1, 0, 0.5f, 0.1f, 0, 1, 0, 0, 0.2f, 0, 1, -0.1f}),
                   make<int64_t>({5}, {1, 2, 2, 1, 2})});
  expect_near(y[0], {1, 2, 1, 2, 3}, {-1.4f, -1, -1.3f, 0.6f, -1, -0.9f, -0.4f, -1, 0.7f, 1.6f, -1, 1.1f});
}

TEST(AffineGrid, ThetaShapeMustMatchSize) {
  EXPECT_THROW(run_op("AffineGrid", {}, {make<float>({1, 2, 3}, {1, 0, 0, 0, 1, 0}), make<int64_t>({5}, {1, 1, 2, 2, 2})}),
               Error);
}

}  // namespace
}  // namespace kiln

// DeformConv reference kernel. Expected values come from onnx 1.17's
// ReferenceEvaluator (which samples through GridSample, linear, zeros
// padding, align_corners=1) run offline on the same inputs, rounded to 6
// decimals. Offsets and masks are patterns so that the C++ side can rebuild
// them: offset = (arange % 7 - 3) * 0.15, mask = (arange % 3) * 0.5.
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using Ints = std::vector<int64_t>;

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 3e-5f) {
  testing::expect_tensor_near(t, shape, want, tol);
}

/// (arange(n) % mod - shift) * mul as float32.
Tensor pattern(Ints shape, int mod, float shift, float mul) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (static_cast<float>(i % mod) - shift) * mul;
  return t;
}

Tensor x() { return pattern({1, 2, 3, 3}, 1000, 0, 0.5f); }
Tensor w() {
  return make<float>({2, 2, 2, 2}, {1, 0.5f, -1, 2, 0.25f, 1, 1, -0.5f, 2, 0, 0, 1, -1, 1, 0.5f, 0.5f});
}

TEST(DeformConv, FractionalOffsets) {
  auto y = run_op("DeformConv", {{"kernel_shape", Ints{2, 2}}}, {x(), w(), pattern({1, 8, 2, 2}, 7, 3, 0.15f)});
  expect_near(y[0], {1, 2, 2, 2}, {9.415313f, 10.273748f, 14.86125f, 16.918751f, 9.08375f, 9.126249f, 10.6775f, 11.661251f});
}

TEST(DeformConv, BiasAndMask) {
  auto y = run_op("DeformConv", {{"kernel_shape", Ints{2, 2}}},
                  {x(), w(), pattern({1, 8, 2, 2}, 7, 3, 0.15f), make<float>({2}, {0.5f, -1}),
                   pattern({1, 4, 2, 2}, 3, 0, 0.5f)});
  expect_near(y[0], {1, 2, 2, 2}, {6.916251f, 4.789374f, 6.86f, 7.831251f, 3.8025f, 3.28f, 2.286875f, 5.311251f});
}

TEST(DeformConv, GroupsOffsetGroupsAndPads) {
  // W[:, :1] of w(): one input channel per group.
  auto y = run_op("DeformConv",
                  {{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1, 0, 0}}, {"group", int64_t{2}},
                   {"offset_group", int64_t{2}}},
                  {x(), make<float>({2, 1, 2, 2}, {1, 0.5f, -1, 2, 2, 0, 0, 1}), pattern({1, 16, 3, 3}, 5, 2, 0.3f)});
  expect_near(y[0], {1, 2, 3, 3},
              {2.1f, 0.835f, 0.03f, 1.38f, 5.224999f, 4.555f, 6.075f, 5.15f, 9.565f, 1.26f, 7.55f, 12.13f, 9.21f,
               8.42f, 15.949999f, 5.25f, 19.700001f, 14.180002f});
}

TEST(DeformConv, OffsetShapeMustMatch) {
  EXPECT_THROW(run_op("DeformConv", {{"kernel_shape", Ints{2, 2}}}, {x(), w(), pattern({1, 4, 2, 2}, 7, 3, 0.15f)}),
               Error);
}

}  // namespace
}  // namespace kiln

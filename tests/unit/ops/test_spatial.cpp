// Col2Im, CenterCropPad and MaxUnpool reference kernels. Expected values come
// from onnx 1.17's ReferenceEvaluator run offline on the same inputs; the
// first Col2Im case also matches torch.nn.functional.fold (torch 1.13), and
// the dilated case is worked out in its comment.
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

Tensor arange_f32(Ints shape, float start = 0) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

TEST(Col2Im, OverlappingBlocksAreSummed) {
  auto y = run_op("Col2Im", {}, {arange_f32({1, 4, 6}), make<int64_t>({2}, {3, 4}), make<int64_t>({2}, {2, 2})});
  EXPECT_EQ(y[0].shape(), (Ints{1, 1, 3, 4}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 7, 9, 8, 15, 44, 48, 31, 15, 37, 39, 23}));
}

TEST(Col2Im, StridesAndPads) {
  auto y = run_op("Col2Im", {{"strides", Ints{1, 2}}, {"pads", Ints{0, 0, 0, 1}}},
                  {arange_f32({1, 2, 4}, 1), make<int64_t>({2}, {2, 4}), make<int64_t>({2}, {1, 2})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 5, 2, 6, 3, 7, 4, 8}));
}

TEST(Col2Im, Dilations) {
  // Tap 0 of block (r, c) lands on (r, c), tap 1 on (r, c + 2).
  auto y = run_op("Col2Im", {{"dilations", Ints{1, 2}}},
                  {arange_f32({1, 2, 4}, 1), make<int64_t>({2}, {2, 4}), make<int64_t>({2}, {1, 2})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 2, 5, 6, 3, 4, 7, 8}));
}

TEST(Col2Im, BlockCountMismatchIsAnError) {
  EXPECT_THROW(run_op("Col2Im", {}, {arange_f32({1, 4, 5}), make<int64_t>({2}, {3, 4}), make<int64_t>({2}, {2, 2})}),
               Error);
}

Tensor crop_input() {
  Tensor t(DType::i32, {2, 5, 3});
  for (int i = 0; i < 30; ++i) t.data<int32_t>()[i] = i;
  return t;
}

TEST(CenterCropPad, CropAndPadAllAxes) {
  auto y = run_op("CenterCropPad", {}, {crop_input(), make<int64_t>({3}, {4, 2, 6})});
  EXPECT_EQ(y[0].shape(), (Ints{4, 2, 6}));
  EXPECT_EQ(values<int32_t>(y[0]),
            (std::vector<int32_t>{0, 0, 0, 0, 0, 0,  0, 0, 0, 0,  0,  0, 0, 3, 4, 5, 0, 0, 0, 6, 7, 8, 0, 0,
                                  0, 18, 19, 20, 0, 0, 0, 21, 22, 23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(CenterCropPad, NegativeAxis) {
  auto y = run_op("CenterCropPad", {{"axes", Ints{-2}}}, {crop_input(), make<int64_t>({1}, {2})});
  EXPECT_EQ(y[0].shape(), (Ints{2, 2, 3}));
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 18, 19, 20, 21, 22, 23}));
}

Tensor pooled() { return make<float>({1, 1, 2, 2}, {5, 6, 7, 8}); }
Tensor pool_indices() { return make<int64_t>({1, 1, 2, 2}, {5, 7, 13, 15}); }

TEST(MaxUnpool, InferredShape) {
  auto y = run_op("MaxUnpool", {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}, {pooled(), pool_indices()});
  EXPECT_EQ(y[0].shape(), (Ints{1, 1, 4, 4}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8}));
}

TEST(MaxUnpool, LargerOutputShapePadsTheCorner) {
  auto y = run_op("MaxUnpool", {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}},
                  {pooled(), pool_indices(), make<int64_t>({4}, {1, 1, 5, 5})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0,
                                                     0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0}));
}

TEST(MaxUnpool, OneDimensionalWithPads) {
  auto y = run_op("MaxUnpool", {{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 0}}},
                  {make<float>({1, 1, 3}, {1, 2, 3}), make<int64_t>({1, 1, 3}, {1, 2, 4})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 1, 2, 0, 3, 0}));
}

TEST(MaxUnpool, IndexOutOfRangeIsAnError) {
  EXPECT_THROW(run_op("MaxUnpool", {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}},
                      {pooled(), make<int64_t>({1, 1, 2, 2}, {5, 7, 13, 16})}),
               Error);
}

}  // namespace
}  // namespace kiln

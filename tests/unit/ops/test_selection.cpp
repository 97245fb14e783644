// Compress, Unique and ReverseSequence reference kernels. Expected values come
// from onnx 1.17's ReferenceEvaluator run offline on the same inputs; the
// ReverseSequence batch-major case was worked out by hand (the comment shows
// it).
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

Tensor arange_f32(Ints shape) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(Compress, AlongAxis) {
  auto y = run_op("Compress", {{"axis", int64_t{1}}}, {arange_f32({3, 4}), make<bool>({3}, {true, false, true})});
  EXPECT_EQ(y[0].shape(), (Ints{3, 2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 2, 4, 6, 8, 10}));
}

TEST(Compress, FlattenedWithoutAxis) {
  auto y = run_op("Compress", {}, {arange_f32({3, 4}), make<bool>({5}, {false, true, false, false, true})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 4}));
}

TEST(Compress, NegativeAxisAndNothingSelected) {
  auto y = run_op("Compress", {{"axis", int64_t{-2}}}, {arange_f32({3, 2}), make<bool>({3}, {false, false, false})});
  EXPECT_EQ(y[0].shape(), (Ints{0, 2}));
}

TEST(Compress, TrueBeyondTheAxisIsAnError) {
  EXPECT_THROW(run_op("Compress", {{"axis", int64_t{0}}}, {arange_f32({2, 2}), make<bool>({3}, {true, false, true})}),
               Error);
}

TEST(Unique, SortedFlat) {
  auto y = run_op("Unique", {}, {make<float>({6}, {2, 1, 1, 3, 4, 3})}, 4);
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[1]), (Ints{1, 0, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[2]), (Ints{1, 0, 0, 2, 3, 2}));
  EXPECT_EQ(values<int64_t>(y[3]), (Ints{2, 1, 2, 1}));
}

TEST(Unique, UnsortedFlat) {
  auto y = run_op("Unique", {{"sorted", int64_t{0}}}, {make<float>({6}, {2, 1, 1, 3, 4, 3})}, 4);
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{2, 1, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[1]), (Ints{0, 1, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[2]), (Ints{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(values<int64_t>(y[3]), (Ints{1, 2, 2, 1}));
}

TEST(Unique, SortedRows) {
  Tensor x = make<int64_t>({4, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4, 0, 1, 1});
  auto y = run_op("Unique", {{"axis", int64_t{0}}}, {x}, 4);
  EXPECT_EQ(y[0].shape(), (Ints{3, 3}));
  EXPECT_EQ(values<int64_t>(y[0]), (Ints{0, 1, 1, 1, 0, 0, 2, 3, 4}));
  EXPECT_EQ(values<int64_t>(y[1]), (Ints{3, 0, 2}));
  EXPECT_EQ(values<int64_t>(y[2]), (Ints{1, 1, 2, 0}));
  EXPECT_EQ(values<int64_t>(y[3]), (Ints{1, 2, 1}));
}

TEST(Unique, UnsortedColumnsWithRepeats) {
  // Columns of [[1, 2, 1], [5, 0, 5]]: column 2 repeats column 0.
  auto y = run_op("Unique", {{"axis", int64_t{-1}}, {"sorted", int64_t{0}}}, {make<int32_t>({2, 3}, {1, 2, 1, 5, 0, 5})},
                  4);
  EXPECT_EQ(y[0].shape(), (Ints{2, 2}));
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{1, 2, 5, 0}));
  EXPECT_EQ(values<int64_t>(y[1]), (Ints{0, 1}));
  EXPECT_EQ(values<int64_t>(y[2]), (Ints{0, 1, 0}));
  EXPECT_EQ(values<int64_t>(y[3]), (Ints{2, 1}));
}

TEST(ReverseSequence, TimeMajor) {
  auto y = run_op("ReverseSequence", {{"time_axis", int64_t{0}}, {"batch_axis", int64_t{1}}},
                  {arange_f32({4, 3}), make<int64_t>({3}, {4, 2, 1})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{9, 4, 2, 6, 1, 5, 3, 7, 8, 0, 10, 11}));
}

TEST(ReverseSequence, BatchMajor) {
  // [[0, 1, 2, 3], [4, 5, 6, 7]] with lengths 3 and 1: [[2, 1, 0, 3], [4, 5, 6, 7]].
  auto y = run_op("ReverseSequence", {{"time_axis", int64_t{1}}, {"batch_axis", int64_t{0}}},
                  {make<int32_t>({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}), make<int64_t>({2}, {3, 1})});
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{2, 1, 0, 3, 4, 5, 6, 7}));
}

TEST(ReverseSequence, LengthBeyondTimeIsAnError) {
  EXPECT_THROW(run_op("ReverseSequence", {}, {arange_f32({2, 2}), make<int64_t>({2}, {3, 1})}), Error);
}

}  // namespace
}  // namespace kiln

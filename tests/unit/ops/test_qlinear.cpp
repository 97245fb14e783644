// Tests for src/ops/qlinear.cpp (MatMulInteger, QLinearMatMul, ConvInteger,
// QLinearConv). Expected values: MatMulInteger and ConvInteger with numpy
// 1.24 int32 arithmetic ((A - azp) @ (B - bzp), explicit convolution loops);
// QLinearMatMul and QLinearConv with onnxruntime 1.20.1 (CPU provider),
// which agrees with numpy's rint(acc * (sa * sb / sy)) + zy for these inputs.
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

TEST(MatMulInteger, PerRowAndPerColumnZeroPointsWithBatch) {
  // A int8 [2, 2, 2] with per-row zero points [1, -2]; B uint8 [2, 3] with per-column [100, 0, 9].
  auto out = run_op("MatMulInteger", {},
                    {make<int8_t>({2, 2, 2}, {1, 2, 3, 4, -5, 6, 7, -8}), make<uint8_t>({2, 3}, {200, 3, 9, 1, 250, 0}),
                     make<int8_t>({2}, {1, -2}), make<uint8_t>({3}, {100, 0, 9})},
                    1, 10);
  EXPECT_EQ(out[0].dtype(), DType::i32);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(values<int32_t>(out[0]),
            (std::vector<int32_t>{-99, 250, -9, -94, 1515, -54, -1095, 1232, -45, 1494, -1473, 54}));
}

TEST(MatMulInteger, NoZeroPointsAndVectorOperand) {
  // [1, 2, 3] . [[1, 0], [0, 1], [2, 2]] = [7, 8] (1-D A drops its row dim).
  auto out = run_op("MatMulInteger", {}, {make<uint8_t>({3}, {1, 2, 3}), make<uint8_t>({3, 2}, {1, 0, 0, 1, 2, 2})}, 1, 10);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{7, 8}));
}

TEST(QLinearMatMul, Uint8) {
  // acc = (A-3) @ (B-5) = [[-8, -240], [395, 1283]]; y = rint(acc * 0.02*0.1/0.05) + 20, clamped.
  auto out = run_op("QLinearMatMul", {},
                    {make<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 200}), make<float>({}, {0.02f}), make<uint8_t>({}, {3}),
                     make<uint8_t>({3, 2}, {10, 0, 3, 255, 7, 9}), make<float>({}, {0.1f}), make<uint8_t>({}, {5}),
                     make<float>({}, {0.05f}), make<uint8_t>({}, {20})});
  EXPECT_EQ(out[0].dtype(), DType::u8);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{20, 10, 36, 71}));
}

TEST(QLinearMatMul, Int8SaturatesPerColumnScale) {
  // acc = [[100, -100]]; per-column b scale [1, 0.5], y scale 0.5: 200 -> 127, -100 -> -100.
  auto out = run_op("QLinearMatMul", {},
                    {make<int8_t>({1, 1}, {10}), make<float>({}, {1}), make<int8_t>({}, {0}),
                     make<int8_t>({1, 2}, {10, -10}), make<float>({2}, {1, 0.5f}), make<int8_t>({2}, {0, 0}),
                     make<float>({}, {0.5f}), make<int8_t>({}, {0})});
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{127, -100}));
}

TEST(ConvInteger, PaddingReadsTheZeroPoint) {
  // x uint8 [1,1,2,2] = [[3, 5], [7, 9]], x_zero_point 3, w uint8 [1,1,2,2] all 1,
  // pads 1 on every side: each output sums the (x - 3) under a 2x2 window:
  // x - 3 = [[0, 2], [4, 6]] -> 3x3 output [[0, 2, 2], [4, 12, 8], [4, 10, 6]].
  auto out = run_op("ConvInteger", {{"pads", std::vector<int64_t>{1, 1, 1, 1}}},
                    {make<uint8_t>({1, 1, 2, 2}, {3, 5, 7, 9}), make<uint8_t>({1, 1, 2, 2}, {1, 1, 1, 1}),
                     make<uint8_t>({}, {3})},
                    1, 10);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{1, 1, 3, 3}));
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{0, 2, 2, 4, 12, 8, 4, 10, 6}));
}

TEST(ConvInteger, GroupsAndPerChannelWeightZeroPoint) {
  // Two groups of one channel, 1-D, kernel 2, stride 2; w zero points [1, -1].
  // ch0: x [1, 2, 3, 4], w - 1 = [1, 2]: [1*1 + 2*2, 3*1 + 4*2] = [5, 11];
  // ch1: x [5, 6, 7, 8], w + 1 = [0, 3]: [18, 24].
  auto out = run_op("ConvInteger", {{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2}}},
                    {make<int8_t>({1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), make<int8_t>({2, 1, 2}, {2, 3, -1, 2}),
                     Tensor(), make<int8_t>({2}, {1, -1})},
                    1, 10);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{5, 11, 18, 24}));
}

TEST(QLinearConv, PerChannelScaleWithBias) {
  auto out = run_op("QLinearConv", {{"pads", std::vector<int64_t>{1, 0, 0, 1}}},
                    {make<uint8_t>({1, 1, 3, 3}, {10, 20, 30, 40, 50, 60, 70, 80, 90}), make<float>({}, {0.1f}),
                     make<uint8_t>({}, {5}), make<int8_t>({2, 1, 2, 2}, {1, -2, 3, 4, -5, 6, 7, -8}),
                     make<float>({2}, {0.2f, 0.05f}), make<int8_t>({2}, {0, 0}), make<float>({}, {0.3f}),
                     make<uint8_t>({}, {100}), make<int32_t>({2}, {7, -300})},
                    1, 10);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{1, 2, 3, 3}));
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{105, 110, 105, 118, 122, 113, 130, 134, 121,  //
                                                           94, 93, 98, 94, 94, 99, 94, 94, 100}));
}

TEST(QLinearOps, RejectUnsupportedTypes) {
  // float inputs are not quantized data.
  EXPECT_THROW(run_op("MatMulInteger", {}, {make<float>({1, 1}, {1}), make<float>({1, 1}, {1})}, 1, 10), Error);
  // Mismatched inner dims.
  EXPECT_THROW(run_op("MatMulInteger", {}, {make<uint8_t>({1, 2}, {1, 1}), make<uint8_t>({3, 1}, {1, 1, 1})}, 1, 10),
               Error);
}

}  // namespace
}  // namespace kiln

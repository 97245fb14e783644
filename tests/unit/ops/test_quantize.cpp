// Tests for src/ops/quantize.cpp (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear). Integer expectations were produced offline with
// onnxruntime 1.20.1 (CPU provider, opset 21 / 11) on the inputs below and
// agree with the hand computation in the comments; the float8 and 4-bit
// cases are computed by hand from the format definitions (ONNX
// docs/Float8.md), as onnxruntime's Python API cannot return those types.
#include <cmath>

#include "kiln/errors.h"
#include "op_test_util.h"
#include "support/half.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

/// A tensor of an 8-bit-storage dtype (float8, int4, uint4) from raw bytes.
Tensor bytes(DType dt, std::vector<int64_t> shape, std::vector<uint8_t> v) {
  Tensor t(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data<uint8_t>()[i] = v[i];
  return t;
}

TEST(QuantizeLinear, PerTensorUint8RoundsHalfToEvenAndSaturates) {
  // x / 0.5 = 0, 5, 7, -2, 600, 2.5 -> round half even -> +10 -> clamp to [0, 255].
  auto out = run_op("QuantizeLinear", {},
                    {make<float>({6}, {0, 2.5f, 3.5f, -1, 300, 1.25f}), make<float>({}, {0.5f}),
                     make<uint8_t>({}, {10})});
  EXPECT_EQ(out[0].dtype(), DType::u8);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{10, 15, 17, 8, 255, 12}));
  // Without a zero point the output is uint8 with zero point 0.
  out = run_op("QuantizeLinear", {}, {make<float>({2}, {-3, 3}), make<float>({}, {1})});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0, 3}));
}

TEST(QuantizeLinear, PerAxisInt8) {
  auto out = run_op("QuantizeLinear", {{"axis", int64_t{1}}},
                    {make<float>({2, 3}, {1, -2, 3, -40, 50, -600}), make<float>({3}, {1, 2, 4}),
                     make<int8_t>({3}, {0, -1, 3})});
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{1, -2, 4, -40, 24, -128}));
}

TEST(QuantizeLinear, Blocked) {
  // Blocks of 2 along axis 1 (the last block holds one element).
  auto out = run_op("QuantizeLinear", {{"axis", int64_t{1}}, {"block_size", int64_t{2}}},
                    {make<float>({2, 5}, {1, 2, 3, 4, 5, -1, -2, -3, -4, -5}),
                     make<float>({2, 3}, {0.5f, 1, 2, 1, 0.25f, 4}), make<uint8_t>({2, 3}, {0, 1, 2, 3, 4, 5})});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{2, 4, 4, 5, 4, 2, 1, 0, 0, 4}));
  // A scale whose blocked dim does not match ceil(5 / 2) is rejected.
  EXPECT_THROW(run_op("QuantizeLinear", {{"axis", int64_t{1}}, {"block_size", int64_t{2}}},
                      {make<float>({2, 5}, std::vector<float>(10, 1.f)), make<float>({2, 2}, {1, 1, 1, 1})}),
               Error);
}

TEST(QuantizeLinear, Int4AndUint4) {
  // int4 via output_dtype: x / 2 = -9, -3.5, 0.25, 3.5, 100 -> round -> clamp [-8, 7].
  auto out = run_op("QuantizeLinear", {{"output_dtype", int64_t{22}}},
                    {make<float>({5}, {-18, -7, 0.5f, 7, 200}), make<float>({}, {2})});
  EXPECT_EQ(out[0].dtype(), DType::i4);
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{-8, -4, 0, 4, 7}));
  // uint4 through its zero point (3): x + 3 clamped to [0, 15].
  out = run_op("QuantizeLinear", {}, {make<float>({3}, {-5, 4, 20}), make<float>({}, {1}), bytes(DType::u4, {}, {3})});
  EXPECT_EQ(out[0].dtype(), DType::u4);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0, 7, 15}));
}

TEST(QuantizeLinear, Float8SaturateAndNot) {
  // float8e4m3fn: 0.1 -> 1.625 * 2^-4 (0x1D); 500 and inf -> 448 (0x7E) when
  // saturating, NaN (0x7F) otherwise; -1000 -> -448 (0xFE) / NaN (0xFF).
  Tensor x = make<float>({5}, {0.1f, 500, -1000, INFINITY, NAN});
  Tensor zp = bytes(DType::f8e4m3fn, {}, {0});
  auto out = run_op("QuantizeLinear", {}, {x, make<float>({}, {1}), zp});
  EXPECT_EQ(out[0].dtype(), DType::f8e4m3fn);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0x1D, 0x7E, 0xFE, 0x7E, 0x7F}));
  out = run_op("QuantizeLinear", {{"saturate", int64_t{0}}}, {x, make<float>({}, {1}), zp});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0x1D, 0x7F, 0xFF, 0x7F, 0x7F}));
  // float8e5m2 keeps infinities without saturation: 1e6 -> inf (0x7C).
  out = run_op("QuantizeLinear", {{"saturate", int64_t{0}}},
               {make<float>({2}, {1e6f, 3}), make<float>({}, {1}), bytes(DType::f8e5m2, {}, {0})});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0x7C, 0x42}));  // 3 = 1.5 * 2^1: exp 16, mantissa 10
}

TEST(DequantizeLinear, PerAxisInt8) {
  auto out = run_op("DequantizeLinear", {{"axis", int64_t{1}}},
                    {make<int8_t>({2, 3}, {1, -2, 3, -128, 127, 0}), make<float>({3}, {0.5f, 2, 0.25f}),
                     make<int8_t>({3}, {1, 0, -3})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, -4, 1.5f, -64.5f, 254, 0.75f}));
}

TEST(DequantizeLinear, BlockedUint4) {
  // (0-1)*0.5, (15-1)*0.5, (7-8)*2, (8-8)*2.
  auto out = run_op("DequantizeLinear", {{"axis", int64_t{1}}, {"block_size", int64_t{2}}},
                    {bytes(DType::u4, {1, 4}, {0, 15, 7, 8}), make<float>({1, 2}, {0.5f, 2}),
                     bytes(DType::u4, {1, 2}, {1, 8})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-0.5f, 7, -2, 0}));
}

TEST(DequantizeLinear, Float8ToFloat16Scale) {
  // e4m3fn 0x38 = 1, 0xC0 = -2, 0x7E = 448, 0x7F = NaN, 0x01 = 2^-9; times 2 in float16.
  Tensor scale(DType::f16, {});
  scale.data<uint16_t>()[0] = float_to_half(2.0f);
  auto out = run_op("DequantizeLinear", {}, {bytes(DType::f8e4m3fn, {5}, {0x38, 0xC0, 0x7E, 0x7F, 0x01}), scale});
  ASSERT_EQ(out[0].dtype(), DType::f16);
  const uint16_t* h = out[0].data<uint16_t>();
  EXPECT_EQ(h[0], 0x4000);  // 2
  EXPECT_EQ(h[1], 0xC400);  // -4
  EXPECT_EQ(h[2], 0x6300);  // 896
  EXPECT_TRUE(std::isnan(half_to_float(h[3])));
  EXPECT_EQ(h[4], 0x1C00);  // 2^-8
}

TEST(DequantizeLinear, Int32WithoutZeroPoint) {
  auto out = run_op("DequantizeLinear", {}, {make<int32_t>({3}, {-70000, 0, 123456}), make<float>({}, {0.5f})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-35000, 0, 61728}));
}

TEST(DynamicQuantizeLinear, RangeIncludesZero) {
  // min -1, max 3.5: scale 4.5/255, zero point round(1/scale) = round(56.67) = 57.
  auto out = run_op("DynamicQuantizeLinear", {}, {make<float>({4}, {-1, 0, 2, 3.5f})}, 3, 11);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0, 57, 170, 255}));
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 0.01764706f);
  EXPECT_EQ(out[2].data<uint8_t>()[0], 57);
  // Range [-3, 2]: scale 5/255, zero point 153 (onnxruntime).
  out = run_op("DynamicQuantizeLinear", {}, {make<float>({2, 3}, {-0.5f, 0.1f, 0.9f, 2, -3, 0})}, 3, 11);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{127, 158, 199, 255, 0, 153}));
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 0.01960784f);
  EXPECT_EQ(out[2].data<uint8_t>()[0], 153);
}

TEST(QuantizeLinear, RejectsMismatchedOutputDtype) {
  EXPECT_THROW(run_op("QuantizeLinear", {{"output_dtype", int64_t{3}}},
                      {make<float>({1}, {1}), make<float>({}, {1}), make<uint8_t>({}, {0})}),
               Error);
  // Per-axis scale of the wrong length.
  EXPECT_THROW(run_op("DequantizeLinear", {{"axis", int64_t{0}}},
                      {make<int8_t>({2, 2}, {1, 2, 3, 4}), make<float>({3}, {1, 1, 1})}),
               Error);
}

}  // namespace
}  // namespace kiln

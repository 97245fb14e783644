// Tests for src/ops/cast.cpp and its parser. float16 bit patterns and the
// float -> integer results were produced with numpy 1.24 (astype(np.float16)
// .view(np.uint16), astype(np.uint8), ...); bfloat16 bit patterns with torch
// 1.13 (.to(torch.bfloat16).view(torch.int16)); float8 bit patterns by hand
// from the formats (ONNX docs/Float8.md) and checked against onnx 1.17's
// onnx.helper.float32_to_float8e4m3 / float32_to_float8e5m2, except the
// saturate=0 overflow of a value that rounds past the maximum, where kiln
// follows the Cast spec table (see src/support/float8.h).
#include <cmath>
#include <limits>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

std::vector<Tensor> cast(const Tensor& x, DType to) {
  return run_op("Cast", {{"to", static_cast<int64_t>(to)}}, {x});
}

std::vector<uint16_t> bits16(const Tensor& t) {
  return std::vector<uint16_t>(t.data<uint16_t>(), t.data<uint16_t>() + t.numel());
}

Tensor halfs(std::vector<uint16_t> bits, DType dt) {
  Tensor t(dt, {static_cast<int64_t>(bits.size())});
  for (size_t i = 0; i < bits.size(); ++i) t.data<uint16_t>()[i] = bits[i];
  return t;
}

TEST(Cast, FloatToIntTruncatesTowardZero) {
  auto out = cast(make<float>({4}, {1.7f, -1.7f, 2.5f, -0.5f}), DType::i32);
  EXPECT_EQ(out[0].dtype(), DType::i32);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{1, -1, 2, 0}));
  out = cast(make<double>({2}, {-7.99, 1e10}), DType::i64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{-7, 10000000000}));
  // numpy float32 -> uint8: -1 -> 255, 300 -> 44, 255.9 -> 255 (wraps modulo 256).
  out = cast(make<float>({3}, {-1, 300, 255.9f}), DType::u8);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{255, 44, 255}));
  // NaN has no integer value; kiln defines it as 0. Huge values saturate at int64.
  out = cast(make<float>({2}, {NAN, 1e30f}), DType::i64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{0, std::numeric_limits<int64_t>::max()}));
}

TEST(Cast, IntegerConversions) {
  // numpy int64 -> int32: 2^32+5 -> 5, -1 -> -1; int64 -> uint8: -1 -> 255.
  auto out = cast(make<int64_t>({2}, {(int64_t{1} << 32) + 5, -1}), DType::i32);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{5, -1}));
  out = cast(make<int64_t>({1}, {-1}), DType::u8);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{255}));
  out = cast(make<int32_t>({2}, {7, -3}), DType::i64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{7, -3}));
  out = cast(make<int64_t>({1}, {16777217}), DType::f32);  // nearest float is 16777216
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{16777216.0f}));
  out = cast(make<int64_t>({2}, {3, -4}), DType::f64);
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{3, -4}));
}

TEST(Cast, BoolBothWays) {
  auto out = cast(make<float>({4}, {0, 2.5f, -0.0f, NAN}), DType::boolean);
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{false, true, false, true}));
  out = cast(make<bool>({2}, {true, false}), DType::f32);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 0}));
  out = cast(make<bool>({2}, {true, false}), DType::i64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, 0}));
  out = cast(make<int64_t>({3}, {0, -5, 1}), DType::boolean);
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{false, true, true}));
}

TEST(Cast, Float16RoundsToNearestEven) {
  // 1+2^-11 is halfway between 1 (0x3c00) and 1+2^-10 (0x3c01): ties to even.
  // 1+3*2^-12 rounds up; 65520 overflows to inf; 65519 -> 65504 (0x7bff);
  // 2^-25 ties to 0; 3*2^-26 -> smallest subnormal; -1/3 -> 0xb555.
  auto x = make<float>({7}, {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-12f, 65520, 65519, 0x1p-25f, 3 * 0x1p-26f, -1.0f / 3});
  auto out = cast(x, DType::f16);
  EXPECT_EQ(out[0].dtype(), DType::f16);
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x3c00, 0x3c01, 0x7c00, 0x7bff, 0x0000, 0x0001, 0xb555}));
  // float16 -> float32 is exact.
  out = cast(halfs({0x3555, 0xc000, 0x7c00, 0x0001}, DType::f16), DType::f32);
  EXPECT_EQ(values<float>(out[0]),
            (std::vector<float>{0.333251953125f, -2.0f, std::numeric_limits<float>::infinity(), 0x1p-24f}));
  // float64 just above the tie must round up (numpy: 0x3c01); narrowing to
  // float32 first would land exactly on the tie and give 0x3c00.
  out = cast(make<double>({1}, {1.0 + 0x1p-11 + 0x1p-40}), DType::f16);
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x3c01}));
  // float16 -> int64 truncates; float16 -> float16 copies.
  out = cast(halfs({0xc060}, DType::f16), DType::i64);  // -2.1875
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{-2}));
  out = cast(halfs({0x1234, 0xabcd}, DType::f16), DType::f16);
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x1234, 0xabcd}));
}

TEST(Cast, BFloat16BothWays) {
  // torch: 1+2^-8 (a tie) -> 0x3f80, 1+3*2^-9 -> 0x3f81, -2.5 -> 0xc020.
  auto out = cast(make<float>({3}, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-9f, -2.5f}), DType::bf16);
  EXPECT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x3f80, 0x3f81, 0xc020}));
  out = cast(halfs({0x3f81, 0xc020}, DType::bf16), DType::f64);
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{1.0078125, -2.5}));
  out = cast(halfs({0x3f81}, DType::bf16), DType::f16);  // 1.0078125 is exact in float16: 0x3c08
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x3c08}));
}

TEST(Cast, LargeTensor) {
  Tensor x(DType::i64, {100003});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int64_t>()[i] = i - 50000;
  auto out = cast(x, DType::f32);
  EXPECT_EQ(out[0].data<float>()[0], -50000.0f);
  EXPECT_EQ(out[0].data<float>()[100002], 50002.0f);
}

TEST(CastLike, TakesTheDtypeOfInputOne) {
  auto out = run_op("CastLike", {}, {make<float>({2}, {3.9f, -3.9f}), make<int64_t>({}, {0})});
  EXPECT_EQ(out[0].dtype(), DType::i64);
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{3, -3}));
  out = run_op("CastLike", {}, {make<int32_t>({1}, {1}), Tensor(DType::f16, {0})});
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x3c00}));
}

/// A tensor of an 8-bit-storage dtype (float8, int4, uint4) from raw bytes.
Tensor bytes8(DType dt, std::vector<uint8_t> v) {
  Tensor t(dt, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<uint8_t>()[i] = v[i];
  return t;
}

std::vector<uint8_t> bits8(const Tensor& t) { return std::vector<uint8_t>(t.data<uint8_t>(), t.data<uint8_t>() + t.numel()); }

TEST(Cast, FloatToFloat8E4M3FN) {
  // 448 is the max (0x7E); 464 ties between 448 (even mantissa) and 480 -> 448;
  // 470 rounds past the max -> 448 saturated, NaN (0x7F) without saturation;
  // 2^-9 is the smallest subnormal (0x01); 2^-10 ties to 0; 3*2^-11 -> 0x01; -0 keeps its sign.
  Tensor x = make<float>({8}, {448, 464, 470, 0x1p-9f, 0x1p-10f, 3 * 0x1p-11f, -0.0f, 1e-3f});
  auto out = cast(x, DType::f8e4m3fn);
  EXPECT_EQ(out[0].dtype(), DType::f8e4m3fn);
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x7E, 0x7E, 0x7E, 0x01, 0x00, 0x01, 0x80, 0x01}));
  out = run_op("Cast", {{"to", int64_t{17}}, {"saturate", int64_t{0}}}, {make<float>({3}, {470, -INFINITY, NAN})});
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x7F, 0xFF, 0x7F}));
}

TEST(Cast, FloatToOtherFloat8Formats) {
  // e4m3fnuz: no negative zero, max 240, NaN 0x80.
  auto out = cast(make<float>({4}, {-0.0f, -300, NAN, 1e-3f}), DType::f8e4m3fnuz);
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x00, 0xFF, 0x80, 0x01}));
  // e5m2: max 57344 (0x7B); 61440 ties up past the max -> 57344 saturated, inf (0x7C) otherwise.
  out = cast(make<float>({3}, {57344, 61440, -INFINITY}), DType::f8e5m2);
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x7B, 0x7B, 0xFB}));
  out = run_op("Cast", {{"to", int64_t{19}}, {"saturate", int64_t{0}}}, {make<float>({2}, {61440, -INFINITY})});
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x7C, 0xFC}));
  // e5m2fnuz: NaN -> 0x80, inf saturates to 0x7F.
  out = cast(make<float>({2}, {NAN, INFINITY}), DType::f8e5m2fnuz);
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x80, 0x7F}));
}

TEST(Cast, Float8ToOtherTypes) {
  // e4m3fn 0xD4 = -(1 + 4/8) * 2^3 = -12; e4m3fnuz 0x08 = 2^-7 and 0x80 = NaN;
  // e5m2fnuz 0x04 = 2^-15; e5m2 0x7C = inf.
  auto out = cast(bytes8(DType::f8e4m3fn, {0xD4}), DType::i32);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{-12}));
  out = cast(bytes8(DType::f8e4m3fnuz, {0x08, 0x80}), DType::f32);
  EXPECT_EQ(out[0].data<float>()[0], 0x1p-7f);
  EXPECT_TRUE(std::isnan(out[0].data<float>()[1]));
  out = cast(bytes8(DType::f8e5m2fnuz, {0x04}), DType::f64);
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{0x1p-15}));
  out = cast(bytes8(DType::f8e5m2, {0x7C}), DType::f16);
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x7c00}));
  // float8 -> float8 goes through the exact value: e5m2 57344 saturates to e4m3fn 448.
  out = cast(bytes8(DType::f8e5m2, {0x7B}), DType::f8e4m3fn);
  EXPECT_EQ(bits8(out[0]), (std::vector<uint8_t>{0x7E}));
}

TEST(Cast, FourBitIntegers) {
  // Clamp, then round half to even (NaN -> 0), as onnx.subbyte.float32_to_4bit_unpacked.
  Tensor x = make<float>({9}, {-9.5f, -8.5f, -0.5f, 0.5f, 1.5f, 2.5f, 7.4f, 100, NAN});
  auto out = cast(x, DType::i4);
  EXPECT_EQ(out[0].dtype(), DType::i4);
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{-8, -8, 0, 0, 2, 2, 7, 7, 0}));
  out = cast(x, DType::u4);
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0, 0, 0, 0, 2, 2, 7, 15, 0}));
  // Integers clamp too.
  out = cast(make<int64_t>({3}, {-100, 5, 100}), DType::i4);
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{-8, 5, 7}));
  // 4-bit values widen exactly.
  out = cast(bytes8(DType::i4, {0xF8, 0x07}), DType::f32);  // -8, 7 (sign-extended storage)
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-8, 7}));
  out = cast(bytes8(DType::u4, {15, 0}), DType::i8);
  EXPECT_EQ(values<int8_t>(out[0]), (std::vector<int8_t>{15, 0}));
}

TEST(Cast, UnsupportedTargetNamesNode) {
  try {
    cast(make<float>({1}, {1}), DType::string);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Cast node 'test_Cast'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cast(make<float>({1}, {1}), static_cast<DType>(14)), Error);  // COMPLEX64
}

TEST(Cast, ParserChecksTo) {
  struct NoContext : onnx_import::ParseContext {
    ir::ValueId add_constant(const std::string&, Tensor) override { return 0; }
    const ir::Value& value(ir::ValueId) const override { throw Error(ErrorCode::internal, "unused"); }
  } ctx;
  ir::Node n;
  n.op_type = "Cast";
  n.name = "c";
  n.opset = 19;
  auto* p = onnx_import::parsers().find("", "Cast");
  ASSERT_NE(p, nullptr);
  EXPECT_THROW(p->parse(n, ctx), Error);  // 'to' missing
  n.attrs["to"] = int64_t{15};            // COMPLEX128
  try {
    p->parse(n, ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Cast node 'c'"), std::string::npos) << e.what();
  }
  n.attrs["to"] = int64_t{10};
  EXPECT_NO_THROW(p->parse(n, ctx));
  n.attrs["to"] = int64_t{17};  // FLOAT8E4M3FN
  EXPECT_NO_THROW(p->parse(n, ctx));
  n.attrs["to"] = int64_t{22};  // INT4
  EXPECT_NO_THROW(p->parse(n, ctx));
  n.attrs["saturate"] = int64_t{2};
  EXPECT_THROW(p->parse(n, ctx), Error);
  n.attrs.erase("saturate");
  n.attrs["to"] = int64_t{23};  // FLOAT4E2M1
  EXPECT_THROW(p->parse(n, ctx), Error);
  EXPECT_NE(onnx_import::parsers().find("", "CastLike"), nullptr);
}

}  // namespace
}  // namespace kiln

// Tests for src/ops/elementwise_binary.cpp and its parsers. Expected values
// are hand-computed or computed with numpy 1.24 (np.mod, np.fmod, np.maximum,
// np.bitwise_*, np.left_shift) as noted; large broadcasts are checked against
// a plain index loop written in the test.
#include <cmath>
#include <limits>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"
#include "ops/registry.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

TEST(ElementwiseBinary, AddSameShapeAndScalar) {
  auto out = run_op("Add", {}, {make<float>({2, 2}, {1, 2, 3, 4}), make<float>({2, 2}, {10, 20, 30, 40})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{11, 22, 33, 44}));
  out = run_op("Sub", {}, {make<int64_t>({}, {10}), make<int64_t>({3}, {1, 2, 3})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{9, 8, 7}));
  out = run_op("Mul", {}, {make<int32_t>({3}, {1, -2, 3}), make<int32_t>({1}, {-3})});
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{-3, 6, -9}));
}

TEST(ElementwiseBinary, BroadcastBothWays) {
  // numpy: [[1.5],[-2]] + [[10,20,30]] and the product.
  auto a = make<float>({2, 1}, {1.5f, -2.0f});
  auto b = make<float>({1, 3}, {10, 20, 30});
  auto out = run_op("Add", {}, {a, b});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{11.5f, 21.5f, 31.5f, 8, 18, 28}));
  out = run_op("Mul", {}, {a, b});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{15, 30, 45, -20, -40, -60}));
  // Row broadcast [2,3] - [3].
  out = run_op("Sub", {}, {make<float>({2, 3}, {1, 2, 3, 4, 5, 6}), make<float>({3}, {1, 1, 2})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 1, 1, 3, 4, 4}));
  // Channel broadcast [1,2,2,2] * [1,2,1,1] (per-channel scale).
  out = run_op("Mul", {}, {make<float>({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), make<float>({1, 2, 1, 1}, {2, -1})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 4, 6, 8, -5, -6, -7, -8}));
}

TEST(ElementwiseBinary, LargeBroadcastMatchesIndexLoop) {
  // Big enough for the tiled/parallel paths: [3,1,70,400] + [5,1,400] -> [3,5,70,400].
  const int64_t A = 3, B = 5, H = 70, W = 400;
  Tensor x(DType::f32, {A, 1, H, W}), y(DType::f32, {B, 1, W});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 97) * 0.5f;
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = static_cast<float>(i % 13) - 6.0f;
  auto out = run_op("Sub", {}, {x, y});
  ASSERT_EQ(out[0].shape(), (std::vector<int64_t>{A, B, H, W}));
  const float* o = out[0].data<float>();
  int64_t bad = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          float want = x.data<float>()[(a * H + h) * W + w] - y.data<float>()[b * W + w];
          bad += o[((a * B + b) * H + h) * W + w] != want;
        }
  EXPECT_EQ(bad, 0);
  // Same-shape large add (flat tiled path) and a scalar on the left.
  Tensor z(DType::f32, {300000});
  for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = static_cast<float>(i);
  out = run_op("Sub", {}, {make<float>({}, {1.0f}), z});
  EXPECT_EQ(out[0].data<float>()[0], 1.0f);
  EXPECT_EQ(out[0].data<float>()[299999], 1.0f - 299999.0f);
  out = run_op("Add", {}, {z, z});
  EXPECT_EQ(out[0].data<float>()[123456], 246912.0f);
}

TEST(ElementwiseBinary, IntegerDivTruncatesTowardZero) {
  // C / ONNX: 7/2=3, -7/2=-3, 7/-2=-3, -7/-2=3 (numpy's // would give -4).
  auto out = run_op("Div", {}, {make<int64_t>({4}, {7, -7, 7, -7}), make<int64_t>({4}, {2, 2, -2, -2})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{3, -3, -3, 3}));
  out = run_op("Div", {}, {make<int32_t>({2}, {std::numeric_limits<int32_t>::min(), 9}), make<int32_t>({1}, {-1})});
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -9}));
  out = run_op("Div", {}, {make<float>({2}, {1, -3}), make<float>({1}, {4})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0.25f, -0.75f}));
}

TEST(ElementwiseBinary, IntegerDivisionByZeroIsAnError) {
  try {
    run_op("Div", {}, {make<int64_t>({2}, {1, 2}), make<int64_t>({2}, {1, 0})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_input);
    EXPECT_NE(std::string(e.what()).find("Div node 'test_Div'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_op("Mod", {}, {make<int32_t>({1}, {1}), make<int32_t>({1}, {0})}), Error);
}

TEST(ElementwiseBinary, ModSignRules) {
  auto a = make<int64_t>({4}, {7, -7, 7, -7});
  auto b = make<int64_t>({4}, {3, 3, -3, -3});
  // numpy np.mod -> [1, 2, -2, -1] (sign of divisor); np.fmod -> [1, -1, 1, -1].
  auto out = run_op("Mod", {}, {a, b});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, 2, -2, -1}));
  out = run_op("Mod", {{"fmod", int64_t{1}}}, {a, b});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, -1, 1, -1}));
  // numpy float32: fmod(5.5,-2)=1.5, mod(5.5,-2)=-0.5, mod(-5.5,2)=0.5.
  out = run_op("Mod", {{"fmod", int64_t{1}}}, {make<float>({1}, {5.5f}), make<float>({1}, {-2})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1.5f}));
  out = run_op("Mod", {}, {make<float>({2}, {5.5f, -5.5f}), make<float>({2}, {-2, 2})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-0.5f, 0.5f}));
}

TEST(ElementwiseBinary, PowMixedDtypes) {
  auto out = run_op("Pow", {}, {make<float>({2}, {2, 3}), make<int64_t>({2}, {3, 2})});
  EXPECT_EQ(out[0].dtype(), DType::f32);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{8, 9}));
  out = run_op("Pow", {}, {make<int64_t>({3}, {3, -2, 5}), make<int64_t>({3}, {4, 3, 0})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{81, -8, 1}));
  // int base, float exponent: pow in double, truncated: 2^0.5=1.41 -> 1, 9^0.5 -> 3.
  out = run_op("Pow", {}, {make<int32_t>({2}, {2, 9}), make<float>({}, {0.5f})});
  EXPECT_EQ(out[0].dtype(), DType::i32);
  EXPECT_EQ(values<int32_t>(out[0]), (std::vector<int32_t>{1, 3}));
  out = run_op("Pow", {}, {make<float>({2}, {4, 2}), make<float>({1}, {-0.5f})});
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 0.5f);
  EXPECT_FLOAT_EQ(out[0].data<float>()[1], 0.70710678f);
}

TEST(ElementwiseBinary, VariadicMaxMinSumMean) {
  // numpy: maximum(maximum([1,5,3], [[2],[4]]), 3.5) = [[3.5,5,3.5],[4,5,4]].
  auto a = make<float>({3}, {1, 5, 3});
  auto b = make<float>({2, 1}, {2, 4});
  auto c = make<float>({}, {3.5f});
  auto out = run_op("Max", {}, {a, b, c});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{3.5f, 5, 3.5f, 4, 5, 4}));
  out = run_op("Min", {}, {a, b, c});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 2, 2, 1, 3.5f, 3}));
  out = run_op("Sum", {}, {a, b, c});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{6.5f, 10.5f, 8.5f, 8.5f, 12.5f, 10.5f}));
  out = run_op("Mean", {}, {a, b, c});
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 6.5f / 3);
  EXPECT_FLOAT_EQ(out[0].data<float>()[4], 12.5f / 3);
  out = run_op("Sum", {}, {a});  // one input: a copy
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 5, 3}));
  out = run_op("Max", {}, {make<int64_t>({2}, {-5, 7}), make<int64_t>({2}, {3, -9})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{3, 7}));
  // NaN propagates (numpy maximum).
  out = run_op("Max", {}, {make<float>({2}, {NAN, 1}), make<float>({2}, {0, NAN})});
  EXPECT_TRUE(std::isnan(out[0].data<float>()[0]));
  EXPECT_TRUE(std::isnan(out[0].data<float>()[1]));
}

TEST(ElementwiseBinary, Comparisons) {
  auto a = make<float>({2, 2}, {1, 2, 3, 4});
  auto b = make<float>({2}, {2, 3});
  auto expect = [&](const char* op, std::vector<bool> want) {
    auto out = run_op(op, {}, {a, b});
    EXPECT_EQ(out[0].dtype(), DType::boolean) << op;
    EXPECT_EQ(values<bool>(out[0]), want) << op;
  };
  expect("Equal", {false, false, false, false});
  expect("Less", {true, true, false, false});
  expect("Greater", {false, false, true, true});
  expect("LessOrEqual", {true, true, false, false});
  expect("GreaterOrEqual", {false, false, true, true});
  auto out = run_op("Equal", {}, {make<int64_t>({3}, {1, 2, 3}), make<int64_t>({}, {2})});
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{false, true, false}));
  out = run_op("Equal", {}, {make<bool>({2}, {true, false}), make<bool>({2}, {true, true})});
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{true, false}));
  out = run_op("LessOrEqual", {}, {make<int32_t>({2}, {2, 3}), make<int32_t>({2}, {2, 2})});
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{true, false}));
}

TEST(ElementwiseBinary, LogicAndBitwise) {
  auto p = make<bool>({4}, {true, true, false, false});
  auto q = make<bool>({4}, {true, false, true, false});
  EXPECT_EQ(values<bool>(run_op("And", {}, {p, q})[0]), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(values<bool>(run_op("Or", {}, {p, q})[0]), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(values<bool>(run_op("Xor", {}, {p, q})[0]), (std::vector<bool>{false, true, true, false}));
  // numpy: bitwise_and(-1,5)=5, bitwise_or(-8,3)=-5, bitwise_xor(-1,6)=-7.
  auto x = make<int32_t>({3}, {-1, -8, -1});
  auto y = make<int32_t>({3}, {5, 3, 6});
  EXPECT_EQ(values<int32_t>(run_op("BitwiseAnd", {}, {x, y})[0]), (std::vector<int32_t>{5, 0, 6}));
  EXPECT_EQ(values<int32_t>(run_op("BitwiseOr", {}, {x, y})[0]), (std::vector<int32_t>{-1, -5, -1}));
  EXPECT_EQ(values<int32_t>(run_op("BitwiseXor", {}, {x, y})[0]), (std::vector<int32_t>{-6, -5, -7}));
}

TEST(ElementwiseBinary, BitShift) {
  auto x = make<uint8_t>({3}, {1, 2, 255});
  auto s = make<uint8_t>({3}, {1, 2, 1});
  // numpy left_shift(uint8) -> [2, 8, 254].
  auto out = run_op("BitShift", {{"direction", std::string("LEFT")}}, {x, s});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{2, 8, 254}));
  out = run_op("BitShift", {{"direction", std::string("RIGHT")}}, {x, make<uint8_t>({}, {1})});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0, 1, 127}));
  out = run_op("BitShift", {{"direction", std::string("LEFT")}}, {x, make<uint8_t>({}, {9})});
  EXPECT_EQ(values<uint8_t>(out[0]), (std::vector<uint8_t>{0, 0, 0}));
  EXPECT_THROW(run_op("BitShift", {{"direction", std::string("UP")}}, {x, s}), Error);
}

TEST(ElementwiseBinary, WhereThreeWayBroadcast) {
  auto c = make<bool>({2, 1}, {true, false});
  auto x = make<float>({1, 3}, {1, 2, 3});
  auto y = make<float>({}, {-1});
  auto out = run_op("Where", {}, {c, x, y});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 2, 3, -1, -1, -1}));
  out = run_op("Where", {}, {make<bool>({3}, {false, true, false}), make<int64_t>({3}, {1, 2, 3}),
                             make<int64_t>({3}, {7, 8, 9})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{7, 2, 9}));
  EXPECT_THROW(run_op("Where", {}, {make<float>({1}, {1}), x, y}), Error);
}

TEST(ElementwiseBinary, SymbolicShapeInference) {
  ir::Node n;
  n.op_type = "Add";
  n.name = "add";
  n.opset = 17;
  n.inputs = {0, 1};
  n.outputs = {2};
  ops::InType a{DType::f32, ir::Shape{ir::Dim::sym("N"), ir::Dim::known(1)}, nullptr};
  ops::InType b{DType::f32, ir::Shape{ir::Dim::known(1), ir::Dim::sym("M")}, nullptr};
  auto out = ops::infer(n, {a, b});
  ASSERT_TRUE(out[0].shape.has_value());
  EXPECT_EQ(*out[0].shape, (ir::Shape{ir::Dim::sym("N"), ir::Dim::sym("M")}));
  n.op_type = "Less";
  ops::InType c{DType::f32, ir::Shape{ir::Dim::known(3)}, nullptr};
  out = ops::infer(n, {a, c});
  EXPECT_EQ(out[0].dtype, DType::boolean);
  EXPECT_EQ(*out[0].shape, (ir::Shape{ir::Dim::sym("N"), ir::Dim::known(3)}));
  ops::InType unknown{DType::f32, std::nullopt, nullptr};
  EXPECT_FALSE(ops::infer(n, {a, unknown})[0].shape.has_value());
}

TEST(ElementwiseBinary, MismatchedDtypesAreRejected) {
  try {
    run_op("Add", {}, {make<float>({1}, {1}), make<int64_t>({1}, {1})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_model);
  }
}

Tensor f16(std::vector<int64_t> shape, std::vector<uint16_t> bits) {
  Tensor t(DType::f16, shape);
  for (size_t i = 0; i < bits.size(); ++i) t.data<uint16_t>()[i] = bits[i];
  return t;
}

TEST(ElementwiseBinary, Float16ComputedInFloat32AndRoundedBack) {
  // 1 + 2^-11 is a tie between 1 (0x3c00) and 1+2^-10 (0x3c01) -> even (0x3c00);
  // 1 + 3*2^-12 rounds up to 0x3c01. 2^-11 = 0x1000, 3*2^-12 = 0x1200 in float16.
  auto out = run_op("Add", {}, {f16({2}, {0x3c00, 0x3c00}), f16({2}, {0x1000, 0x1200})});
  ASSERT_EQ(out[0].dtype(), DType::f16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x3c00);
  EXPECT_EQ(out[0].data<uint16_t>()[1], 0x3c01);
  out = run_op("Less", {}, {f16({2}, {0x3c00, 0x4000}), f16({}, {0x3e00})});  // [1, 2] < 1.5
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{true, false}));
  out = run_op("Pow", {}, {f16({1}, {0x4000}), make<int64_t>({1}, {3})});  // 2^3 = 8 = 0x4800
  EXPECT_EQ(out[0].dtype(), DType::f16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x4800);
}

TEST(ElementwiseBinary, UnsupportedDtypeNamesNode) {
  auto b = make<bool>({2}, {true, false});
  try {
    run_op("Add", {}, {b, b});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Add node 'test_Add'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bool"), std::string::npos) << e.what();
  }
  Tensor h(DType::f16, {1});
  EXPECT_THROW(run_op("BitwiseAnd", {}, {h, h}), Error);
  EXPECT_THROW(run_op("And", {}, {make<float>({1}, {1}), make<float>({1}, {1})}), Error);
}

/// A ParseContext over a plain value table, for parser tests.
class FakeParseContext : public onnx_import::ParseContext {
 public:
  std::vector<ir::Value> values;
  ir::ValueId add_constant(const std::string& name, Tensor t) override {
    ir::Value v;
    v.name = name;
    v.dtype = t.dtype();
    v.shape = ir::static_shape(t.shape());
    v.constant = t;
    values.push_back(v);
    return static_cast<ir::ValueId>(values.size() - 1);
  }
  const ir::Value& value(ir::ValueId id) const override { return values.at(static_cast<size_t>(id)); }
};

TEST(ElementwiseBinary, Parsers) {
  FakeParseContext ctx;
  ir::Node n;
  n.op_type = "Mod";
  n.name = "m";
  n.opset = 13;
  n.attrs["fmod"] = int64_t{2};
  auto* e = onnx_import::parsers().find("", "Mod");
  ASSERT_NE(e, nullptr);
  try {
    e->parse(n, ctx);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(err.what()).find("Mod node 'm'"), std::string::npos);
  }
  n.op_type = "BitShift";
  n.attrs.clear();
  EXPECT_THROW(onnx_import::parsers().find("", "BitShift")->parse(n, ctx), Error);
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
                         "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr",
                         "BitwiseXor", "Where"})
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
}

}  // namespace
}  // namespace kiln

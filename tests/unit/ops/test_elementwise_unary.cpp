// Tests for src/ops/elementwise_unary.cpp. Expected values are hand-computed
// or the libm constants printed by numpy 1.24 (np.exp(1), np.arcsinh(1), ...)
// to 10 significant digits.
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

float unary1(const char* op, float x) { return run_op(op, {}, {make<float>({1}, {x})})[0].data<float>()[0]; }

TEST(ElementwiseUnary, AbsNegSign) {
  auto x = make<float>({2, 2}, {-2, 0, 3.5f, -0.25f});
  auto out = run_op("Abs", {}, {x});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{2, 0, 3.5f, 0.25f}));
  EXPECT_EQ(values<float>(run_op("Neg", {}, {x})[0]), (std::vector<float>{2, 0, -3.5f, 0.25f}));
  EXPECT_EQ(values<float>(run_op("Sign", {}, {x})[0]), (std::vector<float>{-1, 0, 1, -1}));
  auto i = make<int64_t>({3}, {-5, 0, 7});
  EXPECT_EQ(values<int64_t>(run_op("Abs", {}, {i})[0]), (std::vector<int64_t>{5, 0, 7}));
  EXPECT_EQ(values<int64_t>(run_op("Neg", {}, {i})[0]), (std::vector<int64_t>{5, 0, -7}));
  EXPECT_EQ(values<int64_t>(run_op("Sign", {}, {i})[0]), (std::vector<int64_t>{-1, 0, 1}));
  auto j = make<int32_t>({2}, {std::numeric_limits<int32_t>::min(), -3});
  EXPECT_EQ(values<int32_t>(run_op("Abs", {}, {j})[0]),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 3}));  // wraps like two's complement
}

TEST(ElementwiseUnary, TranscendentalFunctions) {
  EXPECT_NEAR(unary1("Exp", 1), 2.718281828f, 1e-6);
  EXPECT_NEAR(unary1("Log", 10), 2.302585093f, 1e-6);
  EXPECT_NEAR(unary1("Sqrt", 2), 1.414213562f, 1e-6);
  EXPECT_EQ(unary1("Reciprocal", 4), 0.25f);
  EXPECT_NEAR(unary1("Erf", 0.5f), 0.5204998778f, 1e-6);
  EXPECT_NEAR(unary1("Sin", 1), 0.8414709848f, 1e-6);
  EXPECT_NEAR(unary1("Cos", 1), 0.5403023059f, 1e-6);
  EXPECT_NEAR(unary1("Tan", 1), 1.557407725f, 1e-6);
  EXPECT_NEAR(unary1("Asin", 0.5f), 0.5235987756f, 1e-6);
  EXPECT_NEAR(unary1("Acos", 0.5f), 1.047197551f, 1e-6);
  EXPECT_NEAR(unary1("Atan", 1), 0.7853981634f, 1e-6);
  EXPECT_NEAR(unary1("Sinh", 1), 1.175201194f, 1e-6);
  EXPECT_NEAR(unary1("Cosh", 1), 1.543080635f, 1e-6);
  EXPECT_NEAR(unary1("Asinh", 1), 0.8813735870f, 1e-6);
  EXPECT_NEAR(unary1("Acosh", 2), 1.316957897f, 1e-6);
  EXPECT_NEAR(unary1("Atanh", 0.5f), 0.5493061443f, 1e-6);
  // IEEE special values.
  EXPECT_EQ(unary1("Log", 0), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(unary1("Log", -1)));
  EXPECT_TRUE(std::isnan(unary1("Sqrt", -4)));
  // float64 goes through the double functions.
  auto d = run_op("Exp", {}, {make<double>({1}, {1.0})});
  EXPECT_NEAR(d[0].data<double>()[0], 2.718281828459045, 1e-15);
}

TEST(ElementwiseUnary, FloorCeilRoundHalfToEven) {
  auto x = make<float>({7}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f});
  EXPECT_EQ(values<float>(run_op("Round", {}, {x})[0]), (std::vector<float>{0, 2, 2, -0.0f, -2, 2, -3}));
  EXPECT_EQ(values<float>(run_op("Floor", {}, {x})[0]), (std::vector<float>{0, 1, 2, -1, -2, 2, -3}));
  EXPECT_EQ(values<float>(run_op("Ceil", {}, {x})[0]), (std::vector<float>{1, 2, 3, -0.0f, -1, 3, -2}));
}

TEST(ElementwiseUnary, LogicAndClassification) {
  auto b = make<bool>({3}, {true, false, true});
  EXPECT_EQ(values<bool>(run_op("Not", {}, {b})[0]), (std::vector<bool>{false, true, false}));
  const float inf = std::numeric_limits<float>::infinity();
  auto x = make<float>({4}, {1, NAN, inf, -inf});
  auto out = run_op("IsNaN", {}, {x});
  EXPECT_EQ(out[0].dtype(), DType::boolean);
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(values<bool>(run_op("IsInf", {}, {x})[0]), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(values<bool>(run_op("IsInf", {{"detect_negative", int64_t{0}}}, {x})[0]),
            (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(values<bool>(run_op("IsInf", {{"detect_positive", int64_t{0}}}, {x})[0]),
            (std::vector<bool>{false, false, false, true}));
}

TEST(ElementwiseUnary, BitwiseNot) {
  EXPECT_EQ(values<int32_t>(run_op("BitwiseNot", {}, {make<int32_t>({3}, {0, 5, -1})})[0]),
            (std::vector<int32_t>{-1, -6, 0}));
  EXPECT_EQ(values<uint8_t>(run_op("BitwiseNot", {}, {make<uint8_t>({3}, {0, 255, 15})})[0]),
            (std::vector<uint8_t>{255, 0, 240}));
}

TEST(ElementwiseUnary, LargeInputUsesEveryElement) {
  Tensor x(DType::f32, {200001});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i) - 100000.0f;
  auto out = run_op("Abs", {}, {x});
  EXPECT_EQ(out[0].data<float>()[0], 100000.0f);
  EXPECT_EQ(out[0].data<float>()[100000], 0.0f);
  EXPECT_EQ(out[0].data<float>()[200000], 100000.0f);
}

TEST(ElementwiseUnary, SixteenBitFloatsComputedInFloat32) {
  Tensor h(DType::f16, {3});
  const uint16_t bits[] = {0x4400, 0x7e00, 0xbc00};  // 4, NaN, -1
  for (int i = 0; i < 3; ++i) h.data<uint16_t>()[i] = bits[i];
  auto out = run_op("Sqrt", {}, {h});
  ASSERT_EQ(out[0].dtype(), DType::f16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x4000);  // 2
  EXPECT_EQ(values<bool>(run_op("IsNaN", {}, {h})[0]), (std::vector<bool>{false, true, false}));
  Tensor b(DType::bf16, {1});
  b.data<uint16_t>()[0] = 0xc040;  // -3 in bfloat16
  out = run_op("Abs", {}, {b});
  ASSERT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x4040);
}

TEST(ElementwiseUnary, SymbolicShapePassesThrough) {
  ir::Node n;
  n.op_type = "IsNaN";
  n.name = "nan";
  n.inputs = {0};
  n.outputs = {1};
  ir::Shape s{ir::Dim::sym("B"), ir::Dim::known(4)};
  auto out = ops::infer(n, {ops::InType{DType::f32, s, nullptr}});
  EXPECT_EQ(out[0].dtype, DType::boolean);
  EXPECT_EQ(*out[0].shape, s);
}

TEST(ElementwiseUnary, UnsupportedDtypeNamesNode) {
  try {
    run_op("Exp", {}, {make<int64_t>({1}, {1})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Exp node 'test_Exp'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_op("Abs", {}, {make<bool>({1}, {true})}), Error);
  EXPECT_THROW(run_op("Not", {}, {make<float>({1}, {1})}), Error);
  EXPECT_THROW(run_op("BitwiseNot", {}, {make<float>({1}, {1})}), Error);
}

TEST(ElementwiseUnary, EveryOperatorHasAParser) {
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf",
                         "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                         "Not", "IsNaN", "IsInf", "BitwiseNot"}) {
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
    EXPECT_NE(ops::registry().find("", op), nullptr) << op;
  }
}

}  // namespace
}  // namespace kiln

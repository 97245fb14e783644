// Tests for src/ops/softmax.cpp. Expected values computed with numpy 1.24 in
// float64: e = exp(a - a.max(axis, keepdims=True)); e / e.sum(axis, keepdims=True),
// and for opset < 13 the same on a.reshape(2, 6) along axis 1 (the 2-D coercion).
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

// x[2,2,3]
Tensor input() { return make<float>({2, 2, 3}, {1, 2, 3, 4, 5, 7, 0, 0, 0, -1, 1, 10}); }

void expect_near(const Tensor& t, const std::vector<double>& want, double tol) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.data<float>()[i], want[i], tol) << "element " << i;
}

TEST(Softmax, LastAxisDefault) {
  auto out = run_op("Softmax", {}, {input()});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 2, 3}));
  expect_near(out[0],
              {0.0900305732, 0.244728471, 0.665240956, 0.0420100661, 0.114195199, 0.843794734, 0.333333333,
               0.333333333, 0.333333333, 1.6699361e-05, 0.000123392515, 0.999859908},
              1e-7);
  out = run_op("LogSoftmax", {}, {input()});
  expect_near(out[0],
              {-2.40760596, -1.40760596, -0.407605964, -3.16984602, -2.16984602, -0.16984602, -1.09861229,
               -1.09861229, -1.09861229, -11.0001401, -9.0001401, -0.00014010169},
              2e-6);
}

TEST(Softmax, MiddleAxisAndNegativeAxis) {
  const std::vector<double> want{0.0474258732, 0.0474258732, 0.01798621,  0.952574127, 0.952574127, 0.98201379,
                                 0.731058579,  0.268941421,  4.53978687e-05, 0.268941421, 0.731058579, 0.999954602};
  expect_near(run_op("Softmax", {{"axis", int64_t{1}}}, {input()})[0], want, 1e-7);
  expect_near(run_op("Softmax", {{"axis", int64_t{-2}}}, {input()})[0], want, 1e-7);
}

TEST(Softmax, Opset11CoercesTo2D) {
  // Default axis 1 at opset 11: softmax over the 6 trailing elements jointly.
  auto out = run_op("Softmax", {}, {input()}, 1, 11);
  expect_near(out[0],
              {0.00204407091, 0.00555636081, 0.0151037546, 0.0410562618, 0.11160249, 0.824637062, 4.53873887e-05,
               4.53873887e-05, 4.53873887e-05, 1.66970872e-05, 0.000123375714, 0.999723765},
              1e-7);
  out = run_op("LogSoftmax", {}, {input()}, 1, 12);
  expect_near(out[0],
              {-6.19281191, -5.19281191, -4.19281191, -3.19281191, -2.19281191, -0.192811915, -10.0002763,
               -10.0002763, -10.0002763, -11.0002763, -9.00027627, -0.000276273127},
              2e-6);
  // With the axis on the last dim, old and new forms agree.
  auto a = run_op("Softmax", {{"axis", int64_t{2}}}, {input()}, 1, 11);
  auto b = run_op("Softmax", {{"axis", int64_t{2}}}, {input()}, 1, 13);
  EXPECT_EQ(values<float>(a[0]), values<float>(b[0]));
  // Hardmax-11 over the coerced rows: one 1 per row of 6, at the first maximum.
  auto h = run_op("Hardmax", {}, {input()}, 1, 11);
  EXPECT_EQ(values<float>(h[0]), (std::vector<float>{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}));
}

TEST(Softmax, HardmaxFirstMaximum) {
  auto x = make<float>({2, 3}, {3, 7, 7, -1, -5, -2});
  EXPECT_EQ(values<float>(run_op("Hardmax", {}, {x})[0]), (std::vector<float>{0, 1, 0, 1, 0, 0}));
  EXPECT_EQ(values<float>(run_op("Hardmax", {{"axis", int64_t{0}}}, {x})[0]), (std::vector<float>{1, 1, 1, 0, 0, 0}));
}

TEST(Softmax, LargeLogitsDoNotOverflowAndDoubleWorks) {
  auto out = run_op("Softmax", {}, {make<float>({2}, {1000, 1000})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0.5f, 0.5f}));
  auto d = run_op("LogSoftmax", {}, {make<double>({2}, {0, 0})});
  EXPECT_NEAR(d[0].data<double>()[1], -0.6931471805599453, 1e-15);
}

TEST(Softmax, Float16ComputedInFloat32) {
  Tensor h(DType::f16, {2});
  h.data<uint16_t>()[0] = 0x0000;
  h.data<uint16_t>()[1] = 0x0000;
  auto out = run_op("Softmax", {}, {h});
  ASSERT_EQ(out[0].dtype(), DType::f16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x3800);  // 0.5
  EXPECT_EQ(out[0].data<uint16_t>()[1], 0x3800);
}

TEST(Softmax, LargeRowsSumToOne) {
  Tensor x(DType::f32, {64, 1000});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37) % 101) / 10.0f;
  auto out = run_op("Softmax", {}, {x});
  for (int64_t r = 0; r < 64; r += 9) {
    double s = 0;
    for (int64_t c = 0; c < 1000; ++c) s += out[0].data<float>()[r * 1000 + c];
    EXPECT_NEAR(s, 1.0, 1e-5) << "row " << r;
  }
}

TEST(Softmax, BadAxisAndUnsupportedDtype) {
  EXPECT_THROW(run_op("Softmax", {{"axis", int64_t{3}}}, {input()}), Error);
  try {
    run_op("Softmax", {}, {make<int64_t>({2}, {1, 2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Softmax node 'test_Softmax'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_op("Hardmax", {}, {make<int32_t>({2}, {1, 2})}), Error);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) EXPECT_NE(onnx_import::parsers().find("", op), nullptr);
}

}  // namespace
}  // namespace kiln

// Tests for src/ops/reduce.cpp and its parsers. Expected values were computed
// with numpy 1.24 (x.sum/mean/max(axis=..., keepdims=...), np.prod,
// np.log(np.exp(y).sum(1)), ...) or by hand; the large case is checked
// against a plain triple loop written in the test.
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

Tensor arange24() {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  return make<float>({2, 3, 4}, v);
}

Tensor axes(std::vector<int64_t> a) { return make<int64_t>({static_cast<int64_t>(a.size())}, a); }

TEST(Reduce, AxesKeepdimsAndNegativeAxes) {
  auto x = arange24();
  auto out = run_op("ReduceSum", {}, {x, axes({1})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 1, 4}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{12, 15, 18, 21, 48, 51, 54, 57}));
  out = run_op("ReduceMean", {{"keepdims", int64_t{0}}}, {x, axes({-1})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1.5f, 5.5f, 9.5f, 13.5f, 17.5f, 21.5f}));
  out = run_op("ReduceMax", {}, {x, axes({0, 2})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{15, 19, 23}));
  out = run_op("ReduceMin", {{"keepdims", int64_t{0}}}, {x, axes({-3, 1})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 1, 2, 3}));
}

TEST(Reduce, EmptyAxesReduceAllUnlessNoop) {
  auto x = arange24();
  auto out = run_op("ReduceSum", {}, {x});  // no axes input
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{276}));
  out = run_op("ReduceMax", {{"keepdims", int64_t{0}}}, {x, axes({})});  // empty axes input
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{23}));
  // noop_with_empty_axes=1: nothing reduced; each element is reduced alone
  // (the ONNX reference gives x for Sum, x*x for SumSquare, |x| for L1).
  auto y = make<float>({2, 2}, {1, -2, 3, -4});
  out = run_op("ReduceSum", {{"noop_with_empty_axes", int64_t{1}}}, {y, axes({})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, -2, 3, -4}));
  out = run_op("ReduceSumSquare", {{"noop_with_empty_axes", int64_t{1}}}, {y});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 4, 9, 16}));
  out = run_op("ReduceL1", {{"noop_with_empty_axes", int64_t{1}}}, {y});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{1, 2, 3, 4}));
  // noop does not apply when axes are given.
  out = run_op("ReduceSum", {{"noop_with_empty_axes", int64_t{1}}}, {y, axes({0})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{4, -6}));
}

TEST(Reduce, AllReductionKinds) {
  auto y = make<double>({2, 3}, {1, -2, 3, -4, 5, -6});
  auto a1 = axes({1});
  auto got = [&](const char* op) { return values<double>(run_op(op, {{"keepdims", int64_t{0}}}, {y, a1})[0]); };
  EXPECT_EQ(got("ReduceSum"), (std::vector<double>{2, -5}));
  EXPECT_EQ(got("ReduceProd"), (std::vector<double>{-6, 120}));
  EXPECT_EQ(got("ReduceL1"), (std::vector<double>{6, 15}));
  EXPECT_EQ(got("ReduceSumSquare"), (std::vector<double>{14, 77}));
  auto l2 = got("ReduceL2");
  EXPECT_NEAR(l2[0], 3.74165739, 1e-8);
  EXPECT_NEAR(l2[1], 8.77496439, 1e-8);
  auto lse = got("ReduceLogSumExp");
  EXPECT_NEAR(lse[0], 3.1328452337275756, 1e-12);
  EXPECT_NEAR(lse[1], 5.000140101690176, 1e-12);
  auto ls = values<double>(run_op("ReduceLogSum", {{"keepdims", int64_t{0}}}, {make<double>({2, 3}, {1, 2, 3, 4, 5, 6}), a1})[0]);
  EXPECT_NEAR(ls[0], std::log(6.0), 1e-12);
  EXPECT_NEAR(ls[1], std::log(15.0), 1e-12);
  // numpy log(exp(y).sum(0)) over the outer axis: [1.006715348, 5.000911466, 3.000123402].
  auto lse0 = values<double>(run_op("ReduceLogSumExp", {{"keepdims", int64_t{0}}}, {y, axes({0})})[0]);
  EXPECT_NEAR(lse0[0], 1.006715348489118, 1e-12);
  EXPECT_NEAR(lse0[1], 5.000911466453774, 1e-12);
  EXPECT_NEAR(lse0[2], 3.000123402189723, 1e-12);
  // LogSumExp does not overflow: log(2 e^1000) = 1000 + log 2.
  auto big = run_op("ReduceLogSumExp", {}, {make<float>({2}, {1000, 1000})});
  EXPECT_NEAR(big[0].data<float>()[0], 1000.0f + 0.6931472f, 1e-3);
}

TEST(Reduce, EmptySetGivesIdentity) {
  Tensor x(DType::f32, {2, 0});
  auto one = [&](const char* op) {
    auto out = run_op(op, {{"keepdims", int64_t{0}}}, {x, axes({1})});
    EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2})) << op;
    return out[0].data<float>()[1];
  };
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(one("ReduceSum"), 0.0f);
  EXPECT_EQ(one("ReduceProd"), 1.0f);
  EXPECT_EQ(one("ReduceMax"), -inf);
  EXPECT_EQ(one("ReduceMin"), inf);
  EXPECT_EQ(one("ReduceLogSumExp"), -inf);
  EXPECT_EQ(one("ReduceLogSum"), -inf);
  EXPECT_EQ(one("ReduceL2"), 0.0f);
  EXPECT_TRUE(std::isnan(one("ReduceMean")));
  auto i = run_op("ReduceMax", {{"keepdims", int64_t{0}}}, {Tensor(DType::i32, {0, 3}), axes({0})});
  EXPECT_EQ(values<int32_t>(i[0]), (std::vector<int32_t>(3, std::numeric_limits<int32_t>::min())));
}

TEST(Reduce, Integers) {
  auto x = make<int64_t>({2, 2}, {1, 2, 4, 5});
  EXPECT_EQ(values<int64_t>(run_op("ReduceSum", {}, {x, axes({0})})[0]), (std::vector<int64_t>{5, 7}));
  // Integer mean truncates: (1+2)/2 = 1, (4+5)/2 = 4.
  EXPECT_EQ(values<int64_t>(run_op("ReduceMean", {}, {x, axes({1})})[0]), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(values<int64_t>(run_op("ReduceProd", {}, {x})[0]), (std::vector<int64_t>{40}));
  auto y = make<int32_t>({3}, {-7, 3, 2});
  EXPECT_EQ(values<int32_t>(run_op("ReduceMin", {}, {y})[0]), (std::vector<int32_t>{-7}));
  EXPECT_EQ(values<int32_t>(run_op("ReduceMax", {}, {y})[0]), (std::vector<int32_t>{3}));
}

TEST(Reduce, LargeMatchesPlainLoops) {
  const int64_t A = 64, B = 37, C = 50;
  Tensor x(DType::f32, {A, B, C});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919) % 1000) / 100.0f - 5;
  auto at = [&](int64_t a, int64_t b, int64_t c) { return static_cast<double>(x.data<float>()[(a * B + b) * C + c]); };
  auto mid = run_op("ReduceSum", {{"keepdims", int64_t{0}}}, {x, axes({1})});
  auto outer = run_op("ReduceMax", {{"keepdims", int64_t{0}}}, {x, axes({0, 2})});
  int64_t bad = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t b = 0; b < B; ++b) s += at(a, b, c);
      bad += std::fabs(mid[0].data<float>()[a * C + c] - s) > 1e-4;
    }
  for (int64_t b = 0; b < B; ++b) {
    double m = -1e30;
    for (int64_t a = 0; a < A; ++a)
      for (int64_t c = 0; c < C; ++c) m = std::max(m, at(a, b, c));
    bad += outer[0].data<float>()[b] != static_cast<float>(m);
  }
  EXPECT_EQ(bad, 0);
}

TEST(Reduce, Float16ComputedInFloat32) {
  Tensor h(DType::f16, {3});
  const uint16_t bits[] = {0x3c00, 0x4000, 0x4200};  // 1, 2, 3
  for (int i = 0; i < 3; ++i) h.data<uint16_t>()[i] = bits[i];
  auto out = run_op("ReduceSum", {}, {h});
  ASSERT_EQ(out[0].dtype(), DType::f16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x4600);  // 6
  auto arg = run_op("ArgMax", {}, {h});
  EXPECT_EQ(values<int64_t>(arg[0]), (std::vector<int64_t>{2}));
}

TEST(Reduce, BoolMaxIsAnyMinIsAll) {
  auto x = make<bool>({2, 2}, {true, false, true, true});
  auto out = run_op("ReduceMax", {{"keepdims", int64_t{0}}}, {x, axes({0})});
  EXPECT_EQ(out[0].dtype(), DType::boolean);
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{true, true}));
  out = run_op("ReduceMin", {{"keepdims", int64_t{0}}}, {x, axes({1})});
  EXPECT_EQ(values<bool>(out[0]), (std::vector<bool>{false, true}));
}

TEST(Reduce, MaxPropagatesNaN) {
  auto out = run_op("ReduceMax", {{"keepdims", int64_t{0}}}, {make<float>({2, 2}, {1, NAN, 3, 4}), axes({1})});
  EXPECT_TRUE(std::isnan(out[0].data<float>()[0]));
  EXPECT_EQ(out[0].data<float>()[1], 4.0f);
}

TEST(ArgMaxMin, AxisKeepdimsAndLastIndex) {
  auto x = make<float>({2, 3}, {2, 5, 5, 7, 1, 7});
  auto out = run_op("ArgMax", {{"axis", int64_t{1}}}, {x});
  EXPECT_EQ(out[0].dtype(), DType::i64);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, 0}));
  out = run_op("ArgMax", {{"axis", int64_t{-1}}, {"select_last_index", int64_t{1}}}, {x});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{2, 2}));
  out = run_op("ArgMin", {{"axis", int64_t{1}}, {"keepdims", int64_t{0}}}, {x});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{0, 1}));
  out = run_op("ArgMax", {{"keepdims", int64_t{0}}}, {x});  // axis defaults to 0
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1, 0, 1}));
  out = run_op("ArgMin", {}, {make<int64_t>({4}, {3, -1, 8, -1})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1}));
  // numpy argmax([1, nan, 3]) = 1: NaN is the maximum.
  out = run_op("ArgMax", {}, {make<float>({3}, {1, NAN, 3})});
  EXPECT_EQ(values<int64_t>(out[0]), (std::vector<int64_t>{1}));
  EXPECT_THROW(run_op("ArgMax", {{"axis", int64_t{1}}}, {Tensor(DType::f32, {2, 0})}), Error);
}

TEST(Reduce, ShapeInferenceSymbolicAndUnknownAxes) {
  ir::Node n;
  n.op_type = "ReduceMean";
  n.name = "rm";
  n.opset = 18;
  n.inputs = {0, 1};
  n.outputs = {2};
  ir::Shape s{ir::Dim::sym("B"), ir::Dim::sym("S"), ir::Dim::known(1), ir::Dim::known(768)};
  Tensor ax = axes({-1});
  auto out = ops::infer(n, {ops::InType{DType::f32, s, nullptr}, ops::InType{DType::i64, ir::static_shape({1}), &ax}});
  EXPECT_EQ(*out[0].shape, (ir::Shape{ir::Dim::sym("B"), ir::Dim::sym("S"), ir::Dim::known(1), ir::Dim::known(1)}));
  // Axes not constant: keepdims keeps the rank; dims other than 1 become unknown.
  out = ops::infer(n, {ops::InType{DType::f32, s, nullptr}, ops::InType{DType::i64, ir::static_shape({1}), nullptr}});
  ASSERT_TRUE(out[0].shape.has_value());
  EXPECT_EQ(*out[0].shape, (ir::Shape{ir::Dim::sym(""), ir::Dim::sym(""), ir::Dim::known(1), ir::Dim::sym("")}));
  n.attrs["keepdims"] = int64_t{0};
  out = ops::infer(n, {ops::InType{DType::f32, s, nullptr}, ops::InType{DType::i64, ir::static_shape({1}), nullptr}});
  EXPECT_FALSE(out[0].shape.has_value());
  // An out-of-range axis is an invalid model.
  Tensor bad = axes({4});
  EXPECT_THROW(ops::infer(n, {ops::InType{DType::f32, s, nullptr}, ops::InType{DType::i64, ir::static_shape({1}), &bad}}),
               Error);
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

TEST(Reduce, ParserMovesAxesAttributeToInput) {
  FakeParseContext ctx;
  ctx.values.resize(1);  // value 0 = the data input
  for (auto [op, opset] : {std::pair{"ReduceMean", 13}, std::pair{"ReduceSum", 11}, std::pair{"ReduceMax", 17}}) {
    ir::Node n;
    n.op_type = op;
    n.name = "r";
    n.opset = opset;
    n.inputs = {0};
    n.attrs["axes"] = std::vector<int64_t>{-1, 0};
    onnx_import::parsers().find("", op)->parse(n, ctx);
    EXPECT_FALSE(n.has("axes")) << op;
    ASSERT_EQ(n.inputs.size(), 2u) << op;
    const Tensor& t = *ctx.value(n.inputs[1]).constant;
    EXPECT_EQ(t.dtype(), DType::i64);
    EXPECT_EQ(values<int64_t>(t), (std::vector<int64_t>{-1, 0})) << op;
  }
  ir::Node none;  // no attribute: left as is (reduce all)
  none.op_type = "ReduceL2";
  none.opset = 13;
  none.inputs = {0};
  onnx_import::parsers().find("", "ReduceL2")->parse(none, ctx);
  EXPECT_EQ(none.inputs.size(), 1u);
  for (const char* op : {"ReduceProd", "ReduceMin", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
                         "ArgMax", "ArgMin"})
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
}

TEST(Reduce, UnsupportedDtypeNamesNode) {
  try {
    run_op("ReduceSum", {}, {make<bool>({2}, {true, false})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("ReduceSum node 'test_ReduceSum'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_op("ArgMax", {}, {make<bool>({1}, {true})}), Error);
  EXPECT_THROW(run_op("ReduceMean", {}, {make<bool>({1}, {true})}), Error);
}

}  // namespace
}  // namespace kiln

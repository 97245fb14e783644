// Tests for src/ops/activation.cpp and its parsers. Reference values for
// x = [-3, -1, -0.5, 0, 0.5, 1, 3] were computed in float64 with numpy 1.24
// (closed forms from the ONNX spec) and torch 1.13 (F.gelu with
// approximate='none'/'tanh', F.mish), printed to 9 significant digits.
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

const std::vector<float> kX{-3, -1, -0.5f, 0, 0.5f, 1, 3};

void expect_act(const char* op, std::map<std::string, ir::AttrValue> attrs, std::vector<double> want) {
  auto out = run_op(op, std::move(attrs), {make<float>({7}, kX)});
  ASSERT_EQ(out[0].dtype(), DType::f32);
  ASSERT_EQ(out[0].numel(), 7);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(out[0].data<float>()[i], want[i], 2e-6 * (1 + std::fabs(want[i]))) << op << " at x=" << kX[i];
}

TEST(Activation, ClosedForms) {
  expect_act("Relu", {}, {0, 0, 0, 0, 0.5, 1, 3});
  expect_act("LeakyRelu", {}, {-0.03, -0.01, -0.005, 0, 0.5, 1, 3});
  expect_act("LeakyRelu", {{"alpha", 0.5f}}, {-1.5, -0.5, -0.25, 0, 0.5, 1, 3});
  expect_act("Sigmoid", {}, {0.0474258732, 0.268941421, 0.377540669, 0.5, 0.622459331, 0.731058579, 0.952574127});
  expect_act("HardSigmoid", {}, {0, 0.3, 0.4, 0.5, 0.6, 0.7, 1});
  expect_act("HardSigmoid", {{"alpha", 0.5f}, {"beta", 0.1f}}, {0, 0, 0, 0.1, 0.35, 0.6, 1});
  expect_act("HardSwish", {}, {0, -0.333333333, -0.208333333, 0, 0.291666667, 0.666666667, 3});
  expect_act("Tanh", {}, {-0.995054754, -0.761594156, -0.462117157, 0, 0.462117157, 0.761594156, 0.995054754});
  expect_act("Elu", {}, {-0.950212932, -0.632120559, -0.39346934, 0, 0.5, 1, 3});
  expect_act("Elu", {{"alpha", 2.0f}}, {-1.90042586, -1.26424112, -0.786938681, 0, 0.5, 1, 3});
  expect_act("Selu", {}, {-1.67056873, -1.11133074, -0.69175819, 0, 0.525350511, 1.05070102, 3.15210307});
  expect_act("Celu", {{"alpha", 2.0f}}, {-1.55373968, -0.786938681, -0.442398434, 0, 0.5, 1, 3});
  expect_act("Softplus", {},
             {0.0485873516, 0.313261688, 0.474076984, 0.693147181, 0.974076984, 1.31326169, 3.04858735});
  expect_act("Softsign", {}, {-0.75, -0.5, -0.333333333, 0, 0.333333333, 0.5, 0.75});
  expect_act("Gelu", {}, {-0.00404969409, -0.158655254, -0.154268769, 0, 0.345731231, 0.841344746, 2.99595031});
  expect_act("Gelu", {{"approximate", std::string("tanh")}},
             {-0.00363739208, -0.158808009, -0.15428599, 0, 0.34571401, 0.841191991, 2.99636261});
  expect_act("Mish", {}, {-0.145647461, -0.303401461, -0.220743775, 0, 0.375245211, 0.865098388, 2.986535});
  expect_act("ThresholdedRelu", {}, {0, 0, 0, 0, 0, 0, 3});
  expect_act("ThresholdedRelu", {{"alpha", 0.25f}}, {0, 0, 0, 0, 0.5, 1, 3});
}

TEST(Activation, StableForLargeInputs) {
  auto out = run_op("Sigmoid", {}, {make<float>({2}, {-100, 100})});
  EXPECT_NEAR(out[0].data<float>()[0], 0.0f, 1e-30);
  EXPECT_EQ(out[0].data<float>()[1], 1.0f);
  out = run_op("Softplus", {}, {make<float>({2}, {100, -100})});  // numpy logaddexp(0, x): 100, 3.72e-44
  EXPECT_EQ(out[0].data<float>()[0], 100.0f);
  EXPECT_FALSE(std::isinf(out[0].data<float>()[0]));
  EXPECT_NEAR(out[0].data<float>()[1], 0.0f, 1e-40);
}

TEST(Activation, DoubleAndIntegerRelu) {
  auto d = run_op("Sigmoid", {}, {make<double>({1}, {1.0})});
  EXPECT_NEAR(d[0].data<double>()[0], 0.7310585786300049, 1e-15);
  auto i = run_op("Relu", {}, {make<int64_t>({3}, {-4, 0, 9})});
  EXPECT_EQ(values<int64_t>(i[0]), (std::vector<int64_t>{0, 0, 9}));
}

TEST(Activation, SixteenBitFloatsAndNarrowIntegers) {
  Tensor b(DType::bf16, {2});
  b.data<uint16_t>()[0] = 0x0000;  // 0
  b.data<uint16_t>()[1] = 0xc000;  // -2
  auto out = run_op("Sigmoid", {}, {b});
  ASSERT_EQ(out[0].dtype(), DType::bf16);
  EXPECT_EQ(out[0].data<uint16_t>()[0], 0x3f00);  // 0.5
  // sigmoid(-2) = 0.119202922; nearest bfloat16 is 0x3df4 (0.119140625).
  EXPECT_EQ(out[0].data<uint16_t>()[1], 0x3df4);
  auto c = run_op("Clip", {}, {make<int8_t>({3}, {-100, 5, 100}), make<int8_t>({}, {-10}), make<int8_t>({}, {10})});
  EXPECT_EQ(values<int8_t>(c[0]), (std::vector<int8_t>{-10, 5, 10}));
  auto r = run_op("Relu", {}, {make<int8_t>({2}, {-3, 3})});
  EXPECT_EQ(values<int8_t>(r[0]), (std::vector<int8_t>{0, 3}));
}

TEST(Activation, PReluBroadcastsSlope) {
  // Per-channel slope [2,1,1] against X [1,2,2,2].
  auto x = make<float>({1, 2, 2, 2}, {-1, 2, -3, 4, -5, 6, -7, 8});
  auto out = run_op("PRelu", {}, {x, make<float>({2, 1, 1}, {0.5f, 0.1f})});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{1, 2, 2, 2}));
  auto v = values<float>(out[0]);
  std::vector<float> want{-0.5f, 2, -1.5f, 4, -0.5f, 6, -0.7f, 8};
  for (size_t k = 0; k < want.size(); ++k) EXPECT_FLOAT_EQ(v[k], want[k]) << k;
  // Slope along the last dim, and a scalar slope.
  out = run_op("PRelu", {}, {make<float>({2, 2}, {-1, -1, -2, 3}), make<float>({2}, {2, 3})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-2, -3, -4, 3}));
  out = run_op("PRelu", {}, {make<float>({3}, {-1, 0, 1}), make<float>({1}, {0.25f})});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{-0.25f, 0, 1}));
  // A slope that does not broadcast to X is an error.
  EXPECT_THROW(run_op("PRelu", {}, {make<float>({2, 2}, {1, 2, 3, 4}), make<float>({3}, {1, 2, 3})}), Error);
}

TEST(Activation, ClipOptionalBounds) {
  auto x = make<float>({5}, {-2, -0.5f, 0, 0.5f, 2});
  auto lo = make<float>({}, {-1});
  auto hi = make<float>({}, {1});
  EXPECT_EQ(values<float>(run_op("Clip", {}, {x, lo, hi})[0]), (std::vector<float>{-1, -0.5f, 0, 0.5f, 1}));
  EXPECT_EQ(values<float>(run_op("Clip", {}, {x, Tensor(), hi})[0]), (std::vector<float>{-2, -0.5f, 0, 0.5f, 1}));
  EXPECT_EQ(values<float>(run_op("Clip", {}, {x, lo})[0]), (std::vector<float>{-1, -0.5f, 0, 0.5f, 2}));
  EXPECT_EQ(values<float>(run_op("Clip", {}, {x})[0]), (std::vector<float>{-2, -0.5f, 0, 0.5f, 2}));
  // min > max: every value becomes max.
  EXPECT_EQ(values<float>(run_op("Clip", {}, {x, hi, lo})[0]), (std::vector<float>{-1, -1, -1, -1, -1}));
  auto xi = make<int64_t>({4}, {-10, 3, 7, 100});
  EXPECT_EQ(values<int64_t>(run_op("Clip", {}, {xi, make<int64_t>({}, {0}), make<int64_t>({1}, {50})})[0]),
            (std::vector<int64_t>{0, 3, 7, 50}));
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

TEST(Activation, ClipOpset6AttributesBecomeInputs) {
  FakeParseContext ctx;
  ir::Value x;
  x.name = "x";
  x.dtype = DType::f64;
  ctx.values.push_back(x);
  ir::Node n;
  n.op_type = "Clip";
  n.name = "clip";
  n.opset = 9;
  n.inputs = {0};
  n.attrs["min"] = -0.5f;
  onnx_import::parsers().find("", "Clip")->parse(n, ctx);
  ASSERT_EQ(n.inputs.size(), 3u);
  EXPECT_FALSE(n.has("min"));
  const Tensor& lo = *ctx.value(n.inputs[1]).constant;
  const Tensor& hi = *ctx.value(n.inputs[2]).constant;
  EXPECT_EQ(lo.dtype(), DType::f64);
  EXPECT_EQ(lo.rank(), 0);
  EXPECT_EQ(lo.data<double>()[0], -0.5);
  EXPECT_EQ(hi.data<double>()[0], static_cast<double>(std::numeric_limits<float>::max()));
  // The rewritten node runs as Clip-13 would.
  auto out = run_op("Clip", {}, {make<double>({3}, {-1, 0, 1e300}), lo, hi});
  EXPECT_EQ(values<double>(out[0]),
            (std::vector<double>{-0.5, 0, static_cast<double>(std::numeric_limits<float>::max())}));
  // Opset 11+ nodes are left alone.
  ir::Node m = n;
  m.opset = 13;
  m.inputs = {0};
  onnx_import::parsers().find("", "Clip")->parse(m, ctx);
  EXPECT_EQ(m.inputs.size(), 1u);
}

TEST(Activation, GeluParserRejectsUnknownApproximation) {
  FakeParseContext ctx;
  ir::Node n;
  n.op_type = "Gelu";
  n.name = "g";
  n.opset = 20;
  n.attrs["approximate"] = std::string("fast");
  try {
    onnx_import::parsers().find("", "Gelu")->parse(n, ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Gelu node 'g'"), std::string::npos) << e.what();
  }
  for (const char* op : {"Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
                         "Celu", "Softplus", "Softsign", "Mish", "ThresholdedRelu"})
    EXPECT_NE(onnx_import::parsers().find("", op), nullptr) << op;
}

TEST(Activation, UnsupportedDtypeNamesNode) {
  try {
    run_op("Sigmoid", {}, {make<int64_t>({1}, {1})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Sigmoid node 'test_Sigmoid'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(run_op("Relu", {}, {make<bool>({1}, {true})}), Error);
  EXPECT_THROW(run_op("Clip", {}, {make<bool>({1}, {true})}), Error);
}

}  // namespace
}  // namespace kiln

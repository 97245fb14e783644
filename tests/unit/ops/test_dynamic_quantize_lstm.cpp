// Tests for src/ops/dynamic_quantize_lstm.cpp (com.microsoft
// DynamicQuantizeLSTM) and its parser. Expected values: onnxruntime 1.32.0's
// CPU kernel (one intra-op thread) on the inputs listed in
// dynamic_quantize_lstm_refs.inc, which gen_dynamic_quantize_lstm_refs.py
// writes. Tolerance: |kiln - ort| <= 1e-4 + 1e-3 |ort|.
#include <cmath>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;

/// One generated case: attributes, inputs (empty = absent) and ONNX Runtime's outputs.
struct DqLstmCase {
  const char* name;
  const char* direction;
  int64_t hidden;
  int64_t input_forget;
  float clip;  ///< 0: attribute absent
  std::vector<int64_t> x_shape;
  std::vector<float> x;
  bool is_signed;  ///< int8 weights (else uint8)
  std::vector<int32_t> w, r;
  std::vector<float> b;
  std::vector<int32_t> lens;
  std::vector<float> h0, c0, p;
  std::vector<int64_t> scale_shape;
  std::vector<float> w_scale;
  std::vector<int32_t> w_zp;
  std::vector<float> r_scale;
  std::vector<int32_t> r_zp;
  bool want_y;
  std::vector<float> y, yh, yc;
};

const DqLstmCase kCases[] = {
#include "dynamic_quantize_lstm_refs.inc"
};

/// An int8 or uint8 tensor from int values.
Tensor quant(bool is_signed, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  if (is_signed) return make<int8_t>(shape, std::vector<int8_t>(v.begin(), v.end()));
  return make<uint8_t>(shape, std::vector<uint8_t>(v.begin(), v.end()));
}

Tensor opt_f32(std::vector<int64_t> shape, const std::vector<float>& v) {
  return v.empty() ? Tensor() : make<float>(shape, v);
}

void expect_close(const Tensor& got, std::vector<int64_t> shape, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.dtype(), DType::f32) << what;
  ASSERT_EQ(got.shape(), shape) << what;
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want[i], 1e-4 + 1e-3 * std::fabs(want[i])) << what << " element " << i;
}

struct Built {
  std::map<std::string, ir::AttrValue> attrs;
  std::vector<Tensor> inputs;
  int64_t dirs, seq, batch;
};

Built build(const DqLstmCase& c) {
  Built o;
  o.attrs = {{"hidden_size", c.hidden}, {"direction", std::string(c.direction)}, {"input_forget", c.input_forget}};
  if (c.clip > 0) o.attrs["clip"] = c.clip;
  o.dirs = std::string(c.direction) == "bidirectional" ? 2 : 1;
  o.seq = c.x_shape[0];
  o.batch = c.x_shape[1];
  const int64_t inp = c.x_shape[2], h = c.hidden, gh = 4 * h;
  const std::vector<int64_t> state{o.dirs, o.batch, h};
  o.inputs = {make<float>(c.x_shape, c.x),
              quant(c.is_signed, {o.dirs, inp, gh}, c.w),
              quant(c.is_signed, {o.dirs, h, gh}, c.r),
              opt_f32({o.dirs, 2 * gh}, c.b),
              c.lens.empty() ? Tensor() : make<int32_t>({o.batch}, c.lens),
              opt_f32(state, c.h0),
              opt_f32(state, c.c0),
              opt_f32({o.dirs, 3 * h}, c.p),
              make<float>(c.scale_shape, c.w_scale),
              quant(c.is_signed, c.scale_shape, c.w_zp),
              make<float>(c.scale_shape, c.r_scale),
              quant(c.is_signed, c.scale_shape, c.r_zp)};
  return o;
}

std::vector<Tensor> run_dq(const std::map<std::string, ir::AttrValue>& attrs, const std::vector<Tensor>& inputs,
                           size_t outputs = 3) {
  return run_op("DynamicQuantizeLSTM", attrs, inputs, outputs, 1, "com.microsoft");
}

class DqLstmOrt : public ::testing::TestWithParam<size_t> {};

TEST_P(DqLstmOrt, MatchesOnnxRuntime) {
  const DqLstmCase& c = kCases[GetParam()];
  SCOPED_TRACE(c.name);
  Built b = build(c);
  std::vector<Tensor> out;
  if (c.want_y) {
    out = run_dq(b.attrs, b.inputs);
    expect_close(out[0], {b.seq, b.dirs, b.batch, c.hidden}, c.y, "Y");
  } else {
    // Y not wanted: the node's first output is absent (it changes the result, see the kernel's file comment).
    ir::Node node;
    node.op_type = "DynamicQuantizeLSTM";
    node.domain = "com.microsoft";
    node.name = "no_y";
    node.attrs = b.attrs;
    std::vector<const Tensor*> ptrs;
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      node.inputs.push_back(b.inputs[i].defined() ? static_cast<ir::ValueId>(i) : ir::kNoValue);
      ptrs.push_back(b.inputs[i].defined() ? &b.inputs[i] : nullptr);
    }
    node.outputs = {ir::kNoValue, 101, 102};
    ops::KernelContext ctx(node, ptrs, nullptr);
    ops::run_kernel(ctx);
    out = ctx.outputs();
    EXPECT_FALSE(out[0].defined());
  }
  expect_close(out[1], {b.dirs, b.batch, c.hidden}, c.yh, "Y_h");
  expect_close(out[2], {b.dirs, b.batch, c.hidden}, c.yc, "Y_c");
}

INSTANTIATE_TEST_SUITE_P(Cases, DqLstmOrt, ::testing::Range(size_t{0}, std::size(kCases)),
                         [](const ::testing::TestParamInfo<size_t>& i) { return std::string(kCases[i.param].name); });

TEST(DqLstm, CasesCoverTheBrief) {
  // The generated cases include every direction, both weight dtypes, per-tensor
  // and per-column scales, sequence_lens with a 0 entry and an absent Y.
  bool fwd = false, rev = false, bidi = false, i8 = false, u8 = false;
  bool col = false, tensor = false, len0 = false, no_y = false;
  for (const auto& c : kCases) {
    const std::string d = c.direction;
    fwd |= d == "forward";
    rev |= d == "reverse";
    bidi |= d == "bidirectional";
    i8 |= c.is_signed;
    u8 |= !c.is_signed;
    col |= c.scale_shape.size() == 2;
    tensor |= c.scale_shape.size() == 1;
    for (int32_t l : c.lens) len0 |= l == 0;
    no_y |= !c.want_y;
  }
  EXPECT_TRUE(fwd && rev && bidi && i8 && u8 && col && tensor && len0 && no_y);
}

TEST(DqLstm, RefusesBadQuantParams) {
  Built b = build(kCases[1]);  // per-column int8
  // A nonzero per-column int8 zero point (ONNX Runtime refuses it too).
  std::vector<int32_t> zp(kCases[1].w_zp);
  zp[3] = 2;
  std::vector<Tensor> in = b.inputs;
  in[9] = quant(true, kCases[1].scale_shape, zp);
  EXPECT_THROW(run_dq(b.attrs, in), Error);
  // Zero point shaped unlike its scale.
  in = b.inputs;
  in[9] = quant(true, {b.dirs}, std::vector<int32_t>(static_cast<size_t>(b.dirs), 0));
  EXPECT_THROW(run_dq(b.attrs, in), Error);
  // Zero point typed unlike its weight.
  in = b.inputs;
  in[11] = quant(false, kCases[1].scale_shape, kCases[1].r_zp);
  EXPECT_THROW(run_dq(b.attrs, in), Error);
  // Scale of the wrong length.
  in = b.inputs;
  in[8] = make<float>({b.dirs, 2}, {0.1f, 0.1f});
  EXPECT_THROW(run_dq(b.attrs, in), Error);
}

TEST(DqLstm, RefusesBadAttributesAndShapes) {
  Built b = build(kCases[2]);  // bidirectional
  auto attrs = b.attrs;
  attrs["activations"] = std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};  // 3, not 6
  EXPECT_THROW(run_dq(attrs, b.inputs), Error);
  attrs = b.attrs;
  attrs["layout"] = int64_t{1};
  EXPECT_THROW(run_dq(attrs, b.inputs), Error);
  attrs = b.attrs;
  attrs.erase("hidden_size");
  EXPECT_THROW(run_dq(attrs, b.inputs), Error);
  attrs = b.attrs;
  attrs["hidden_size"] = int64_t{3};  // W / R are for hidden 2
  EXPECT_THROW(run_dq(attrs, b.inputs), Error);
  std::vector<Tensor> in = b.inputs;
  in[4] = make<int32_t>({b.batch}, {5, 1, 0});  // longer than the sequence
  EXPECT_THROW(run_dq(b.attrs, in), Error);
}

TEST(DqLstm, ParserChecksAttributes) {
  struct NoContext : onnx_import::ParseContext {
    ir::ValueId add_constant(const std::string&, Tensor) override { return 0; }
    const ir::Value& value(ir::ValueId) const override { throw Error(ErrorCode::internal, "unused"); }
  } ctx;
  const auto* p = onnx_import::parsers().find("com.microsoft", "DynamicQuantizeLSTM");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->min_opset, 1);
  EXPECT_EQ(p->max_opset, 1);
  ir::Node n;
  n.op_type = "DynamicQuantizeLSTM";
  n.domain = "com.microsoft";
  n.name = "q";
  n.opset = 1;
  n.attrs["hidden_size"] = int64_t{4};
  EXPECT_NO_THROW(p->parse(n, ctx));
  n.attrs["layout"] = int64_t{1};
  EXPECT_THROW(p->parse(n, ctx), Error);
  n.attrs.erase("layout");
  n.attrs["direction"] = std::string("both");
  EXPECT_THROW(p->parse(n, ctx), Error);
  n.attrs.erase("direction");
  n.attrs.erase("hidden_size");
  EXPECT_THROW(p->parse(n, ctx), Error);
}

}  // namespace
}  // namespace kiln

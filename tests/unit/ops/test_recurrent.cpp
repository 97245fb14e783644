// Tests for src/ops/recurrent.cpp (RNN, GRU, LSTM). Expected values: the
// first RNN case by hand (h1 = tanh(0.5*1 + 0.1) = 0.5370497, h2 = tanh(0.5*2
// + 0.25*h1 + 0.1) = 0.8438112); all others were produced offline with
// onnxruntime 1.20.1 (CPU provider, opset 14, layout 0) on the inputs below
// (random values rounded to 2 decimals) and pasted in. The layout-1 case
// reuses an onnxruntime layout-0 case with inputs and outputs transposed.
#include <cmath>

#include "kiln/errors.h"
#include "onnx/parser.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

void expect_near(const Tensor& t, std::vector<int64_t> shape, std::vector<float> want, float tol = 2e-6f) {
  ASSERT_EQ(t.dtype(), DType::f32);
  ASSERT_EQ(t.shape(), shape);
  auto got = values<float>(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

/// Swaps the first two dims of a float tensor (layout 0 <-> layout 1).
Tensor swap01(const Tensor& t) {
  std::vector<int64_t> s = t.shape();
  std::swap(s[0], s[1]);
  Tensor o(DType::f32, s);
  const int64_t a = t.dim(0), b = t.dim(1), inner = t.numel() / (a * b);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < inner; ++k) o.data<float>()[(j * a + i) * inner + k] = t.data<float>()[(i * b + j) * inner + k];
  return o;
}

/// Y [seq, dirs, batch, h] -> [batch, seq, dirs, h].
std::vector<float> y_to_layout1(const std::vector<float>& y, int64_t seq, int64_t dirs, int64_t batch, int64_t h) {
  std::vector<float> o(y.size());
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t d = 0; d < dirs; ++d)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t k = 0; k < h; ++k) o[((b * seq + t) * dirs + d) * h + k] = y[((t * dirs + d) * batch + b) * h + k];
  return o;
}

TEST(Rnn, ForwardByHand) {
  auto out = run_op("RNN", {{"hidden_size", int64_t{1}}},
                    {make<float>({2, 1, 1}, {1.0f, 2.0f}), make<float>({1, 1, 1}, {0.5f}), make<float>({1, 1, 1}, {0.25f}), make<float>({1, 2}, {0.1f, 0.0f})}, 2);
  expect_near(out[0], {2, 1, 1, 1}, {0.5370497f, 0.8438112f});
  expect_near(out[1], {1, 1, 1}, {0.8438112f});
}

TEST(Rnn, BidirectionalSequenceLensInitialStateAndAlpha) {
  // Forward LeakyRelu (alpha 0.1), reverse Tanh; batch 1 stops after 2 steps.
  auto out = run_op("RNN",
                    {{"hidden_size", int64_t{2}},
                     {"direction", std::string("bidirectional")},
                     {"activations", std::vector<std::string>{"LeakyRelu", "Tanh"}},
                     {"activation_alpha", std::vector<float>{0.1f, 0.0f}}},
                    {make<float>({3, 2, 2}, {0.25f, 0.79f, 0.55f, -0.55f, -0.4f, 0.75f, -0.99f, 0.64f, 0.59f, -0.06f, -0.39f, -0.44f}), make<float>({2, 2, 2}, {-0.49f, -0.11f, 0.01f, 0.11f, 0.99f, 0.59f, 0.24f, 0.98f}), make<float>({2, 2, 2}, {-0.57f, -0.68f, 0.23f, -0.91f, -0.93f, 0.03f, -0.07f, 0.83f}), make<float>({2, 4}, {0.26f, 0.03f, -0.01f, -0.5f, -0.98f, -0.62f, 0.38f, -0.6f}), make<int32_t>({2}, {3, 2}), make<float>({2, 2, 2}, {-0.26f, -0.99f, 0.66f, -0.69f, -0.46f, 0.76f, 0.02f, 0.69f})}, 2);
  expect_near(out[0], {3, 2, 2, 2}, {0.862f, 0.4605f, 0.1339999f, 0.2547001f, 0.6445792f, -0.7433419f, 0.3694696f, -0.9445878f, -0.044098f, -0.0612295f, 0.4151239f, -0.06104571f, -0.7256812f, -0.750488f, -0.8337766f, -0.2534536f, 0.03427191f, -0.04251237f, 0.0f, 0.0f, 0.3793498f, -0.4415866f, 0.0f, 0.0f});
  expect_near(out[1], {2, 2, 2}, {0.03427191f, -0.04251237f, 0.4151239f, -0.06104571f, 0.6445792f, -0.7433419f, 0.3694696f, -0.9445878f});
}

TEST(Gru, ReverseWithSequenceLensAndClip) {
  auto out = run_op("GRU", {{"hidden_size", int64_t{2}}, {"direction", std::string("reverse")}, {"clip", 0.8f}},
                    {make<float>({3, 2, 2}, {0.28f, 0.48f, -0.82f, 0.08f, 0.02f, 0.74f, -0.28f, 0.2f, -0.88f, -0.22f, -0.35f, -0.7f}), make<float>({1, 6, 2}, {1.26f, -0.48f, 1.92f, 0.36f, 0.42f, 0.56f, 0.7f, -1.4f, -0.24f, -1.04f, -0.4f, -1.62f}), make<float>({1, 6, 2}, {1.88f, -1.14f, 0.68f, -0.8f, 1.5f, 0.64f, -1.48f, 1.38f, 1.78f, 1.62f, 0.28f, -1.42f}), make<float>({1, 12}, {-0.62f, 0.86f, 0.1f, -0.64f, 0.77f, 0.28f, 0.14f, -0.25f, -0.18f, -0.52f, -0.92f, 0.75f}), make<int32_t>({2}, {2, 3})}, 2);
  expect_near(out[0], {3, 1, 2, 2}, {-0.6002123f, -0.002460394f, 0.4734214f, 0.6115649f, -0.4581684f, -0.05424846f, 0.3470416f, 0.4947865f, 0.0f, 0.0f, 0.3722886f, 0.3837212f});
  expect_near(out[1], {1, 2, 2}, {-0.6002123f, -0.002460394f, 0.4734214f, 0.6115649f});
}

TEST(Gru, LinearBeforeResetWithInitialH) {
  auto out = run_op("GRU", {{"hidden_size", int64_t{2}}, {"linear_before_reset", int64_t{1}}},
                    {make<float>({2, 1, 3}, {-0.06f, 0.1f, -0.36f, 0.5f, -0.95f, -0.26f}), make<float>({1, 6, 3}, {-0.94f, -0.75f, 0.93f, 0.32f, -0.14f, 0.05f, 0.75f, -0.31f, 0.18f, 0.37f, -0.29f, 0.04f, 0.53f, 0.82f, -0.7f, 0.87f, -0.99f, 0.51f}), make<float>({1, 6, 2}, {0.62f, -0.73f, -0.16f, 0.63f, -0.97f, 0.26f, 0.59f, 0.03f, 0.45f, -0.55f, -0.6f, -0.27f}), make<float>({1, 12}, {-0.64f, -0.31f, 0.9f, 0.15f, -0.32f, -0.46f, 0.9f, -0.11f, 0.96f, 0.03f, 0.04f, 0.79f}), Tensor(), make<float>({1, 1, 2}, {0.49f, 0.16f})}, 2);
  expect_near(out[0], {2, 1, 1, 2}, {0.3121257f, -0.2305456f, 0.07717434f, 0.397242f});
  expect_near(out[1], {1, 1, 2}, {0.07717434f, 0.397242f});
}

Tensor lstm_bidi_x() { return make<float>({2, 2, 2}, {-0.15f, 0.76f, -0.18f, 0.85f, -0.86f, -0.14f, 0.04f, 0.9f}); }
Tensor lstm_bidi_h0() { return make<float>({2, 2, 2}, {-0.73f, 0.32f, 0.66f, -0.25f, -0.26f, 0.08f, -0.57f, -0.51f}); }
Tensor lstm_bidi_c0() { return make<float>({2, 2, 2}, {-0.34f, -0.09f, -0.84f, 0.51f, 0.16f, -0.4f, -0.84f, 0.53f}); }
std::vector<Tensor> lstm_bidi_weights() {
  return {make<float>({2, 8, 2}, {-0.5f, 0.61f, 0.35f, 0.43f, 0.26f, 0.94f, -0.33f, -0.2f, -0.59f, -0.9f, -0.57f, 0.83f, 0.68f, -0.78f, 0.21f, -0.04f, 0.19f, 0.32f, -0.39f, 0.92f, -0.07f, 0.26f, 0.27f, -0.63f, -0.88f, -0.18f, 0.53f, 0.63f, 0.46f, -0.77f, 0.83f, 0.6f}), make<float>({2, 8, 2}, {0.76f, 0.05f, 0.83f, -0.91f, -0.94f, -0.96f, -0.49f, -0.5f, -0.62f, 0.13f, -0.92f, 0.18f, -0.67f, 0.36f, -0.96f, -0.38f, 0.88f, 0.08f, 0.62f, 0.32f, 0.22f, -0.62f, 0.15f, -0.92f, 0.6f, 0.92f, 0.71f, -0.9f, -0.32f, -0.36f, -0.77f, 0.25f}), make<float>({2, 16}, {0.59f, -0.37f, 0.73f, 0.59f, -0.74f, 0.53f, 0.77f, -0.61f, 0.15f, 0.28f, 0.22f, -0.81f, 0.32f, 0.26f, 0.65f, 0.61f, -0.35f, 0.44f, 0.73f, 0.79f, -0.68f, -0.95f, 0.3f, -0.57f, 0.13f, 0.89f, -0.24f, -0.49f, -0.09f, 0.31f, -0.8f, -0.24f})};
}
Tensor lstm_bidi_p() { return make<float>({2, 6}, {-0.74f, -0.73f, -0.74f, -0.84f, 0.81f, -0.46f, -0.39f, 0.67f, 0.24f, -0.63f, -0.13f, 0.77f}); }
const std::vector<float> kLstmBidiY = {0.4036476f, 0.03687981f, 0.008105049f, -0.004242849f, -0.263985f, -0.3638322f, -0.3034936f, 0.0003909721f, 0.2589525f, -0.08872943f, 0.3686281f, -0.0116819f, -0.07622441f, -0.3868527f, -0.288358f, 0.172656f};
const std::vector<float> kLstmBidiYh = {0.2589525f, -0.08872943f, 0.3686281f, -0.0116819f, -0.263985f, -0.3638322f, -0.3034936f, 0.0003909721f};
const std::vector<float> kLstmBidiYc = {0.7518612f, -0.177152f, 0.4923726f, -0.02895648f, -0.399641f, -0.6566087f, -0.5530846f, 0.001027152f};

TEST(Lstm, BidirectionalPeepholesInitialState) {
  auto w = lstm_bidi_weights();
  auto out = run_op("LSTM", {{"hidden_size", int64_t{2}}, {"direction", std::string("bidirectional")}},
                    {lstm_bidi_x(), w[0], w[1], w[2], Tensor(), lstm_bidi_h0(), lstm_bidi_c0(), lstm_bidi_p()}, 3);
  expect_near(out[0], {2, 2, 2, 2}, kLstmBidiY);
  expect_near(out[1], {2, 2, 2}, kLstmBidiYh);
  expect_near(out[2], {2, 2, 2}, kLstmBidiYc);
}

TEST(Lstm, BatchMajorLayout) {
  auto w = lstm_bidi_weights();
  auto out = run_op("LSTM",
                    {{"hidden_size", int64_t{2}}, {"direction", std::string("bidirectional")}, {"layout", int64_t{1}}},
                    {swap01(lstm_bidi_x()), w[0], w[1], w[2], Tensor(), swap01(lstm_bidi_h0()),
                     swap01(lstm_bidi_c0()), lstm_bidi_p()},
                    3);
  expect_near(out[0], {2, 2, 2, 2}, y_to_layout1(kLstmBidiY, 2, 2, 2, 2));
  expect_near(out[1], {2, 2, 2}, values<float>(swap01(make<float>({2, 2, 2}, kLstmBidiYh))));
  expect_near(out[2], {2, 2, 2}, values<float>(swap01(make<float>({2, 2, 2}, kLstmBidiYc))));
}

TEST(Lstm, InputForget) {
  auto out = run_op("LSTM", {{"hidden_size", int64_t{2}}, {"input_forget", int64_t{1}}},
                    {make<float>({3, 2, 2}, {-0.25f, 0.42f, -0.81f, 0.45f, 0.55f, 0.65f, 0.35f, -0.26f, -0.87f, 0.04f, 0.51f, -0.62f}), make<float>({1, 8, 2}, {-0.47f, 0.07f, 0.5f, 0.79f, -0.75f, -0.63f, 0.6f, 0.29f, 0.44f, 0.99f, 0.88f, 0.69f, 0.55f, -0.21f, 0.28f, -0.63f}), make<float>({1, 8, 2}, {0.52f, 0.52f, 0.44f, -0.11f, -0.24f, -0.16f, -0.93f, 0.69f, 0.08f, -0.22f, 0.1f, 0.44f, -0.24f, 0.66f, 0.84f, -0.23f}), make<float>({1, 16}, {-0.72f, 0.52f, 0.99f, -0.7f, 0.43f, 0.65f, 0.84f, -0.75f, -0.82f, 0.98f, -0.77f, -0.65f, 0.15f, -0.11f, 0.5f, -0.62f})}, 3);
  expect_near(out[0], {3, 1, 2, 2}, {0.08510767f, -0.132791f, 0.1018644f, -0.09975268f, 0.09169605f, -0.1921936f, 0.1416754f, -0.1293907f, 0.2331953f, -0.07999691f, 0.1940082f, -0.106631f});
  expect_near(out[1], {1, 2, 2}, {0.2331953f, -0.07999691f, 0.1940082f, -0.106631f});
  expect_near(out[2], {1, 2, 2}, {0.3453732f, -0.9060615f, 0.366031f, -0.6311891f});
}

TEST(Lstm, Clip) {
  auto out = run_op("LSTM", {{"hidden_size", int64_t{2}}, {"clip", 0.3f}},
                    {make<float>({3, 2, 2}, {-0.25f, 0.42f, -0.81f, 0.45f, 0.55f, 0.65f, 0.35f, -0.26f, -0.87f, 0.04f, 0.51f, -0.62f}), make<float>({1, 8, 2}, {-0.47f, 0.07f, 0.5f, 0.79f, -0.75f, -0.63f, 0.6f, 0.29f, 0.44f, 0.99f, 0.88f, 0.69f, 0.55f, -0.21f, 0.28f, -0.63f}), make<float>({1, 8, 2}, {0.52f, 0.52f, 0.44f, -0.11f, -0.24f, -0.16f, -0.93f, 0.69f, 0.08f, -0.22f, 0.1f, 0.44f, -0.24f, 0.66f, 0.84f, -0.23f}), make<float>({1, 16}, {-0.72f, 0.52f, 0.99f, -0.7f, 0.43f, 0.65f, 0.84f, -0.75f, -0.82f, 0.98f, -0.77f, -0.65f, 0.15f, -0.11f, 0.5f, -0.62f})}, 3);
  expect_near(out[0], {3, 1, 2, 2}, {0.06606833f, -0.07055641f, 0.0708512f, -0.07055641f, 0.08202306f, -0.1095977f, 0.1019346f, -0.1095977f, 0.1323107f, -0.1175036f, 0.1267207f, -0.1312092f});
  expect_near(out[2], {1, 2, 2}, {0.2345367f, -0.2834735f, 0.2323925f, -0.3186913f});
}

TEST(Recurrent, RejectsBadInputs) {
  // W with the wrong gate count for LSTM (3*hidden rows instead of 4*hidden).
  Tensor x(DType::f32, {1, 1, 2}), w(DType::f32, {1, 6, 2}), r(DType::f32, {1, 6, 2});
  EXPECT_THROW(run_op("LSTM", {{"hidden_size", int64_t{2}}}, {x, w, r}, 3), Error);
  Tensor w3(DType::f32, {1, 2, 2}), r3(DType::f32, {1, 2, 2});
  EXPECT_THROW(run_op("RNN", {{"activations", std::vector<std::string>{"NoSuchFn"}}}, {x, w3, r3}, 2), Error);
  EXPECT_THROW(run_op("RNN", {{"direction", std::string("sideways")}}, {x, w3, r3}, 2), Error);
  // sequence_lens beyond the sequence length.
  EXPECT_THROW(run_op("RNN", {}, {x, w3, r3, Tensor(), make<int32_t>({1}, {5})}, 2), Error);
}

TEST(Recurrent, ParserDropsOutputSequenceAndChecksDirection) {
  struct NoContext : onnx_import::ParseContext {
    ir::ValueId add_constant(const std::string&, Tensor) override { return 0; }
    const ir::Value& value(ir::ValueId) const override { throw Error(ErrorCode::internal, "unused"); }
  } ctx;
  ir::Node n;
  n.op_type = "LSTM";
  n.name = "l";
  n.opset = 1;
  n.attrs["output_sequence"] = int64_t{1};
  auto* p = onnx_import::parsers().find("", "LSTM");
  ASSERT_NE(p, nullptr);
  p->parse(n, ctx);
  EXPECT_FALSE(n.has("output_sequence"));
  n.attrs["direction"] = std::string("both");
  EXPECT_THROW(p->parse(n, ctx), Error);
  EXPECT_NE(onnx_import::parsers().find("", "GRU"), nullptr);
  EXPECT_NE(onnx_import::parsers().find("", "RNN"), nullptr);
}

}  // namespace
}  // namespace kiln

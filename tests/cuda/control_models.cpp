// Models with an If or a Loop between convolutions, for conditional nodes
// in 16-bit, TF32 and channels-last programs, and the precision check's
// sigmoid head around an If (declared in cuda_models.h).
#include <cmath>
#include <string>
#include <tuple>

#include "cuda_models.h"

namespace kiln::testing {
namespace {

/// Graph attribute `attr` of node `n`, holding `body`'s graph.
void set_graph(onnx::NodeProto& n, const std::string& attr, ModelBuilder& body) {
  auto* a = n.add_attribute();
  a->set_name(attr);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = body.graph();
  a->mutable_g()->set_name(n.name() + "_" + attr);
}

std::vector<float> wave(size_t n, float scale, float phase) {
  std::vector<float> w(n);
  for (size_t i = 0; i < w.size(); ++i) w[i] = scale * std::sin(0.7f * static_cast<float>(i) + phase);
  return w;
}

/// x float32 [1,4,8,8] -> c = Conv(x, W1 [4,4,3,3], pads 1) (no bias: c
/// changes sign with x) -> r = Relu(c): the part both models share.
void conv_stem(ModelBuilder& b) {
  b.input("x", 1, {1, 4, 8, 8});
  b.initializer("W1", {4, 4, 3, 3}, wave(144, 0.2f, 0.3f));
  auto& c = b.node("Conv", {"x", "W1"}, {"c"}, "conv1");
  ModelBuilder::attr_ints(c, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"}, "relu1");
}

/// y = Conv(v, W3 [2,4,1,1]) [1,2,8,8]: a 1x1 convolution after the control
/// flow (a matmul in a channels-last region).
void conv_head(ModelBuilder& b, const std::string& v) {
  b.initializer("W3", {2, 4, 1, 1}, wave(8, 0.5f, 0.9f));
  b.node("Conv", {v, "W3"}, {"y"}, "conv3");
}

/// sigmoid_head_model's first half on x float32 [1,4,8,8]: a, b = 1x1 Conv
/// 'conv_a' / 'conv_b' + 100 (b's weights a's plus up to 0.05), near 100
/// where fp16's spacing is 1/16, differing by ~0.1.
void two_maps(ModelBuilder& b) {
  b.input("x", 1, {1, 4, 8, 8});
  std::vector<float> wa(32), wb(32), wc(32);
  for (int i = 0; i < 32; ++i) {
    wa[i] = std::sin(0.7f * i + 0.3f);
    wb[i] = wa[i] + 0.05f * std::cos(1.3f * i);
    wc[i] = 0.5f * std::sin(0.45f * i + 1.0f);
  }
  b.initializer("Wa", {8, 4, 1, 1}, wa);
  b.initializer("Wb", {8, 4, 1, 1}, wb);
  b.initializer("bias", {8}, std::vector<float>(8, 100.f));
  b.initializer("k", {}, {50.f});
  b.initializer("Wc", {4, 8, 1, 1}, wc);
  for (const char* y : {"a", "b"}) {
    auto& c = b.node("Conv", {"x", y == std::string("a") ? "Wa" : "Wb", "bias"}, {y}, std::string("conv_") + y);
    ModelBuilder::attr_ints(c, "kernel_shape", {1, 1});
  }
}

/// out = 1x1 Conv 'conv_out'(v, Wc) [1,4,8,8], the model's output.
void conv_out(ModelBuilder& b, const std::string& v) {
  auto& c = b.node("Conv", {v, "Wc"}, {"out"}, "conv_out");
  ModelBuilder::attr_ints(c, "kernel_shape", {1, 1});
  b.output("out", 1, {1, 4, 8, 8});
}

}  // namespace

ModelBuilder conv_if_model() {
  ModelBuilder b(17);
  conv_stem(b);
  b.initializer("zero", {}, {0.f});
  b.initializer("three", {}, {3.f});
  b.initializer("W2", {4, 4, 3, 3}, wave(144, 0.15f, 1.1f));
  b.initializer("B2", {4}, wave(4, 0.1f, 0.4f));
  auto& sum = b.node("ReduceSum", {"c"}, {"s"}, "sum");
  ModelBuilder::attr_int(sum, "keepdims", 0);
  b.node("Greater", {"s", "zero"}, {"cond"}, "positive");
  ModelBuilder then_b(17), else_b(17);
  auto& tc = then_b.node("Conv", {"r", "W2", "B2"}, {"t"}, "then_conv");  // reads the outer r
  ModelBuilder::attr_ints(tc, "pads", {1, 1, 1, 1});
  then_b.node("Relu", {"t"}, {"then_out"}, "then_relu");
  then_b.output("then_out", 1, {1, 4, 8, 8});
  else_b.node("Sigmoid", {"r"}, {"e"}, "else_sigmoid");
  else_b.node("Mul", {"e", "three"}, {"else_out"}, "else_mul");
  else_b.output("else_out", 1, {1, 4, 8, 8});
  auto& n = b.node("If", {"cond"}, {"branch"}, "if");
  set_graph(n, "then_branch", then_b);
  set_graph(n, "else_branch", else_b);
  conv_head(b, "branch");
  b.node("Add", {"branch", "r"}, {"z"}, "add");
  b.output("y", 1, {1, 2, 8, 8});
  b.output("z", 1, {1, 4, 8, 8});
  return b;
}

ModelBuilder conv_loop_model(int64_t trips) {
  ModelBuilder b(17);
  conv_stem(b);
  b.initializer_i64("M", {}, {trips});
  b.initializer("Wb", {4, 4, 3, 3}, wave(144, 0.15f, 0.8f));
  b.initializer("Bb", {4}, wave(4, 0.1f, 1.3f));
  b.initializer_i64("axes", {3}, {1, 2, 3});
  ModelBuilder body(17);
  body.input("i", 7, {});
  body.input("c_in", 9, {});
  body.input("x_in", 1, {1, 4, 8, 8});
  auto& k = body.node("Conv", {"x_in", "Wb", "Bb"}, {"k"}, "body_conv");
  ModelBuilder::attr_ints(k, "pads", {1, 1, 1, 1});
  body.node("Add", {"k", "r"}, {"a"}, "body_add");  // reads the outer r
  body.node("Tanh", {"a"}, {"x_out"}, "body_tanh");
  auto& rs = body.node("ReduceSum", {"x_out", "axes"}, {"row"}, "body_rowsum");
  ModelBuilder::attr_int(rs, "keepdims", 0);
  body.output("c_in", 9, {});
  body.output("x_out", 1, {1, 4, 8, 8});
  body.output("row", 1, {1});
  auto& n = b.node("Loop", {"M", "", "r"}, {"x_final", "rows"}, "loop");
  set_graph(n, "body", body);
  conv_head(b, "x_final");
  b.output("y", 1, {1, 2, 8, 8});
  b.output("rows", 1, {trips, 1});
  return b;
}

/// The sigmoid head (y = Sigmoid(50 (a - b)): 'sub', 'scale', 'sigmoid'),
/// then an If on the data: cond = ReduceSum(y) 'ysum' > 128 'positive';
/// then y * 2, else Tanh(y) -> branch; out = conv_out(branch).
ModelBuilder data_if_head_model() {
  ModelBuilder b(17);
  two_maps(b);
  b.node("Sub", {"a", "b"}, {"d"}, "sub");
  b.node("Mul", {"d", "k"}, {"s"}, "scale");
  b.node("Sigmoid", {"s"}, {"y"}, "sigmoid");
  auto& sum = b.node("ReduceSum", {"y"}, {"ysum"}, "ysum");
  ModelBuilder::attr_int(sum, "keepdims", 0);
  b.initializer("threshold", {}, {256.f});
  b.initializer("two", {}, {2.f});
  b.node("Greater", {"ysum", "threshold"}, {"cond"}, "positive");
  ModelBuilder then_b(17), else_b(17);
  then_b.node("Mul", {"y", "two"}, {"then_out"}, "then_mul");
  then_b.output("then_out", 1, {1, 8, 8, 8});
  else_b.node("Tanh", {"y"}, {"else_out"}, "else_tanh");
  else_b.output("else_out", 1, {1, 8, 8, 8});
  auto& n = b.node("If", {"cond"}, {"branch"}, "if");
  set_graph(n, "then_branch", then_b);
  set_graph(n, "else_branch", else_b);
  conv_out(b, "branch");
  return b;
}

/// The head's subtraction inside the branches of an If on an integer input
/// (flag int64 []: the same branch in both runs, no selection): then
/// Sigmoid(50 (a - b)), else Sigmoid(50 (b - a)) -> branch; out =
/// conv_out(branch). The If amplifies the rounding of the a and b it reads.
ModelBuilder flag_if_head_model() {
  ModelBuilder b(17);
  two_maps(b);
  b.input("flag", 7, {});
  b.initializer_i64("one", {}, {1});
  b.node("Equal", {"flag", "one"}, {"cond"}, "is_one");
  ModelBuilder then_b(17), else_b(17);
  for (auto [g, x, y, out] : {std::tuple{&then_b, "a", "b", "then_out"}, {&else_b, "b", "a", "else_out"}}) {
    const std::string p = out;
    g->node("Sub", {x, y}, {p + "_d"}, p + "_sub");
    g->node("Mul", {p + "_d", "k"}, {p + "_s"}, p + "_scale");
    g->node("Sigmoid", {p + "_s"}, {out}, p + "_sigmoid");
    g->output(out, 1, {1, 8, 8, 8});
  }
  auto& n = b.node("If", {"cond"}, {"branch"}, "if");
  set_graph(n, "then_branch", then_b);
  set_graph(n, "else_branch", else_b);
  conv_out(b, "branch");
  return b;
}

/// The sigmoid head -> out, beside a selection on nearly tied scores:
/// scores = Flatten(GlobalAveragePool(1x1 Conv 'conv_s'(x, Ws [64,4,1,1])))
/// [1,64], Ws's rows equal up to 1e-5 (the 64 scores tie within fp16's
/// rounding); (top, idx) = TopK 'topk'(scores, 4); feats = GatherElements
/// 'pick'(fe, idx, axis 1) [1,4], fe = Flatten(GlobalAveragePool(1x1 Conv
/// 'conv_f'(x, Wf [64,4,1,1]))) with rows far apart. Outputs out, top, feats.
ModelBuilder topk_tie_model() {
  ModelBuilder b(17);
  two_maps(b);
  b.node("Sub", {"a", "b"}, {"d"}, "sub");
  b.node("Mul", {"d", "k"}, {"s"}, "scale");
  b.node("Sigmoid", {"s"}, {"y"}, "sigmoid");
  conv_out(b, "y");
  std::vector<float> ws(64 * 4), wf(64 * 4);
  for (int c = 0; c < 64; ++c)
    for (int i = 0; i < 4; ++i) {
      ws[c * 4 + i] = 0.3f + 0.1f * i + 1e-5f * std::sin(1.7f * c + 0.9f * i);
      wf[c * 4 + i] = std::sin(0.61f * c + 1.1f * i);
    }
  b.initializer("Ws", {64, 4, 1, 1}, ws);
  b.initializer("Wf", {64, 4, 1, 1}, wf);
  b.initializer_i64("K", {1}, {4});
  for (auto [w, c, g, f] : {std::tuple{"Ws", "cs", "gs", "scores"}, {"Wf", "cf", "gf", "fe"}}) {
    auto& conv = b.node("Conv", {"x", w}, {c}, std::string("conv_") + (w[1] == 's' ? "s" : "f"));
    ModelBuilder::attr_ints(conv, "kernel_shape", {1, 1});
    b.node("GlobalAveragePool", {c}, {g}, std::string("gap_") + c);
    b.node("Flatten", {g}, {f}, std::string("flat_") + c);
  }
  auto& topk = b.node("TopK", {"scores", "K"}, {"top", "idx"}, "topk");
  ModelBuilder::attr_int(topk, "axis", 1);
  auto& pick = b.node("GatherElements", {"fe", "idx"}, {"feats"}, "pick");
  ModelBuilder::attr_int(pick, "axis", 1);
  b.output("top", 1, {1, 4});
  b.output("feats", 1, {1, 4});
  return b;
}

}  // namespace kiln::testing

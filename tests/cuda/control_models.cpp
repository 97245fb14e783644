// Models with an If or a Loop between convolutions, for conditional nodes
// in 16-bit, TF32 and channels-last programs (declared in cuda_models.h).
#include <cmath>

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

}  // namespace kiln::testing

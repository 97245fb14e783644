// Models with ONNX Loop and Scan for the cuda target's WHILE conditional
// nodes (lower_loop), and the cross-compile options the cuda tests share:
// declared in cuda_models.h.
#include <cmath>

#include "cuda_models.h"

namespace kiln::testing {
namespace {

/// Graph attribute `name` of node `n`, holding `body`'s graph.
void set_body(onnx::NodeProto& n, ModelBuilder& body) {
  auto* a = n.add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = body.graph();
  a->mutable_g()->set_name(n.name() + "_body");
}

std::vector<float> wave(size_t n, float scale, float phase) {
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = scale * std::sin(0.7f * static_cast<float>(i) + phase);
  return w;
}

}  // namespace

SessionOptions cross_options() {
  SessionOptions o;
  o.target = Target::cuda();
  o.arch = "sm_90";
  o.tuning = Tuning::heuristic;
  o.specialize_values = false;
  return o;
}

ModelBuilder scan_cumsum_model(int64_t steps, int64_t dim, bool reverse, int64_t out_axis, bool relu_after) {
  ModelBuilder b(17);
  b.input("init", 1, {dim});
  b.input("x", 1, {steps, dim});
  ModelBuilder body(17);
  body.input("sum_in", 1, {dim});
  body.input("x_t", 1, {dim});
  body.node("Add", {"sum_in", "x_t"}, {"sum_out"}, "accumulate");
  body.output("sum_out", 1, {dim});
  body.output("sum_out", 1, {dim});
  auto& n = b.node("Scan", {"init", "x"}, {"sum", "cum"}, "scan");
  ModelBuilder::attr_int(n, "num_scan_inputs", 1);
  if (reverse) ModelBuilder::attr_ints(n, "scan_input_directions", {1});
  if (out_axis) ModelBuilder::attr_ints(n, "scan_output_axes", {out_axis});
  set_body(n, body);
  if (relu_after) {  // the Scan's outputs are no graph outputs: their shapes come from inference
    b.node("Relu", {"sum"}, {"sum_r"}, "relu_sum");
    b.node("Relu", {"cum"}, {"cum_r"}, "relu_cum");
    b.output("sum_r");
    b.output("cum_r");
    return b;
  }
  b.output("sum", 1, {dim});
  b.output("cum", 1, out_axis ? std::vector<int64_t>{dim, steps} : std::vector<int64_t>{steps, dim});
  return b;
}

ModelBuilder loop_static_model(int64_t trips, int64_t batch, int64_t dim, bool typed_body) {
  ModelBuilder b(17);
  b.input("x0", 1, {batch, dim});
  b.initializer_i64("M", {}, {trips});
  b.initializer("W", {dim, dim}, wave(static_cast<size_t>(dim * dim), 0.3f, 0.2f));
  b.initializer("tenth", {}, {0.1f});
  b.initializer_i64("axes", {1}, {1});
  ModelBuilder body(17);
  body.input("i", 7, {});
  body.input("c_in", 9, {});
  // Untyped as exporters leave them: symbolic dims in, no types out.
  body.input("x_in", 1, typed_body ? std::vector<int64_t>{batch, dim} : std::vector<int64_t>{-1, -1});
  body.node("MatMul", {"x_in", "W"}, {"mm"}, "matmul");
  auto& cast = body.node("Cast", {"i"}, {"fi"}, "cast");
  ModelBuilder::attr_int(cast, "to", 1);
  body.node("Mul", {"fi", "tenth"}, {"s"}, "scale");
  body.node("Add", {"mm", "s"}, {"t"}, "shift");
  body.node("Tanh", {"t"}, {"x_out"}, "tanh");
  auto& rs = body.node("ReduceSum", {"x_out", "axes"}, {"row"}, "rowsum");
  ModelBuilder::attr_int(rs, "keepdims", 0);
  body.output("c_in", 9, {});
  if (typed_body) {
    body.output("x_out", 1, {batch, dim});
    body.output("row", 1, {batch});
  } else {
    body.output("x_out");
    body.output("row");
  }
  auto& n = b.node("Loop", {"M", "", "x0"}, {"x_final", "rows"}, "loop");
  set_body(n, body);
  b.output("x_final", 1, {batch, dim});
  b.output("rows", 1, {trips, batch});
  return b;
}

ModelBuilder loop_swap_model(int64_t trips, int64_t dim) {
  ModelBuilder b(17);
  b.input("a0", 1, {dim});
  b.input("b0", 1, {dim});
  b.initializer_i64("M", {}, {trips});
  ModelBuilder body(17);
  body.input("i", 7, {});
  body.input("c", 9, {});
  body.input("a_in", 1, {dim});
  body.input("b_in", 1, {dim});
  body.node("Add", {"a_in", "b_in"}, {"sum"}, "add");
  body.output("c", 9, {});
  body.output("b_in", 1, {dim});  // the next a is this iteration's b itself
  body.output("sum", 1, {dim});
  auto& n = b.node("Loop", {"M", "", "a0", "b0"}, {"a", "b"}, "fib");
  set_body(n, body);
  b.output("a", 1, {dim});
  b.output("b", 1, {dim});
  return b;
}

ModelBuilder loop_growing_model() {
  ModelBuilder b(17);
  b.input("x0", 1, {1, 4});
  b.initializer_i64("M", {}, {3});
  ModelBuilder body(17);
  body.input("i", 7, {});
  body.input("c", 9, {});
  body.input("x_in", 1, {-1, 4});
  auto& cat = body.node("Concat", {"x_in", "x_in"}, {"x_out"}, "grow");
  ModelBuilder::attr_int(cat, "axis", 0);
  body.output("c", 9, {});
  body.output("x_out");
  auto& n = b.node("Loop", {"M", "", "x0"}, {"x_final"}, "loop");
  set_body(n, body);
  b.node("Relu", {"x_final"}, {"y"}, "relu");
  b.output("y");
  return b;
}

ModelBuilder loop_while_model(int64_t dim, bool scan_output) {
  ModelBuilder b(17);
  b.input("x", 1, {dim});
  b.input("max_trips", 7, {});
  b.initializer("limit", {}, {100.f});
  b.initializer("zero", {}, {0.f});
  b.initializer("one", {}, {1.f});
  b.initializer("growth", {}, {1.5f});
  b.initializer("step", {}, {0.1f});
  b.node("Abs", {"x"}, {"a"}, "abs");
  auto& rs = b.node("ReduceSum", {"a"}, {"s"}, "sum");
  ModelBuilder::attr_int(rs, "keepdims", 0);
  b.node("Less", {"s", "limit"}, {"cond"}, "below");
  ModelBuilder body(17);
  body.input("i", 7, {});
  body.input("c_in", 9, {});
  body.input("x_in", 1, {dim});
  body.input("n_in", 1, {});
  body.node("Mul", {"x_in", "growth"}, {"g"}, "grow");
  body.node("Add", {"g", "step"}, {"x_out"}, "step");
  body.node("Abs", {"x_out"}, {"a2"}, "abs");
  auto& rs2 = body.node("ReduceSum", {"a2"}, {"s2"}, "sum");
  ModelBuilder::attr_int(rs2, "keepdims", 0);
  body.node("Less", {"s2", "limit"}, {"c_out"}, "below");
  body.node("Add", {"n_in", "one"}, {"n_out"}, "count");
  body.output("c_out", 9, {});
  body.output("x_out", 1, {dim});
  body.output("n_out", 1, {});
  if (scan_output) body.output("x_out", 1, {dim});
  std::vector<std::string> outs{"x_final", "count"};
  if (scan_output) outs.push_back("xs");
  auto& n = b.node("Loop", {"max_trips", "cond", "x", "zero"}, outs, "loop");
  set_body(n, body);
  b.output("x_final", 1, {dim});
  b.output("count", 1, {});
  if (scan_output) b.output("xs");
  return b;
}

}  // namespace kiln::testing

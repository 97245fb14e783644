// Small ONNX models for the cuda target's tests (cuda_models.h).
#include "cuda_models.h"

#include <cmath>

namespace kiln::testing {

void attr_float(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

namespace {
std::vector<float> ramp(int n, float scale, float offset) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(scale * std::sin(0.7f * i + offset));
  return v;
}

void add_kernel_nodes(ModelBuilder& b) {
  b.input("x", 1, {2, 4, 8});
  b.input("idx", 7, {3});
  b.initializer("half", {1}, {0.5f});
  b.initializer("c8", {8}, ramp(8, 0.3f, 0.1f));
  b.initializer("g8", {8}, ramp(8, 1.0f, 0.4f));
  b.initializer("b8", {8}, ramp(8, 0.2f, 1.1f));
  b.initializer("zero", {}, {0.f});
  b.initializer("one", {}, {1.f});
  b.initializer_i64("starts", {1}, {1});
  b.initializer_i64("ends", {1}, {6});
  b.initializer_i64("axis1", {1}, {1});
  b.initializer_i64("shape16", {1}, {16});
  b.node("Mul", {"x", "half"}, {"e1"});
  b.node("Add", {"e1", "c8"}, {"e2"});
  b.node("Tanh", {"e2"}, {"e3"});
  ModelBuilder::attr_int(b.node("Softmax", {"e3"}, {"soft"}), "axis", -1);
  ModelBuilder::attr_ints(b.node("Transpose", {"soft"}, {"tr"}), "perm", {0, 2, 1});
  ModelBuilder::attr_int(b.node("Gather", {"x", "idx"}, {"g"}), "axis", 1);
  ModelBuilder::attr_int(b.node("Concat", {"x", "g"}, {"cat"}), "axis", 1);
  b.node("Slice", {"cat", "starts", "ends", "axis1"}, {"sl"});
  auto& rm = b.node("ReduceMean", {"x"}, {"mean"});
  ModelBuilder::attr_ints(rm, "axes", {2});
  ModelBuilder::attr_int(rm, "keepdims", 1);
  b.node("Sub", {"x", "mean"}, {"centered"});
  auto& ln = b.node("LayerNormalization", {"centered", "g8", "b8"}, {"ln"});
  ModelBuilder::attr_int(ln, "axis", -1);
  attr_float(ln, "epsilon", 1e-5f);
  auto& rs = b.node("ReduceSum", {"x", "axis1"}, {"rsum"});
  ModelBuilder::attr_int(rs, "keepdims", 0);
  b.node("Reshape", {"rsum", "shape16"}, {"rs"});
  b.node("Greater", {"x", "zero"}, {"pos"});
  b.node("Exp", {"x"}, {"ex"});
  b.node("Sub", {"ex", "one"}, {"em1"});
  b.node("Where", {"pos", "x", "em1"}, {"wh"});
  b.output("soft", 1, {2, 4, 8}).output("tr", 1, {2, 8, 4}).output("sl", 1, {2, 5, 8});
  b.output("ln", 1, {2, 4, 8}).output("rs", 1, {16}).output("wh", 1, {2, 4, 8});
}
}  // namespace

ModelBuilder kernels_model() {
  ModelBuilder b(17);
  add_kernel_nodes(b);
  return b;
}

ModelBuilder matmul_model() {
  ModelBuilder b(17);
  add_kernel_nodes(b);
  b.initializer("W", {8, 8}, ramp(64, 0.25f, 0.3f));
  b.initializer("bias", {8}, ramp(8, 0.5f, 2.0f));
  b.initializer("W2", {5, 8}, ramp(40, 0.4f, 0.9f));
  b.initializer("C", {5}, ramp(5, 1.0f, 0.2f));
  b.initializer_i64("shape88", {2}, {8, 8});
  b.node("MatMul", {"x", "W"}, {"h"});
  b.node("Add", {"h", "bias"}, {"hb"});
  b.node("Relu", {"hb"}, {"mm"});
  b.node("MatMul", {"soft", "tr"}, {"bmm"});
  b.node("Reshape", {"x", "shape88"}, {"x88"});
  auto& g = b.node("Gemm", {"x88", "W2", "C"}, {"gm"});
  ModelBuilder::attr_int(g, "transB", 1);
  attr_float(g, "alpha", 0.5f);
  b.output("mm", 1, {2, 4, 8}).output("bmm", 1, {2, 4, 4}).output("gm", 1, {8, 5});
  return b;
}

}  // namespace kiln::testing

// recognize_gelu: before/after IR.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_util.h"
#include "kiln/session.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

// The form PyTorch exports for nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2)))
// as ((x * (1 + Erf(x / 1.4142135))) * 0.5).
ModelBuilder torch_gelu(float sqrt2 = 1.4142135f) {
  ModelBuilder b;
  b.input("x", 1, {2, 4});
  b.initializer("sqrt2", {}, {sqrt2});
  b.initializer("one", {}, {1.f});
  b.initializer("half", {}, {0.5f});
  b.node("Div", {"x", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"a"});
  b.node("Mul", {"x", "a"}, {"m"});
  b.node("Mul", {"m", "half"}, {"y"});
  b.output("y");
  return b;
}

TEST(RecognizeGelu, ReplacesTheErfForm) {
  ir::Model m = import_inferred(torch_gelu());
  EXPECT_EQ(passes::recognize_gelu(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Gelu"}));
  const ir::Node& g = m.main.nodes[0];
  EXPECT_EQ(g.inputs[0], value_named(m, "x"));
  EXPECT_EQ(g.outputs[0], value_named(m, "y"));
  EXPECT_EQ(g.s("approximate", ""), "none");
}

TEST(RecognizeGelu, OtherAssociationAndReciprocalScale) {
  // (x * 0.5) * (1 + Erf(x * 0.70710677))
  ModelBuilder b;
  b.input("x", 1, {3});
  b.initializer("inv", {}, {0.70710677f});
  b.initializer("one", {}, {1.f});
  b.initializer("half", {}, {0.5f});
  b.node("Mul", {"x", "inv"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"one", "e"}, {"a"});
  b.node("Mul", {"x", "half"}, {"h"});
  b.node("Mul", {"h", "a"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::recognize_gelu(m), 1);
  passes::eliminate_dead_code(m);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Gelu"}));
}

TEST(RecognizeGelu, IgnoresAnotherConstant) {
  ir::Model m = import_inferred(torch_gelu(2.f));  // x / 2 is not x / sqrt(2)
  EXPECT_EQ(passes::recognize_gelu(m), 0);
  EXPECT_EQ(m.main.nodes.size(), 5u);
}

TEST(RecognizeGelu, KeepsAnIntermediateWithAnotherReader) {
  ModelBuilder b = torch_gelu();
  b.output("e");  // the Erf output is also a graph output
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::recognize_gelu(m), 0);
}

// HF's gelu_new as ALBERT / GPT-2 export it:
// (x * 0.5) * (1 + Tanh((x + Pow(x, 3) * 0.044715) * 0.7978846)).
ModelBuilder tanh_gelu(float cubic = 0.044715f) {
  ModelBuilder b;
  b.input("x", 1, {4, 8});
  b.initializer("half", {}, {0.5f});
  b.initializer("three", {}, {3.f});
  b.initializer("cubic", {}, {cubic});
  b.initializer("scale", {}, {0.7978846f});
  b.initializer("one", {}, {1.f});
  b.node("Mul", {"x", "half"}, {"h"});
  b.node("Pow", {"x", "three"}, {"p"});
  b.node("Mul", {"p", "cubic"}, {"c"});
  b.node("Add", {"x", "c"}, {"a"});
  b.node("Mul", {"a", "scale"}, {"s"});
  b.node("Tanh", {"s"}, {"t"});
  b.node("Add", {"t", "one"}, {"o"});
  b.node("Mul", {"h", "o"}, {"y"});
  b.output("y");
  return b;
}

TEST(RecognizeGelu, ReplacesTheTanhForm) {
  ir::Model m = import_inferred(tanh_gelu());
  EXPECT_EQ(passes::recognize_gelu(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Gelu"}));
  EXPECT_EQ(m.main.nodes[0].inputs[0], value_named(m, "x"));
  EXPECT_EQ(m.main.nodes[0].s("approximate", ""), "tanh");
  ir::Model other = import_inferred(tanh_gelu(0.05f));  // not the tanh approximation's constant
  EXPECT_EQ(passes::recognize_gelu(other), 0);
}

TEST(RecognizeGelu, TanhFormOnCpuMatchesTheUnrewrittenGraphOnRef) {
  TempDir dir;
  tanh_gelu().save(dir / "gelu.onnx");
  Tensor x(DType::f32, {4, 8});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i) - 4.f;
  SessionOptions ref;
  ref.target = Target::ref();
  ref.use_cache = false;
  SessionOptions cpu = ref;
  cpu.target = Target::cpu();
  const Tensor want = Session(dir / "gelu.onnx", ref).run({{"x", x}}).at("y");
  const Tensor got = Session(dir / "gelu.onnx", cpu).run({{"x", x}}).at("y");
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 + 1e-4 * std::fabs(want.data<float>()[i])) << i;
  // By hand: gelu_tanh(1) = 0.5 (1 + tanh(0.7978846 * 1.044715)) = 0.8411920.
  EXPECT_NEAR(got.data<float>()[20], 0.8411920f, 1e-5);  // x[20] = 1
}

}  // namespace
}  // namespace kiln::testing

// recognize_gelu: before/after IR.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_util.h"
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

}  // namespace
}  // namespace kiln::testing

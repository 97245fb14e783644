// eliminate_common_subexpressions: before/after IR.
#include <gtest/gtest.h>

#include "graph_pass_util.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

// y = Relu(x) + Relu(x); z = x * c1 + x * c2 with c1, c2 equal constants.
ModelBuilder duplicates() {
  ModelBuilder b;
  b.input("x", 1, {2, 3});
  b.initializer("c1", {3}, {1.f, 2.f, 3.f});
  b.initializer("c2", {3}, {1.f, 2.f, 3.f});
  b.node("Relu", {"x"}, {"r1"}, "relu1");
  b.node("Relu", {"x"}, {"r2"}, "relu2");
  b.node("Add", {"r1", "r2"}, {"y"}, "add");
  b.node("Mul", {"x", "c1"}, {"m1"}, "mul1");
  b.node("Mul", {"x", "c2"}, {"m2"}, "mul2");
  b.node("Add", {"m1", "m2"}, {"z"}, "add2");
  b.output("y");
  b.output("z");
  return b;
}

TEST(CommonSubexpressions, MergesEqualNodesAndConstants) {
  ir::Model m = import_inferred(duplicates());
  ASSERT_EQ(m.main.nodes.size(), 6u);
  int merged = passes::eliminate_common_subexpressions(m);
  // c2 -> c1 (1), relu2 -> relu1 (1), mul2 -> mul1 (1, possible once c2 is c1).
  EXPECT_EQ(merged, 3);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Relu", "Add", "Mul", "Add"}));
  const ir::Node* add = producer(m, "y");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->inputs[0], add->inputs[1]);
  EXPECT_EQ(add->inputs[0], value_named(m, "r1"));
  const ir::Node* add2 = producer(m, "z");
  ASSERT_NE(add2, nullptr);
  EXPECT_EQ(add2->inputs[0], add2->inputs[1]);
  EXPECT_EQ(add2->inputs[0], value_named(m, "m1"));
  ir::verify(m);
}

TEST(CommonSubexpressions, KeepsNodesThatDiffer) {
  ModelBuilder b;
  b.input("x", 1, {4});
  b.initializer("c1", {1}, {1.f});
  b.initializer("c2", {1}, {2.f});
  b.node("Add", {"x", "c1"}, {"a"});
  b.node("Add", {"x", "c2"}, {"b"});  // other constant
  b.node("Sub", {"x", "c1"}, {"c"});  // other operator
  b.node("Add", {"c1", "x"}, {"d"});  // other input order
  b.node("Sum", {"a", "b", "c", "d"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::eliminate_common_subexpressions(m), 0);
  EXPECT_EQ(m.main.nodes.size(), 5u);
}

TEST(CommonSubexpressions, NeverMergesAGraphOutputAway) {
  ModelBuilder b;
  b.input("x", 1, {4});
  b.node("Relu", {"x"}, {"y1"});
  b.node("Relu", {"x"}, {"y2"});
  b.output("y1");
  b.output("y2");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::eliminate_common_subexpressions(m), 0);
  EXPECT_EQ(m.main.nodes.size(), 2u);
}

}  // namespace
}  // namespace kiln::testing

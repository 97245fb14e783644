// simplify_algebra: before/after IR.
#include <gtest/gtest.h>

#include "graph_pass_util.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

TEST(SimplifyAlgebra, BypassesNoOpNodes) {
  ModelBuilder b;
  b.input("x", 1, {2, 3});
  b.initializer("zero", {3}, {0.f, 0.f, 0.f});
  b.initializer("one", {1}, {1.f});
  b.initializer_i64("shape", {2}, {2, 3});
  b.node("Identity", {"x"}, {"i"});
  b.node("Add", {"i", "zero"}, {"a"});
  b.node("Mul", {"a", "one"}, {"m"});
  b.node("Reshape", {"m", "shape"}, {"r"});
  b.node("Relu", {"r"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::simplify_algebra(m), 4);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Relu"}));
  EXPECT_EQ(m.main.nodes[0].inputs[0], value_named(m, "x"));
}

TEST(SimplifyAlgebra, KeepsBroadcastingNeutralOps) {
  // x[3] + zeros[2,3] broadcasts x to [2,3]: not a no-op.
  ModelBuilder b;
  b.input("x", 1, {3});
  b.initializer("zero", {2, 3}, {0.f, 0.f, 0.f, 0.f, 0.f, 0.f});
  b.node("Add", {"x", "zero"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::simplify_algebra(m), 0);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Add"}));
}

TEST(SimplifyAlgebra, ComposesTransposes) {
  // inner perm [0,2,1,3] then outer [0,1,3,2]: out dim k reads inner dim
  // outer[k], which reads x dim inner[outer[k]] -> [0,2,3,1].
  ModelBuilder b;
  b.input("x", 1, {1, 2, 3, 4});
  ModelBuilder::attr_ints(b.node("Transpose", {"x"}, {"t1"}), "perm", {0, 2, 1, 3});
  ModelBuilder::attr_ints(b.node("Transpose", {"t1"}, {"y"}), "perm", {0, 1, 3, 2});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::simplify_algebra(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Transpose"}));
  EXPECT_EQ(m.main.nodes[0].inputs[0], value_named(m, "x"));
  EXPECT_EQ(m.main.nodes[0].ints("perm"), (std::vector<int64_t>{0, 2, 3, 1}));
  // x[1,2,3,4] permuted by [0,2,3,1] is [1,3,4,2], as inference said before.
  EXPECT_EQ(ir::to_sizes(*m.value(m.main.outputs[0]).shape), (std::vector<int64_t>{1, 3, 4, 2}));
}

TEST(SimplifyAlgebra, MergesReshapesWithAStaticTarget) {
  ModelBuilder b;
  b.input("x", 1, {2, 6});
  b.initializer_i64("s1", {3}, {2, 3, 2});
  b.initializer_i64("s2", {2}, {-1, 4});
  b.node("Reshape", {"x", "s1"}, {"r1"});
  b.node("Reshape", {"r1", "s2"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::simplify_algebra(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Reshape"}));
  const ir::Node& r = m.main.nodes[0];
  EXPECT_EQ(r.inputs[0], value_named(m, "x"));
  const Tensor& shape = *m.value(r.inputs[1]).constant;
  EXPECT_EQ(std::vector<int64_t>(shape.data<int64_t>(), shape.data<int64_t>() + shape.numel()),
            (std::vector<int64_t>{3, 4}));
}

TEST(SimplifyAlgebra, KeepsANoOpThatProducesAGraphOutput) {
  ModelBuilder b;
  b.input("x", 1, {2});
  b.node("Identity", {"x"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::simplify_algebra(m), 0);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Identity"}));
}

}  // namespace
}  // namespace kiln::testing

// fold_batch_norm: before/after IR, folded constants checked by hand.
#include <gtest/gtest.h>

#include "graph_pass_util.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

// BN with scale 3, bias 0.5, mean 1, var 3, epsilon 1: s = 3/sqrt(4) = 1.5,
// BN(y) = 1.5*(y - 1) + 0.5 = 1.5*y - 1.
void add_bn(ModelBuilder& b, const std::string& in, const std::string& out, int channels) {
  std::vector<float> scale(channels, 3.f), bias(channels, 0.5f), mean(channels, 1.f), var(channels, 3.f);
  b.initializer("bn_s", {channels}, scale);
  b.initializer("bn_b", {channels}, bias);
  b.initializer("bn_m", {channels}, mean);
  b.initializer("bn_v", {channels}, var);
  attr_float(b.node("BatchNormalization", {in, "bn_s", "bn_b", "bn_m", "bn_v"}, {out}), "epsilon", 1.f);
}

TEST(FoldBatchNorm, IntoConv) {
  // 1x1 conv, 2 -> 2 channels: W = [[1,2],[3,4]], b = [1,-1].
  ModelBuilder b;
  b.input("x", 1, {1, 2, 2, 2});
  b.initializer("w", {2, 2, 1, 1}, {1.f, 2.f, 3.f, 4.f});
  b.initializer("b", {2}, {1.f, -1.f});
  b.node("Conv", {"x", "w", "b"}, {"c"});
  add_bn(b, "c", "y", 2);
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::fold_batch_norm(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Conv"}));
  const ir::Node& conv = m.main.nodes[0];
  EXPECT_EQ(conv.outputs[0], value_named(m, "y"));
  // W' = 1.5 * W; b' = 1.5 * b - 1.
  EXPECT_EQ(constant_floats(m, conv.inputs[1]), (std::vector<float>{1.5f, 3.f, 4.5f, 6.f}));
  EXPECT_EQ(constant_floats(m, conv.inputs[2]), (std::vector<float>{0.5f, -2.5f}));
}

TEST(FoldBatchNorm, IntoGemmWithTransposedWeights) {
  // Y = A * B^T + C, B = [[1,0,2],[0,1,-1]] (N=2, K=3), C = [0.5, 1].
  ModelBuilder b;
  b.input("a", 1, {4, 3});
  b.initializer("w", {2, 3}, {1.f, 0.f, 2.f, 0.f, 1.f, -1.f});
  b.initializer("c", {2}, {0.5f, 1.f});
  ModelBuilder::attr_int(b.node("Gemm", {"a", "w", "c"}, {"g"}), "transB", 1);
  add_bn(b, "g", "y", 2);
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::fold_batch_norm(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Gemm"}));
  const ir::Node& g = m.main.nodes[0];
  EXPECT_EQ(constant_floats(m, g.inputs[1]), (std::vector<float>{1.5f, 0.f, 3.f, 0.f, 1.5f, -1.5f}));
  EXPECT_EQ(constant_floats(m, g.inputs[2]), (std::vector<float>{-0.25f, 0.5f}));  // 1.5*C - 1
}

TEST(FoldBatchNorm, KeepsABatchNormWhoseInputHasOtherReaders) {
  ModelBuilder b;
  b.input("x", 1, {1, 1, 2, 2});
  b.initializer("w", {1, 1, 1, 1}, {2.f});
  b.node("Conv", {"x", "w"}, {"c"});
  add_bn(b, "c", "y", 1);
  b.node("Relu", {"c"}, {"z"});
  b.output("y");
  b.output("z");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::fold_batch_norm(m), 0);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Conv", "BatchNormalization", "Relu"}));
}

}  // namespace
}  // namespace kiln::testing

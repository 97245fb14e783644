// The cpu lowering's passes one at a time (targets/cpu/compile/lowering.h),
// each checked before and after on the IR it rewrites: lower_ops,
// fuse_post_ops, fold_matmul_views, assign_layouts, pack_weights. The whole
// pipeline's results against ref are in test_cpu_target.cpp.
#include <gtest/gtest.h>

#include "../onnx/model_builder.h"
#include "../passes/graph_pass_util.h"
#include "cpu_test_models.h"
#include "kiln/session.h"
#include "passes/passes.h"
#include "targets/cpu/compile/lowering.h"
#include "targets/cpu/run/dnnl_util.h"

namespace kiln::testing {
namespace {

using namespace kiln::targets::cpu;

int count(const ir::Model& m, const std::string& op, const std::string& domain = "kiln.cpu") {
  int c = 0;
  for (auto& n : m.main.nodes) c += n.op_type == op && n.domain == domain;
  return c;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 13) - 6);
  return v;
}

/// Conv(x, w, b) -> Relu -> Add(x): a residual block, 16 channels, 8x8.
ModelBuilder residual_block() {
  ModelBuilder b(13);
  b.input("x", 1, {1, 16, 8, 8});
  b.initializer("w", {16, 16, 3, 3}, ramp(16 * 16 * 9, 0.01f));
  b.initializer("b", {16}, ramp(16, 0.1f));
  ModelBuilder::attr_ints(b.node("Conv", {"x", "w", "b"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  b.node("Add", {"r", "x"}, {"y"});
  b.output("y");
  return b;
}

TEST(CpuPasses, LowerOpsMakesKilnCpuNodes) {
  ir::Model m = import_inferred(residual_block());
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"Conv", "Relu", "Add"}));
  EXPECT_EQ(lower_ops(m), 3);
  EXPECT_EQ(count(m, "Conv"), 1);
  EXPECT_EQ(count(m, "Eltwise"), 1);
  EXPECT_EQ(count(m, "Binary"), 1);
  EXPECT_EQ(count(m, "Conv", ""), 0);
}

TEST(CpuPasses, EmptyTensorsStayOnTheReferenceKernels) {
  // A [0,8] x B [8,4] + bias: oneDNN's matmul planning divided by M = 0
  // (SIGFPE while compiling); the node stays ONNX, and the program runs.
  ModelBuilder b(17);
  b.input("a", 1, {0, 8});
  b.initializer("w", {8, 4}, ramp(32, 0.1f));
  b.initializer("c", {4}, ramp(4, 0.5f));
  b.node("MatMul", {"a", "w"}, {"h"});
  b.node("Add", {"h", "c"}, {"y"});
  b.output("y", 1, {0, 4});
  ir::Model m = import_inferred(b);
  EXPECT_EQ(lower_ops(m), 0);
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"MatMul", "Add"}));
  TempDir dir;
  b.save(dir / "empty.onnx");
  SessionOptions o;
  o.target = Target::cpu();
  o.use_cache = false;
  auto y = Session(dir / "empty.onnx", o).run({{"a", Tensor(DType::f32, {0, 8})}}).at("y");
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{0, 4}));
}

TEST(CpuPasses, FusePostOpsAbsorbsReluAndResidual) {
  ir::Model m = import_inferred(residual_block());
  lower_ops(m);
  EXPECT_EQ(fuse_post_ops(m), 2);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(m.main.nodes.size(), 1u);
  const ir::Node& conv = m.main.nodes[0];
  EXPECT_TRUE(is_cpu(conv, "Conv"));
  auto post = read_post_ops(conv);
  ASSERT_EQ(post.size(), 2u);  // eltwise relu, then binary add of x
  EXPECT_EQ(conv.outputs[0], value_named(m, "y"));
  EXPECT_EQ(conv.inputs.back(), value_named(m, "x")) << "the residual is read as a post-op operand";
  EXPECT_EQ(fuse_post_ops(m), 0) << "a second run finds nothing more";
}

TEST(CpuPasses, FoldMatmulViewsTakesTheTransposesIntoStrides) {
  ir::Model m = import_inferred(transposed_matmul());
  lower_ops(m);
  ASSERT_EQ(count(m, "MatMul"), 1);
  EXPECT_EQ(count(m, "Transpose", ""), 2);
  EXPECT_EQ(fold_matmul_views(m), 2);
  passes::eliminate_dead_code(m);
  EXPECT_EQ(count(m, "Transpose", ""), 0);
  ASSERT_EQ(m.main.nodes.size(), 1u);
  const ir::Node& mm = m.main.nodes[0];
  EXPECT_EQ(mm.inputs[0], value_named(m, "a")) << "the MatMul reads a itself, through strides";
  EXPECT_EQ(mm.outputs[0], value_named(m, "y")) << "and writes y itself";
}

TEST(CpuPasses, AssignLayoutsBlocksTheConvRegionWithReordersAtItsEdges) {
  ir::Model m = import_inferred(residual_block());
  lower_ops(m);
  fuse_post_ops(m);
  passes::eliminate_dead_code(m);
  const int reorders = assign_layouts(m);
  EXPECT_GT(reorders, 0) << "oneDNN's blocked convolution layout needs a reorder in or out";
  EXPECT_EQ(count(m, "Reorder"), reorders);
  // The graph still reads x and writes y in plain layout: the reorders sit at the edges.
  for (auto& n : m.main.nodes)
    if (is_cpu(n, "Reorder"))
      EXPECT_TRUE(n.inputs[0] == value_named(m, "x") || n.outputs[0] == value_named(m, "y")) << n.label();
}

TEST(CpuPasses, PackWeightsStoresTheLayoutThePrimitiveWants) {
  ir::Model m = import_inferred(residual_block());
  lower_ops(m);
  fuse_post_ops(m);
  assign_layouts(m);
  passes::eliminate_dead_code(m);
  const ir::Node* conv = nullptr;
  for (auto& n : m.main.nodes)
    if (is_cpu(n, "Conv")) conv = &n;
  ASSERT_NE(conv, nullptr);
  const ir::ValueId w_before = conv->inputs[1];
  EXPECT_EQ(pack_weights(m), 1);
  for (auto& n : m.main.nodes)
    if (is_cpu(n, "Conv")) conv = &n;
  EXPECT_NE(conv->inputs[1], w_before) << "the packed weights are a new constant";
  EXPECT_TRUE(m.value(conv->inputs[1]).constant.has_value());
  EXPECT_TRUE(conv->has("impl")) << "the oneDNN kernel the weights were packed for is recorded";
}

}  // namespace
}  // namespace kiln::testing

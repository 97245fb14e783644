// recognize_layernorm: before/after IR, and the rewritten graph's values on
// the cpu target (oneDNN's layer normalization) against the decomposed form
// on the ref target.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_util.h"
#include "kiln/session.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

/// The decomposed layer norm of x over its last axis (initializers "axes",
/// "eps" and, for Pow, "two" must exist): d = x - mean; d / sqrt(var + eps)
/// into `normed`, d*d instead of Pow(d, 2) when `mul_square`.
void add_normalisation(ModelBuilder& b, bool mul_square, const std::string& normed) {
  b.node("ReduceMean", {"x", "axes"}, {"mean"});
  b.node("Sub", {"x", "mean"}, {"d"});
  if (mul_square) b.node("Mul", {"d", "d"}, {"sq"});
  else b.node("Pow", {"d", "two"}, {"sq"});
  b.node("ReduceMean", {"sq", "axes"}, {"var"});
  b.node("Add", {"var", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"sd"});
  b.node("Div", {"d", "sd"}, {normed});
}

std::vector<float> ramp8(float base, float step) {
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = base + step * static_cast<float>(i);
  return v;
}

/// torch.onnx's LayerNorm before opset 17 (x [2, 3, 8], eps 1e-5), with
/// d*d instead of Pow(d, 2) when `mul_square`, and gamma / beta when `affine`.
ModelBuilder decomposed(bool mul_square = false, bool affine = true, int64_t axis = -1) {
  ModelBuilder b(13);
  b.input("x", 1, {2, 3, 8});
  b.initializer_i64("axes", {1}, {axis});
  b.initializer("two", {}, {2.f});
  b.initializer("eps", {}, {1e-5f});
  b.initializer("gamma", {8}, ramp8(0.5f, 0.1f));
  b.initializer("beta", {8}, ramp8(-0.2f, 0.05f));
  add_normalisation(b, mul_square, affine ? "n" : "y");
  if (affine) {
    b.node("Mul", {"n", "gamma"}, {"ng"});
    b.node("Add", {"ng", "beta"}, {"y"});
  }
  b.output("y");
  return b;
}

/// `b` (input x, output y) on the cpu target, where the pass runs, against
/// the ref target, which keeps the decomposed form; x [2, 3, 8] is
/// amplitude * sin(freq * i) + 0.1 (i % 5).
void expect_cpu_matches_ref(const ModelBuilder& b, float freq, float amplitude) {
  TempDir dir;
  b.save(dir / "ln.onnx");
  SessionOptions ref;
  ref.target = Target::ref();
  ref.use_cache = false;
  SessionOptions cpu = ref;
  cpu.target = Target::cpu();
  Tensor x(DType::f32, {2, 3, 8});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = amplitude * std::sin(freq * static_cast<float>(i)) + 0.1f * static_cast<float>(i % 5);
  auto want = Session(dir / "ln.onnx", ref).run({{"x", x}}).at("y");
  auto got = Session(dir / "ln.onnx", cpu).run({{"x", x}}).at("y");
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 + 1e-4 * std::fabs(want.data<float>()[i])) << i;
}

TEST(RecognizeLayerNorm, ReplacesTheDecomposedForm) {
  ir::Model m = import_inferred(decomposed());
  EXPECT_EQ(passes::recognize_layernorm(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"LayerNormalization"}));
  const ir::Node& ln = m.main.nodes[0];
  ASSERT_EQ(ln.inputs.size(), 3u);
  EXPECT_EQ(ln.inputs[0], value_named(m, "x"));
  EXPECT_EQ(ln.inputs[1], value_named(m, "gamma"));
  EXPECT_EQ(ln.inputs[2], value_named(m, "beta"));
  EXPECT_EQ(ln.outputs[0], value_named(m, "y"));
  EXPECT_EQ(ln.i("axis", 0), -1);
  EXPECT_FLOAT_EQ(ln.f("epsilon", 0.f), 1e-5f);
}

TEST(RecognizeLayerNorm, MulSquareWithoutAffineGetsUnitScale) {
  ir::Model m = import_inferred(decomposed(/*mul_square=*/true, /*affine=*/false));
  EXPECT_EQ(passes::recognize_layernorm(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"LayerNormalization"}));
  const ir::Node& ln = m.main.nodes[0];
  ASSERT_EQ(ln.inputs.size(), 2u);  // no B
  EXPECT_EQ(constant_floats(m, ln.inputs[1]), std::vector<float>(8, 1.f));
}

TEST(RecognizeLayerNorm, LeavesOtherAxesAndSharedIntermediatesAlone) {
  ir::Model first = import_inferred(decomposed(false, true, /*axis=*/1));  // over axis 1: not the last
  EXPECT_EQ(passes::recognize_layernorm(first), 0);
  // The variance is also a graph output: the chain must stay.
  ModelBuilder b = decomposed();
  b.output("var");
  ir::Model shared = import_inferred(b);
  EXPECT_EQ(passes::recognize_layernorm(shared), 0);
  // A gamma that does not hold one value per channel (broadcast over rows)
  // is not a LayerNorm's Scale: the normalisation alone is one, the Mul stays.
  ModelBuilder c(13);
  c.input("x", 1, {2, 3, 8});
  c.initializer_i64("axes", {1}, {-1});
  c.initializer("eps", {}, {1e-5f});
  c.initializer("gamma", {3, 1}, {1.f, 2.f, 3.f});
  add_normalisation(c, /*mul_square=*/true, "n");
  c.node("Mul", {"n", "gamma"}, {"y"});
  c.output("y");
  ir::Model rows = import_inferred(c);
  EXPECT_EQ(passes::recognize_layernorm(rows), 1);
  passes::eliminate_dead_code(rows);
  EXPECT_EQ(op_types(rows), (std::vector<std::string>{"LayerNormalization", "Mul"}));
}

TEST(RecognizeLayerNorm, RowShapedGammaAndDynamicBatchRunOnCpu) {
  // gamma and beta [1, 1, 8] and a symbolic batch dim: the LayerNormalization
  // gets [8] constants (the reference kernel it runs on with a dynamic shape
  // wants Scale and B of the normalised shape).
  ModelBuilder b(13);
  b.input("x", 1, {-1, 3, 8});
  b.initializer_i64("axes", {1}, {-1});
  b.initializer("eps", {}, {1e-5f});
  b.initializer("gamma", {1, 1, 8}, ramp8(1.f, 0.1f));
  b.initializer("beta", {1, 1, 8}, ramp8(0.f, 0.01f));
  add_normalisation(b, /*mul_square=*/true, "n");
  b.node("Mul", {"n", "gamma"}, {"ng"});
  b.node("Add", {"ng", "beta"}, {"y"});
  b.output("y");
  ir::Model m = import_inferred(b);
  EXPECT_EQ(passes::recognize_layernorm(m), 1);
  passes::eliminate_dead_code(m);
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"LayerNormalization"}));
  for (int k : {1, 2}) EXPECT_EQ(m.value(m.main.nodes[0].inputs[k]).constant->shape(), (std::vector<int64_t>{8}));
  expect_cpu_matches_ref(b, 0.3f, 2.f);
}

TEST(RecognizeLayerNorm, CpuTargetMatchesTheDecomposedFormOnRef) { expect_cpu_matches_ref(decomposed(), 0.7f, 3.f); }

}  // namespace
}  // namespace kiln::testing

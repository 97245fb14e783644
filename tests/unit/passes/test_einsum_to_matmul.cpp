// einsum_to_matmul: which Einsums become MatMul (and with which views), which
// stay, and values on the cpu target (the pass runs) against the ref target
// (it does not: the reference Einsum kernel, accumulating in double).
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_util.h"
#include "kiln/session.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

/// y = Einsum(a, b) with the given equation and input shapes (opset 17).
ModelBuilder einsum(const std::string& eq, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  ModelBuilder m;
  m.input("a", 1, a);
  m.input("b", 1, b);
  attr_string(m.node("Einsum", {"a", "b"}, {"y"}), "equation", eq);
  m.output("y");
  return m;
}

/// The op types after the pass and dead-code elimination; `rewritten` gets the pass's count.
std::vector<std::string> after_pass(const ModelBuilder& b, int& rewritten) {
  ir::Model m = import_inferred(b);
  rewritten = passes::einsum_to_matmul(m);
  ir::verify(m);
  passes::eliminate_dead_code(m);
  ir::verify(m);
  return op_types(m);
}

/// Deterministic values in about [-2, 2].
Tensor wave(const std::vector<int64_t>& shape, float f) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 2.f * std::sin(f * static_cast<float>(i) + 0.3f);
  return t;
}

/// y on cpu against ref, element by element.
void expect_cpu_matches_ref(const ModelBuilder& b, const std::vector<int64_t>& a_shape,
                            const std::vector<int64_t>& b_shape) {
  TempDir dir;
  b.save(dir / "einsum.onnx");
  std::map<std::string, Tensor> in{{"a", wave(a_shape, 0.37f)}, {"b", wave(b_shape, 0.61f)}};
  SessionOptions ref;
  ref.target = Target::ref();
  ref.use_cache = false;
  SessionOptions cpu = ref;
  cpu.target = Target::cpu();
  const Tensor want = Session(dir / "einsum.onnx", ref).run(in).at("y");
  const Tensor got = Session(dir / "einsum.onnx", cpu).run(in).at("y");
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_GT(want.numel(), 0);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 + 1e-4 * std::fabs(want.data<float>()[i]))
        << "element " << i;
}

TEST(EinsumToMatMul, AttentionScoresTransposeTheSecondOperand) {
  // MaxViT's "B G H I D, B G H J D -> B G H I J" (spaces as torch exports them).
  int n = 0;
  auto ops = after_pass(einsum("B G H I D, B G H J D -> B G H I J", {1, 2, 3, 5, 4}, {1, 2, 3, 6, 4}), n);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(ops, (std::vector<std::string>{"Transpose", "MatMul"}));
  ir::Model m = import_inferred(einsum("bhid,bhjd->bhij", {2, 3, 5, 4}, {2, 3, 6, 4}));
  passes::einsum_to_matmul(m);
  const ir::Node& t = m.main.nodes[0];
  EXPECT_EQ(t.ints("perm"), (std::vector<int64_t>{0, 1, 3, 2}));
  EXPECT_EQ(t.inputs[0], value_named(m, "b"));
  const ir::Node& mm = m.main.nodes[1];
  EXPECT_EQ(mm.inputs[0], value_named(m, "a"));
  EXPECT_EQ(mm.inputs[1], t.outputs[0]);
  EXPECT_EQ(mm.outputs[0], value_named(m, "y"));
}

TEST(EinsumToMatMul, AttentionContextIsAPlainMatMul) {
  int n = 0;
  EXPECT_EQ(after_pass(einsum("bhij,bhjd->bhid", {2, 3, 5, 6}, {2, 3, 6, 4}), n), (std::vector<std::string>{"MatMul"}));
  EXPECT_EQ(n, 1);
}

TEST(EinsumToMatMul, MergesGroupsAndReordersTheOutput) {
  // M = a b (merged by a Reshape), K = c d, N = e; output wants e first.
  int n = 0;
  auto ops = after_pass(einsum("abcd,cde->eab", {2, 3, 4, 5}, {4, 5, 6}), n);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(ops, (std::vector<std::string>{"Reshape", "Reshape", "MatMul", "Reshape", "Transpose"}));
}

TEST(EinsumToMatMul, LeavesWhatIsNotAGemm) {
  int n = 0;
  // A diagonal, a label summed within one input, size-1 broadcasting between the inputs, one operand.
  EXPECT_EQ(after_pass(einsum("ii,i->i", {3, 3}, {3}), n), (std::vector<std::string>{"Einsum"}));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(after_pass(einsum("ij,jk->k", {2, 3}, {3, 4}), n), (std::vector<std::string>{"Einsum"}));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(after_pass(einsum("bij,bjk->bik", {1, 2, 3}, {4, 3, 5}), n), (std::vector<std::string>{"Einsum"}));
  EXPECT_EQ(n, 0);
  ModelBuilder one;
  one.input("a", 1, {2, 3});
  attr_string(one.node("Einsum", {"a"}, {"y"}), "equation", "ij->ji");
  one.output("y");
  EXPECT_EQ(after_pass(one, n), (std::vector<std::string>{"Einsum"}));
  EXPECT_EQ(n, 0);
}

TEST(EinsumToMatMul, CpuMatchesRefForEveryGrouping) {
  struct Case {
    std::string eq;
    std::vector<int64_t> a, b;
  };
  const std::vector<Case> cases = {
      {"B G H I D, B G H J D -> B G H I J", {1, 2, 3, 5, 4}, {1, 2, 3, 6, 4}},
      {"B G H I J, B G H J D -> B G H I D", {1, 2, 3, 5, 6}, {1, 2, 3, 6, 4}},
      {"ij,jk", {3, 4}, {4, 5}},                  // implicit output "ik"
      {"abcd,cde->eab", {2, 3, 4, 5}, {4, 5, 6}},  // merged groups, output transposed
      {"bik,bjk->bji", {2, 3, 4}, {2, 5, 4}},      // transposed output
      {"i,i->", {7}, {7}},                         // dot product: a scalar
      {"i,j->ij", {3}, {4}},                       // outer product: K empty
      {"...ij,...jk->...ik", {2, 3, 4}, {2, 4, 5}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.eq);
    int n = 0;
    after_pass(einsum(c.eq, c.a, c.b), n);
    EXPECT_EQ(n, 1);
    expect_cpu_matches_ref(einsum(c.eq, c.a, c.b), c.a, c.b);
  }
}

}  // namespace
}  // namespace kiln::testing

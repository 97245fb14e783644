// recognize_attention: before/after IR for the eager and the
// scaled_dot_product_attention export forms, what the cpu lowering makes of
// the result (two matmuls and a softmax, the scale and mask as post-ops),
// and values on the cpu target against the unrewritten graph on ref.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_util.h"
#include "kiln/session.h"
#include "passes/passes.h"
#include "targets/cpu/compile/lowering.h"

namespace kiln::testing {
namespace {

constexpr int64_t B = 2, H = 3, S = 5, D = 4;

/// Where the scalings of the SDPA form sit.
enum class Form {
  eager,         ///< (Q K^T) / 2
  sdpa,          ///< (Q * c) (K^T * c), c = 1/sqrt(sqrt(D))
  sdpa_k_first,  ///< (Q * c) Transpose(K * c)
  sdpa_and_div,  ///< ((Q * c) (K^T * c)) / 2: two scalings to merge
};

/// Attention over q, k, v [B, H, S, D] with an additive mask [B, 1, 1, S]
/// into y [B, H, S, D], in the given form, at opset 17.
ModelBuilder attention(Form form, int64_t softmax_axis = -1) {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
  b.input("mask", 1, {B, 1, 1, S});
  const float c = 1.f / std::sqrt(std::sqrt(static_cast<float>(D)));
  b.initializer("c", {}, {c});
  b.initializer("two", {}, {2.f});
  std::string scores = "qk";
  switch (form) {
    case Form::eager:
      ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
      b.node("MatMul", {"q", "kt"}, {"qk"});
      break;
    case Form::sdpa:
    case Form::sdpa_and_div:
      b.node("Mul", {"q", "c"}, {"qs"});
      ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
      b.node("Mul", {"kt", "c"}, {"ks"});
      b.node("MatMul", {"qs", "ks"}, {"qk"});
      break;
    case Form::sdpa_k_first:
      b.node("Mul", {"c", "q"}, {"qs"});
      b.node("Mul", {"k", "c"}, {"kc"});
      ModelBuilder::attr_ints(b.node("Transpose", {"kc"}, {"ks"}), "perm", {0, 1, 3, 2});
      b.node("MatMul", {"qs", "ks"}, {"qk"});
      break;
  }
  if (form == Form::eager || form == Form::sdpa_and_div) {
    b.node("Div", {"qk", "two"}, {"scaled"});
    scores = "scaled";
  }
  b.node("Add", {scores, "mask"}, {"masked"});
  ModelBuilder::attr_int(b.node("Softmax", {"masked"}, {"p"}), "axis", softmax_axis);
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  return b;
}

/// The multiplier of the scalar Mul that reads the Q K^T MatMul's output.
float scale_after_scores(const ir::Model& m) {
  for (auto& n : m.main.nodes) {
    if (n.op_type != "Mul") continue;
    const ir::Node* p = nullptr;
    for (auto& c : m.main.nodes)
      if (!c.outputs.empty() && c.outputs[0] == n.inputs[0]) p = &c;
    if (p && p->op_type == "MatMul") return constant_floats(m, n.inputs[1]).at(0);
  }
  return NAN;
}

TEST(RecognizeAttention, EagerFormIsRecognisedAndLeftAsItIs) {
  ir::Model m = import_inferred(attention(Form::eager));
  auto before = op_types(m);
  passes::AttentionStats st = passes::recognize_attention(m);
  EXPECT_EQ(st.blocks, 1);
  EXPECT_EQ(st.rewritten, 0);
  EXPECT_EQ(op_types(m), before);
}

TEST(RecognizeAttention, SdpaFormMovesBothScalingsOntoTheScores) {
  for (Form form : {Form::sdpa, Form::sdpa_k_first}) {
    ir::Model m = import_inferred(attention(form));
    passes::AttentionStats st = passes::recognize_attention(m);
    EXPECT_EQ(st.blocks, 1);
    EXPECT_EQ(st.rewritten, 1);
    passes::eliminate_dead_code(m);
    ir::verify(m);
    EXPECT_EQ(op_types(m), (std::vector<std::string>{"Transpose", "MatMul", "Mul", "Add", "Softmax", "MatMul"}))
        << (form == Form::sdpa ? "sdpa" : "sdpa_k_first");
    // c * c = 1/sqrt(D) = 0.5
    EXPECT_FLOAT_EQ(scale_after_scores(m), 0.5f);
    // The Q K^T MatMul reads q itself and the transpose of the unscaled k.
    const ir::Node* mm = nullptr;
    for (auto& n : m.main.nodes)
      if (n.op_type == "MatMul" && n.inputs[0] == value_named(m, "q")) mm = &n;
    ASSERT_NE(mm, nullptr);
    const ir::Node* kt = nullptr;
    for (auto& n : m.main.nodes)
      if (n.outputs[0] == mm->inputs[1]) kt = &n;
    ASSERT_NE(kt, nullptr);
    EXPECT_EQ(kt->op_type, "Transpose");
    EXPECT_EQ(kt->inputs[0], value_named(m, "k"));
  }
}

TEST(RecognizeAttention, ScalingsMergeIntoTheScoresDiv) {
  ir::Model m = import_inferred(attention(Form::sdpa_and_div));
  passes::AttentionStats st = passes::recognize_attention(m);
  EXPECT_EQ(st.rewritten, 1);
  passes::eliminate_dead_code(m);
  ir::verify(m);
  // The Div by 2 became a Mul by 0.5 * (c * c) = 0.25; no other scaling is left.
  EXPECT_EQ(op_types(m), (std::vector<std::string>{"Transpose", "MatMul", "Mul", "Add", "Softmax", "MatMul"}));
  EXPECT_FLOAT_EQ(scale_after_scores(m), 0.25f);
}

TEST(RecognizeAttention, SoftmaxOverAnotherAxisIsNotAttention) {
  ir::Model m = import_inferred(attention(Form::sdpa, /*softmax_axis=*/2));
  auto before = op_types(m);
  passes::AttentionStats st = passes::recognize_attention(m);
  EXPECT_EQ(st.blocks, 0);
  EXPECT_EQ(op_types(m), before);
}

TEST(RecognizeAttention, ScaledQueryWithAnotherReaderStays) {
  ModelBuilder b = attention(Form::sdpa);
  b.output("qs");  // the scaled Q is also a graph output: its Mul must stay
  ir::Model m = import_inferred(b);
  passes::AttentionStats st = passes::recognize_attention(m);
  EXPECT_EQ(st.blocks, 1);
  EXPECT_EQ(st.rewritten, 1);  // K's scaling still moves
  passes::eliminate_dead_code(m);
  // One Mul scales Q (kept), one scales the scores by c (K's share).
  int muls = 0;
  for (auto& n : m.main.nodes) muls += n.op_type == "Mul";
  EXPECT_EQ(muls, 2);
  const float c = 1.f / std::sqrt(std::sqrt(static_cast<float>(D)));
  EXPECT_FLOAT_EQ(scale_after_scores(m), c);
}

TEST(RecognizeAttention, CpuLoweringRunsTheBlockAsTwoMatmulsAndASoftmax) {
  ir::Model m = import_inferred(attention(Form::sdpa));
  passes::recognize_attention(m);
  passes::eliminate_dead_code(m);
  targets::cpu::lower_for_cpu(m);
  // The scale and the mask are post-ops of the first matmul and the K
  // transpose is its weights' strides: nothing else is left.
  ASSERT_EQ(op_types(m), (std::vector<std::string>{"kiln.cpu.MatMul", "kiln.cpu.Softmax", "kiln.cpu.MatMul"}));
  const ir::Node& scores = m.main.nodes[0];
  // Post-ops: scores * 0.5 (eltwise linear), then + mask.
  auto post = targets::cpu::read_post_ops(scores);
  ASSERT_EQ(post.size(), 2u);
  EXPECT_EQ(post[0].kind, targets::cpu::PostOp::eltwise);
  EXPECT_EQ(post[0].alg, static_cast<int64_t>(dnnl::algorithm::eltwise_linear));
  EXPECT_FLOAT_EQ(post[0].alpha, 0.5f);
  EXPECT_EQ(post[1].kind, targets::cpu::PostOp::binary);
  EXPECT_EQ(post[1].alg, static_cast<int64_t>(dnnl::algorithm::binary_add));
}

/// Every form on the cpu target (the pass runs) against the ref target (it
/// does not), with a mask that blanks one key per image.
TEST(RecognizeAttention, CpuValuesMatchRefInEveryForm) {
  auto fill = [](int64_t n, float f, float a) {
    Tensor t(DType::f32, {B, H, S, D});
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = a * std::sin(f * static_cast<float>(i) + 0.3f);
    return t;
  };
  const int64_t n = B * H * S * D;
  std::map<std::string, Tensor> in{{"q", fill(n, 0.37f, 1.5f)}, {"k", fill(n, 0.61f, 1.2f)}, {"v", fill(n, 0.23f, 2.f)}};
  Tensor mask(DType::f32, {B, 1, 1, S});
  for (int64_t i = 0; i < B * S; ++i) mask.data<float>()[i] = i % S == (i / S) + 1 ? -1e4f : 0.f;
  in["mask"] = mask;
  for (Form form : {Form::eager, Form::sdpa, Form::sdpa_k_first, Form::sdpa_and_div}) {
    TempDir dir;
    attention(form).save(dir / "att.onnx");
    SessionOptions ref;
    ref.target = Target::ref();
    ref.use_cache = false;
    SessionOptions cpu = ref;
    cpu.target = Target::cpu();
    auto want = Session(dir / "att.onnx", ref).run(in).at("y");
    auto got = Session(dir / "att.onnx", cpu).run(in).at("y");
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 + 1e-4 * std::fabs(want.data<float>()[i]))
          << "form " << static_cast<int>(form) << " element " << i;
  }
}

}  // namespace
}  // namespace kiln::testing

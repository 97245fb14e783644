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


// ---- Adversarial cases: cpu (the pass runs) against ref (it does not) -------------------------

/// Deterministic input of the given shape and dtype (f32, f64 or f16 by ONNX elem type).
Tensor wave(const std::vector<int64_t>& shape, float f, float a, float offset = 0.3f) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = a * std::sin(f * static_cast<float>(i) + offset);
  return t;
}

/// Runs the pass on the imported model and checks the IR; returns its stats.
passes::AttentionStats run_pass(const ModelBuilder& b) {
  ir::Model m = import_inferred(b);
  passes::AttentionStats st = passes::recognize_attention(m);
  ir::verify(m);
  passes::eliminate_dead_code(m);
  ir::verify(m);
  return st;
}

/// Every output of b on cpu against ref, element by element.
void expect_cpu_matches_ref(const ModelBuilder& b, const std::map<std::string, Tensor>& in,
                            const std::vector<std::string>& outs = {"y"}) {
  TempDir dir;
  b.save(dir / "att.onnx");
  SessionOptions ref;
  ref.target = Target::ref();
  ref.use_cache = false;
  SessionOptions cpu = ref;
  cpu.target = Target::cpu();
  auto want = Session(dir / "att.onnx", ref).run(in);
  auto got = Session(dir / "att.onnx", cpu).run(in);
  for (auto& o : outs) {
    const Tensor& w = want.at(o);
    const Tensor& g = got.at(o);
    ASSERT_EQ(g.shape(), w.shape()) << o;
    ASSERT_EQ(g.dtype(), w.dtype()) << o;
    ASSERT_EQ(w.dtype(), DType::f32) << o;
    int bad = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      float x = w.data<float>()[i], y = g.data<float>()[i];
      bool ok = std::fabs(y - x) <= 1e-5 + 1e-4 * std::fabs(x) || (std::isnan(x) && std::isnan(y));
      if (!ok && bad++ < 5) ADD_FAILURE() << o << "[" << i << "]: cpu " << y << " ref " << x;
    }
    EXPECT_EQ(bad, 0) << o;
  }
}

/// Standard inputs q, k, v [B, H, S, D] and mask [B, 1, 1, S].
std::map<std::string, Tensor> qkv_inputs(const std::vector<int64_t>& shape = {B, H, S, D}, bool mask = true) {
  std::map<std::string, Tensor> in{
      {"q", wave(shape, 0.37f, 1.5f)}, {"k", wave(shape, 0.61f, 1.2f)}, {"v", wave(shape, 0.23f, 2.f)}};
  if (mask) {
    Tensor t(DType::f32, {B, 1, 1, S});
    for (int64_t i = 0; i < B * S; ++i) t.data<float>()[i] = i % S == (i / S) + 1 ? -1e4f : 0.f;
    in["mask"] = t;
  }
  return in;
}

/// SDPA form over 4-D q, k, v with Q scaled by `cq` and K^T by `ck` (given as
/// initializers of shape `cshape`), optional Div of the scores by `div`.
ModelBuilder sdpa_with(float cq, float ck, std::vector<int64_t> cshape = {}, float div = 0, bool mask = true,
                       const char* qop = "Mul") {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
  if (mask) b.input("mask", 1, {B, 1, 1, S});
  b.initializer("cq", cshape, {cq});
  b.initializer("ck", cshape, {ck});
  b.node(qop, {"q", "cq"}, {"qs"});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("Mul", {"kt", "ck"}, {"ks"});
  b.node("MatMul", {"qs", "ks"}, {"qk"});
  std::string s = "qk";
  if (div != 0) {
    b.initializer("div", cshape, {div});
    b.node("Div", {"qk", "div"}, {"scaled"});
    s = "scaled";
  }
  if (mask) {
    b.node("Add", {s, "mask"}, {"masked"});
    s = "masked";
  }
  ModelBuilder::attr_int(b.node("Softmax", {s}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  return b;
}

TEST(RecognizeAttention, ScaleShapedOneOneOneOneOrOne) {
  for (std::vector<int64_t> cs : {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{1}}) {
    EXPECT_EQ(run_pass(sdpa_with(0.7f, 0.8f, cs)).rewritten, 1);
    expect_cpu_matches_ref(sdpa_with(0.7f, 0.8f, cs), qkv_inputs());
    expect_cpu_matches_ref(sdpa_with(0.7f, 0.8f, cs, 3.f), qkv_inputs());
  }
}

TEST(RecognizeAttention, QueryScaledByDivAndOddScales) {
  // Div, zero, negative, a pair whose product is 1, and the identity.
  for (auto [cq, ck] : std::vector<std::pair<float, float>>{{2.f, 0.5f}, {0.f, 0.5f}, {-0.7f, 0.6f}, {1e20f, 1e-20f}, {1.f, 1.f}}) {
    const char* qop = cq == 2.f ? "Div" : "Mul";
    expect_cpu_matches_ref(sdpa_with(cq, ck, {}, 0, true, qop), qkv_inputs());
    expect_cpu_matches_ref(sdpa_with(cq, ck, {}, -3.f, true, qop), qkv_inputs());
  }
}

/// Both operands scaled by 1e20: their product 1e40 is past float32's range,
/// though every value of the graph is finite (q, k small enough).
TEST(RecognizeAttention, HugeScalesWhoseProductOverflowsFloat) {
  auto in = qkv_inputs();
  for (const char* n : {"q", "k"})
    for (int64_t i = 0; i < in[n].numel(); ++i) in[n].data<float>()[i] *= 1e-21f;
  expect_cpu_matches_ref(sdpa_with(1e20f, 1e20f), in);
  // and tiny ones whose product is below float32's smallest normal
  auto in2 = qkv_inputs();
  for (const char* n : {"q", "k"})
    for (int64_t i = 0; i < in2[n].numel(); ++i) in2[n].data<float>()[i] *= 1e20f;
  expect_cpu_matches_ref(sdpa_with(1e-20f, 1e-20f), in2);
}

/// The rank-4 one-element scale broadcasts a 3-D (no batch) Q up to rank 4.
TEST(RecognizeAttention, RankRaisingScaleOnThreeDimOperands) {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v"}) b.input(n, 1, {H, S, D});
  b.initializer("c", {1, 1, 1, 1}, {0.7f});
  b.node("Mul", {"q", "c"}, {"qs"});  // [1, H, S, D]
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 1});
  b.node("MatMul", {"qs", "kt"}, {"qk"});  // [1, H, S, S]
  ModelBuilder::attr_int(b.node("Softmax", {"qk"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"y"});  // [1, H, S, D]
  b.output("y");
  EXPECT_EQ(run_pass(b).rewritten, 0);  // the Mul by c is a broadcast, not a scaling
  expect_cpu_matches_ref(b, qkv_inputs({H, S, D}, false));
}

/// The scores' own Div by a [1, 1, 1] constant raises 2-D scores to rank 3;
/// merging the Q scaling into it must keep that.
TEST(RecognizeAttention, RankRaisingScoresDivOnTwoDimOperands) {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v"}) b.input(n, 1, {S, D});
  b.initializer("c", {}, {0.7f});
  b.initializer("two", {1, 1, 1}, {2.f});
  b.node("Mul", {"q", "c"}, {"qs"});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {1, 0});
  b.node("MatMul", {"qs", "kt"}, {"qk"});
  b.node("Div", {"qk", "two"}, {"scaled"});  // [1, S, S]
  ModelBuilder::attr_int(b.node("Softmax", {"scaled"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  EXPECT_EQ(run_pass(b).blocks, 0);  // the Div broadcasts: not a scaling of the scores
  expect_cpu_matches_ref(b, qkv_inputs({S, D}, false));
}

TEST(RecognizeAttention, TwoAndThreeDimOperands) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{S, D}, std::vector<int64_t>{H, S, D}}) {
    ModelBuilder b(17);
    for (const char* n : {"q", "k", "v"}) b.input(n, 1, shape);
    b.initializer("c", {}, {0.7f});
    b.node("Mul", {"q", "c"}, {"qs"});
    ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm",
                            shape.size() == 2 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{0, 2, 1});
    b.node("Mul", {"c", "kt"}, {"ks"});
    b.node("MatMul", {"qs", "ks"}, {"qk"});
    ModelBuilder::attr_int(b.node("Softmax", {"qk"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "v"}, {"y"});
    b.output("y");
    EXPECT_EQ(run_pass(b).rewritten, 1);
    expect_cpu_matches_ref(b, qkv_inputs(shape, false));
  }
}

TEST(RecognizeAttention, SameScaledValueAsQueryAndKey) {
  // MatMul(xs, xs) and MatMul(xs, Transpose(xs)): one Mul read twice.
  for (bool transpose : {false, true}) {
    ModelBuilder b(17);
    b.input("q", 1, {B, H, S, S});
    b.input("v", 1, {B, H, S, D});
    b.initializer("c", {}, {0.7f});
    b.node("Mul", {"q", "c"}, {"qs"});
    std::string k = "qs";
    if (transpose) {
      ModelBuilder::attr_ints(b.node("Transpose", {"qs"}, {"kt"}), "perm", {0, 1, 3, 2});
      k = "kt";
    }
    b.node("MatMul", {"qs", k}, {"qk"});
    ModelBuilder::attr_int(b.node("Softmax", {"qk"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "v"}, {"y"});
    b.output("y");
    EXPECT_EQ(run_pass(b).rewritten, 0);
    auto in = qkv_inputs({B, H, S, D}, false);
    in["q"] = wave({B, H, S, S}, 0.37f, 1.5f);
    in.erase("k");
    expect_cpu_matches_ref(b, in);
  }
}

TEST(RecognizeAttention, ScaledQueryWithASecondConsumer) {
  ModelBuilder b = sdpa_with(0.7f, 0.8f, {}, 2.f);
  b.node("Relu", {"qs"}, {"r"});
  b.output("r");
  EXPECT_EQ(run_pass(b).rewritten, 1);
  expect_cpu_matches_ref(b, qkv_inputs(), {"y", "r"});
}

TEST(RecognizeAttention, ScaleInitializerAlsoUsedElsewhere) {
  ModelBuilder b = sdpa_with(0.7f, 0.8f);
  b.node("Mul", {"v", "cq"}, {"vc"});
  b.output("vc");
  expect_cpu_matches_ref(b, qkv_inputs(), {"y", "vc"});
}

TEST(RecognizeAttention, MaskOnTheLeftAndScoresReadTwice) {
  {
    ModelBuilder b(17);
    for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
    b.input("mask", 1, {B, 1, 1, S});
    b.initializer("c", {}, {0.7f});
    b.node("Mul", {"q", "c"}, {"qs"});
    ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
    b.node("MatMul", {"qs", "kt"}, {"qk"});
    b.node("Mul", {"c", "qk"}, {"scaled"});
    b.node("Add", {"mask", "scaled"}, {"masked"});
    ModelBuilder::attr_int(b.node("Softmax", {"masked"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "v"}, {"y"});
    b.output("y");
    EXPECT_EQ(run_pass(b).rewritten, 1);
    expect_cpu_matches_ref(b, qkv_inputs());
  }
  {
    ModelBuilder b(17);
    for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
    b.initializer("c", {}, {0.7f});
    b.node("Mul", {"q", "c"}, {"qs"});
    ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
    b.node("MatMul", {"qs", "kt"}, {"qk"});
    b.node("Div", {"qk", "c"}, {"scaled"});
    b.node("Add", {"scaled", "scaled"}, {"masked"});
    ModelBuilder::attr_int(b.node("Softmax", {"masked"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "v"}, {"y"});
    b.output("y");
    EXPECT_EQ(run_pass(b).blocks, 0);
    expect_cpu_matches_ref(b, qkv_inputs({B, H, S, D}, false));
  }
}

/// The mask is itself a (scaled) MatMul on the left of the Add: the pass may
/// take it for the scores; values must not change either way.
TEST(RecognizeAttention, MaskMadeByAMatMul) {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v", "m1", "m2"}) b.input(n, 1, {B, H, S, D});
  b.initializer("c", {}, {0.7f});
  b.initializer("d", {}, {0.3f});
  b.node("Mul", {"q", "c"}, {"qs"});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"qs", "kt"}, {"qk"});
  b.node("Mul", {"m1", "d"}, {"m1s"});
  ModelBuilder::attr_ints(b.node("Transpose", {"m2"}, {"m2t"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"m1s", "m2t"}, {"mm"});
  b.node("Div", {"mm", "c"}, {"mask"});
  b.node("Add", {"mask", "qk"}, {"masked"});
  ModelBuilder::attr_int(b.node("Softmax", {"masked"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  run_pass(b);
  auto in = qkv_inputs({B, H, S, D}, false);
  in["m1"] = wave({B, H, S, D}, 0.11f, 1.f);
  in["m2"] = wave({B, H, S, D}, 0.17f, 1.f);
  expect_cpu_matches_ref(b, in);
}

TEST(RecognizeAttention, SoftmaxBeforeOpset13) {
  for (int opset : {11, 12})
    for (int64_t axis : {int64_t{-2}, int64_t{-1}, int64_t{1}, int64_t{3}, int64_t{99}}) {
      ModelBuilder b(opset);
      for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
      b.initializer("c", {}, {0.7f});
      b.node("Mul", {"q", "c"}, {"qs"});
      ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
      b.node("MatMul", {"qs", "kt"}, {"qk"});
      auto& sm = b.node("Softmax", {"qk"}, {"p"});
      if (axis != 99) ModelBuilder::attr_int(sm, "axis", axis);  // 99: default (1)
      b.node("MatMul", {"p", "v"}, {"y"});
      b.output("y");
      EXPECT_EQ(run_pass(b).blocks, axis == -1 || axis == 3 ? 1 : 0) << opset << " " << axis;
      SCOPED_TRACE(::testing::Message() << "opset " << opset << " axis " << axis);
      expect_cpu_matches_ref(b, qkv_inputs({B, H, S, D}, false));
    }
}

TEST(RecognizeAttention, ProbabilitiesAsTheRightOperand) {
  ModelBuilder b(17);
  b.input("q", 1, {B, H, S, D});
  b.input("k", 1, {B, H, S, D});
  b.input("v", 1, {B, H, D, S});
  b.initializer("c", {}, {0.7f});
  b.node("Mul", {"q", "c"}, {"qs"});
  ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"qs", "kt"}, {"qk"});
  ModelBuilder::attr_int(b.node("Softmax", {"qk"}, {"p"}), "axis", -1);
  b.node("MatMul", {"v", "p"}, {"y"});
  b.output("y");
  EXPECT_EQ(run_pass(b).blocks, 0);
  auto in = qkv_inputs({B, H, S, D}, false);
  in["v"] = wave({B, H, D, S}, 0.23f, 2.f);
  expect_cpu_matches_ref(b, in);
}

/// K [B, S, H*D] scaled, then Reshape to heads and a chain of Transposes.
TEST(RecognizeAttention, KeyScaledBeforeReshapeAndTransposeChain) {
  ModelBuilder b(17);
  b.input("q", 1, {B, H, S, D});
  b.input("k", 1, {B, S, H * D});
  b.input("v", 1, {B, H, S, D});
  b.initializer("c", {}, {0.7f});
  b.initializer_i64("shape", {4}, {B, S, H, D});
  b.node("Mul", {"k", "c"}, {"ks"});
  b.node("Reshape", {"ks", "shape"}, {"k4"});                                           // [B, S, H, D]
  ModelBuilder::attr_ints(b.node("Transpose", {"k4"}, {"k5"}), "perm", {0, 2, 1, 3});  // [B, H, S, D]
  ModelBuilder::attr_ints(b.node("Transpose", {"k5"}, {"kt"}), "perm", {0, 1, 3, 2});  // [B, H, D, S]
  b.node("Div", {"q", "c"}, {"qs"});
  b.node("MatMul", {"qs", "kt"}, {"qk"});
  ModelBuilder::attr_int(b.node("Softmax", {"qk"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "v"}, {"y"});
  b.output("y");
  EXPECT_EQ(run_pass(b).rewritten, 1);
  auto in = qkv_inputs({B, H, S, D}, false);
  in["k"] = wave({B, S, H * D}, 0.61f, 1.2f);
  expect_cpu_matches_ref(b, in);
}

/// Two blocks in one graph, both rewritten with an inserted Mul, sharing K.
TEST(RecognizeAttention, TwoBlocksSharingKey) {
  for (bool shared_mul : {false, true}) {
    ModelBuilder b(17);
    for (const char* n : {"q", "q2", "k", "v"}) b.input(n, 1, {B, H, S, D});
    b.initializer("c", {}, {0.7f});
    b.initializer("c2", {}, {-1.3f});
    ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
    b.node("Mul", {"kt", "c"}, {"ks"});
    if (!shared_mul) b.node("Mul", {"kt", "c2"}, {"ks2"});
    b.node("Mul", {"q", "c"}, {"qs"});
    b.node("MatMul", {"qs", "ks"}, {"qk"});
    ModelBuilder::attr_int(b.node("Softmax", {"qk"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "v"}, {"y1"});
    b.node("Mul", {"q2", "c2"}, {"qs2"});
    b.node("MatMul", {"qs2", shared_mul ? "ks" : "ks2"}, {"qk2"});
    b.node("Mul", {"qk2", "c"}, {"sc2"});
    ModelBuilder::attr_int(b.node("Softmax", {"sc2"}, {"p2"}), "axis", -1);
    b.node("MatMul", {"p2", "y1"}, {"y"});  // the second block's V is the first's output
    b.output("y");
    b.output("y1");
    auto st = run_pass(b);
    EXPECT_EQ(st.blocks, 2);
    EXPECT_EQ(st.rewritten, 2);
    auto in = qkv_inputs({B, H, S, D}, false);
    in["q2"] = wave({B, H, S, D}, 0.71f, 1.1f);
    expect_cpu_matches_ref(b, in, {"y", "y1"});
  }
}

/// Three blocks chained (each one's output is the next one's Q), all with a
/// new Mul inserted: the insert positions must stay in order.
TEST(RecognizeAttention, ChainedBlocksAllRewritten) {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
  b.initializer("c", {}, {0.7f});
  std::string q = "q";
  for (int i = 0; i < 3; ++i) {
    std::string s = std::to_string(i);
    b.node("Mul", {q, "c"}, {"qs" + s});
    ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt" + s}), "perm", {0, 1, 3, 2});
    b.node("Mul", {"kt" + s, "c"}, {"ks" + s});
    b.node("MatMul", {"qs" + s, "ks" + s}, {"qk" + s});
    ModelBuilder::attr_int(b.node("Softmax", {"qk" + s}, {"p" + s}), "axis", -1);
    q = i == 2 ? "y" : "y" + s;
    b.node("MatMul", {"p" + s, "v"}, {q});
  }
  b.output("y");
  EXPECT_EQ(run_pass(b).rewritten, 3);
  expect_cpu_matches_ref(b, qkv_inputs({B, H, S, D}, false));
}

/// The block inside an If branch, its Q scaled in the branch, K outside it.
TEST(RecognizeAttention, BlockInsideAnIfBranch) {
  ModelBuilder b(17);
  for (const char* n : {"q", "k", "v"}) b.input(n, 1, {B, H, S, D});
  b.input("cond", 9, {});
  b.initializer("c", {}, {0.7f});
  b.node("Mul", {"k", "c"}, {"kc"});  // outside the branch
  auto& ifn = b.node("If", {"cond"}, {"y"});
  auto branch = [&](bool attention) {
    ModelBuilder g(17);
    if (attention) {
      g.node("Mul", {"q", "c"}, {"qs"});
      ModelBuilder::attr_ints(g.node("Transpose", {"kc"}, {"kt"}), "perm", {0, 1, 3, 2});
      g.node("MatMul", {"qs", "kt"}, {"qk"});
      ModelBuilder::attr_int(g.node("Softmax", {"qk"}, {"p"}), "axis", -1);
      g.node("MatMul", {"p", "v"}, {"out"});
    } else {
      g.node("Identity", {"v"}, {"out"});
    }
    g.output("out", 1, {B, H, S, D});
    return g.graph();
  };
  for (auto [name, att] : {std::pair<const char*, bool>{"then_branch", true}, {"else_branch", false}}) {
    auto* a = ifn.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = branch(att);
  }
  b.output("y");
  EXPECT_EQ(run_pass(b).rewritten, 1);
  auto in = qkv_inputs({B, H, S, D}, false);
  Tensor cond(DType::boolean, {});
  cond.data<bool>()[0] = true;
  in["cond"] = cond;
  expect_cpu_matches_ref(b, in);
}

/// The same with a symbolic sequence length and the output's Shape read too.
TEST(RecognizeAttention, RankRaisingScaleWithSymbolicDims) {
  for (bool merge : {false, true}) {
    ModelBuilder b(17);
    for (const char* n : {"q", "k", "v"}) b.input(n, 1, {H, -1, D}, "S");
    b.initializer("c", {1, 1, 1, 1}, {0.7f});
    b.initializer("c1", {}, {0.9f});
    b.initializer("two", {}, {2.f});
    b.node("Mul", {"q", merge ? "c1" : "c"}, {"qs"});
    ModelBuilder::attr_ints(b.node("Transpose", {"k"}, {"kt"}), "perm", {0, 2, 1});
    b.node("MatMul", {"qs", "kt"}, {"qk"});
    b.node(merge ? "Div" : "Mul", {"qk", merge ? "c" : "two"}, {"scaled"});
    ModelBuilder::attr_int(b.node("Softmax", {"scaled"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "v"}, {"y"});
    b.node("Shape", {"y"}, {"ys"});
    b.node("Cast", {"ys"}, {"ysf"});
    ModelBuilder::attr_int(b.graph().mutable_node(b.graph().node_size() - 1)[0], "to", 1);
    b.output("y");
    b.output("ysf");
    EXPECT_EQ(run_pass(b).rewritten, 0);
    SCOPED_TRACE(merge ? "merge" : "insert");
    expect_cpu_matches_ref(b, qkv_inputs({H, S, D}, false), {"ysf", "y"});
  }
}

/// The block computed in float64 (inputs cast from float32, output
/// cast back): not float32, so left alone; and a scores Div by the scores
/// (constant / scores) is not a scaling.
TEST(RecognizeAttention, OtherDtypesAndReversedDiv) {
  for (int to : {11, 1}) {  // float16 MatMul is not supported by kiln at all
    ModelBuilder b(17);
    for (const char* n : {"q", "k", "v"}) {
      b.input(n, 1, {B, H, S, D});
      ModelBuilder::attr_int(b.node("Cast", {n}, {std::string(n) + "x"}), "to", to);
    }
    b.initializer("c0", {}, {0.7f});
    ModelBuilder::attr_int(b.node("Cast", {"c0"}, {"c"}), "to", to);
    b.node("Mul", {"qx", "c"}, {"qs"});
    ModelBuilder::attr_ints(b.node("Transpose", {"kx"}, {"kt"}), "perm", {0, 1, 3, 2});
    b.node("Mul", {"kt", "c"}, {"ks"});
    b.node("MatMul", {"qs", "ks"}, {"qk"});
    b.node("Div", {"c", "qk"}, {"scaled"});
    ModelBuilder::attr_int(b.node("Softmax", {"scaled"}, {"p"}), "axis", -1);
    b.node("MatMul", {"p", "vx"}, {"yx"});
    ModelBuilder::attr_int(b.node("Cast", {"yx"}, {"y"}), "to", 1);
    b.output("y");
    EXPECT_EQ(run_pass(b).blocks, 0) << to;
    SCOPED_TRACE(to);
    expect_cpu_matches_ref(b, qkv_inputs({B, H, S, D}, false));
  }
}

}  // namespace
}  // namespace kiln::testing

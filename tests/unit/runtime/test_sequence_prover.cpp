// The sequence prover (runtime/sequence_prover.h): padding a sequence dim
// carried by a keep-mask is accepted for HF-style masked attention and
// refused wherever the padded positions could reach a real one; accepted
// models padded at run time give the unpadded results on ref and cpu.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../onnx/model_builder.h"
#include "kiln/session.h"
#include "onnx/importer.h"
#include "runtime/sequence_prover.h"

namespace kiln::testing {
namespace {

std::vector<float> ramp_values(size_t n, float scale, int mod = 7) {
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) v.push_back(scale * static_cast<float>(static_cast<int>(i * 5) % mod) - scale * 3);
  return v;
}

/// How the attention below uses its mask.
enum class Variant {
  hf,               ///< bias = (1 - mask) * finfo(float32).min added to the scores (transformers today)
  hf_10000,         ///< the same with -10000 (older transformers)
  masked_mean,      ///< hf, plus a pooled output sum(h * mask) / sum(mask) over the sequence
  rms,              ///< hf with T5's RMS normalization before the projections: x / Sqrt(ReduceMean(x^2) + eps)
  no_mask,          ///< the mask only scales the output: the Softmax sees the padded keys
  mask_after,       ///< Softmax first, then multiplied by the mask: the padded keys share the weight
  float_mask,       ///< the mask input is float and added as is (0 attend, -1e4 not): zero padding attends
  cumsum,           ///< the output is a reverse cumulative sum over the sequence
  mean_no_mask,     ///< hf, plus a pooled output ReduceMean over the sequence (counts padded positions)
  roberta,          ///< hf with RoBERTa's position ids from input_ids: cumsum(ids != 1) * (ids != 1) + 1
  roberta_mask,     ///< hf with position ids cumsum(mask) * mask + 1 (exactly 1 at padded positions)
  reverse_ids,      ///< roberta with a reverse CumSum: a real position counts the padded ones after it
  float_ids,        ///< position ids from a CumSum of float data (unbounded): no table holds them
  small_table,      ///< roberta with a 12-row position table: padded ids leave it before 17 positions
};

bool roberta_like(Variant v) {
  return v == Variant::roberta || v == Variant::roberta_mask || v == Variant::reverse_ids || v == Variant::float_ids ||
         v == Variant::small_table;
}

/// RoBERTa's embeddings as transformers exports them: word rows of input_ids
/// plus position rows of pos = Cast(CumSum(m) * m) + 1 with m = Cast(ids != 1)
/// (padding_idx 1; the variants change m or the CumSum), added to x into h0.
void roberta_embeddings(ModelBuilder& b, Variant v) {
  typed(b.graph().add_input(), "input_ids", 7, {-1, -1}, {"B", "S"});
  const int64_t rows = v == Variant::small_table ? 12 : 20;
  b.initializer("word_table", {8, 4}, ramp_values(32, 0.07f, 9));
  b.initializer("rpos_table", {rows, 4}, ramp_values(static_cast<size_t>(rows) * 4, 0.04f, 13));
  b.initializer_i64("pad_idx", {}, {1});
  if (v == Variant::roberta_mask) {
    ModelBuilder::attr_int(b.node("Cast", {"attention_mask"}, {"m32"}), "to", 6);
  } else {
    b.node("Equal", {"input_ids", "pad_idx"}, {"is_pad"});
    b.node("Not", {"is_pad"}, {"not_pad"});
    ModelBuilder::attr_int(b.node("Cast", {"not_pad"}, {"m32"}), "to", v == Variant::float_ids ? 1 : 6);
  }
  std::string summed = "m32";
  if (v == Variant::float_ids) {
    // CumSum over x's first feature (data, unbounded), cast to an index.
    b.initializer_i64("f0", {1}, {0}).initializer_i64("f1", {1}, {1}).initializer_i64("ax2s", {1}, {2});
    b.node("Slice", {"x", "f0", "f1", "ax2s"}, {"x0"});
    b.node("Squeeze", {"x0", "ax2s"}, {"x0s"});
    b.node("Mul", {"x0s", "m32"}, {"m32x"});
    summed = "m32x";
  }
  auto& cs = b.node("CumSum", {summed, "i1"}, {"inc0"});
  if (v == Variant::reverse_ids) ModelBuilder::attr_int(cs, "reverse", 1);
  b.node("Mul", {"inc0", "m32"}, {"inc"});
  ModelBuilder::attr_int(b.node("Cast", {"inc"}, {"inc64"}), "to", 7);
  b.node("Add", {"inc64", "pad_idx"}, {"rpos"});
  b.node("Gather", {"rpos_table", "rpos"}, {"rpemb"});
  b.node("Gather", {"word_table", "input_ids"}, {"wemb"});
  b.node("Add", {"x", "wemb"}, {"xw"});
  b.node("Add", {"xw", "rpemb"}, {"h0"});
}

/// Single-head-pair self-attention over x[B,S,4] as transformers' BERT
/// exports it: position ids Range(0, Shape(x)[1]) -> Gather from a table,
/// Q/K/V projections reshaped to [B,S,2,2] and transposed to heads, scores
/// / sqrt(2) + mask bias [B,1,1,S], Softmax over the keys, context back to
/// [B,S,4], residual, LayerNormalization; outputs hidden[B,S,4] and
/// pooled[B,4] = Tanh(hidden[:, 0]) (BERT's pooler reads position 0).
ModelBuilder attention(Variant v) {
  ModelBuilder b(17);
  typed(b.graph().add_input(), "x", 1, {-1, -1, 4}, {"B", "S", ""});
  typed(b.graph().add_input(), "attention_mask", v == Variant::float_mask ? 1 : 7, {-1, -1}, {"B", "S"});
  b.initializer("pos_table", {32, 4}, ramp_values(128, 0.05f, 11));
  b.initializer("Wq", {4, 4}, ramp_values(16, 0.3f)).initializer("Wk", {4, 4}, ramp_values(16, 0.25f, 5));
  b.initializer("Wv", {4, 4}, ramp_values(16, 0.2f, 3));
  b.initializer("gamma", {4}, {1.f, 0.5f, 2.f, 1.f}).initializer("beta", {4}, {0.f, 0.1f, -0.1f, 0.2f});
  b.initializer("one", {}, {1.f}).initializer("sqrt2", {}, {std::sqrt(2.f)});
  b.initializer("big", {}, {v == Variant::hf_10000 ? -10000.f : std::numeric_limits<float>::lowest()});
  b.initializer_i64("i0", {}, {0}).initializer_i64("i1", {}, {1}).initializer_i64("ax0", {1}, {0});
  b.initializer_i64("ax1", {1}, {1}).initializer_i64("ax12", {2}, {1, 2}).initializer_i64("ax2", {1}, {2});
  b.initializer_i64("heads", {4}, {0, 0, 2, 2}).initializer_i64("merged", {3}, {0, 0, 4});
  // Position embeddings.
  if (roberta_like(v)) {
    roberta_embeddings(b, v);
  } else {
    b.node("Shape", {"x"}, {"xs"});
    ModelBuilder::attr_int(b.node("Gather", {"xs", "i1"}, {"len"}), "axis", 0);
    b.node("Range", {"i0", "len", "i1"}, {"pos"});
    b.node("Unsqueeze", {"pos", "ax0"}, {"pos2"});
    b.node("Gather", {"pos_table", "pos2"}, {"pemb"});
    b.node("Add", {"x", "pemb"}, {"h0"});
  }
  std::string src = "h0";
  if (v == Variant::rms) {
    b.initializer("two", {}, {2.f}).initializer("eps", {}, {1e-6f}).initializer_i64("last", {1}, {-1});
    b.node("Pow", {"h0", "two"}, {"sq"});
    b.node("ReduceMean", {"sq", "last"}, {"ms"});
    b.node("Add", {"ms", "eps"}, {"mse"});
    b.node("Sqrt", {"mse"}, {"rms"});
    b.node("Div", {"one", "rms"}, {"inv_rms"});
    b.node("Mul", {"h0", "inv_rms"}, {"h0n"});
    src = "h0n";
  }
  // Heads.
  auto heads = [&](const std::string& w, const std::string& out, std::vector<int64_t> perm) {
    b.node("MatMul", {src, w}, {out + "_p"});
    b.node("Reshape", {out + "_p", "heads"}, {out + "_r"});
    ModelBuilder::attr_ints(b.node("Transpose", {out + "_r"}, {out}), "perm", perm);
  };
  heads("Wq", "q", {0, 2, 1, 3});
  heads("Wk", "kt", {0, 2, 3, 1});
  heads("Wv", "v", {0, 2, 1, 3});
  b.node("MatMul", {"q", "kt"}, {"qk"});
  b.node("Div", {"qk", "sqrt2"}, {"scores"});
  std::string logits = "scores";
  if (v == Variant::float_mask) {
    b.node("Unsqueeze", {"attention_mask", "ax12"}, {"fbias"});
    b.node("Add", {"scores", "fbias"}, {"masked"});
    logits = "masked";
  } else {
    b.node("Unsqueeze", {"attention_mask", "ax12"}, {"m4"});
    ModelBuilder::attr_int(b.node("Cast", {"m4"}, {"m4f"}), "to", 1);
    if (v != Variant::no_mask && v != Variant::mask_after) {
      b.node("Sub", {"one", "m4f"}, {"inv"});
      b.node("Mul", {"inv", "big"}, {"bias"});
      b.node("Add", {"scores", "bias"}, {"masked"});
      logits = "masked";
    }
  }
  ModelBuilder::attr_int(b.node("Softmax", {logits}, {"probs0"}), "axis", -1);
  std::string probs = "probs0";
  if (v == Variant::mask_after) {
    b.node("Mul", {"probs0", "m4f"}, {"probs"});
    probs = "probs";
  }
  b.node("MatMul", {probs, "v"}, {"ctx"});
  ModelBuilder::attr_ints(b.node("Transpose", {"ctx"}, {"ctx_t"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"ctx_t", "merged"}, {"ctx_m"});
  b.node("Add", {"ctx_m", "h0"}, {"res"});
  std::string hidden = "hidden";
  auto& ln = b.node("LayerNormalization", {"res", "gamma", "beta"}, {v == Variant::cumsum ? "ln" : "hidden"});
  ModelBuilder::attr_int(ln, "axis", -1);
  if (v == Variant::no_mask) {
    // The mask is read, but only after the mixing: output positions are scaled by it.
    b.node("Unsqueeze", {"attention_mask", "ax2"}, {"m3"});
    ModelBuilder::attr_int(b.node("Cast", {"m3"}, {"m3f"}), "to", 1);
    b.node("Mul", {"hidden", "m3f"}, {"hidden_m"});
    hidden = "hidden_m";
  }
  if (v == Variant::cumsum) {
    auto& cs = b.node("CumSum", {"ln", "i1"}, {"hidden"});
    ModelBuilder::attr_int(cs, "reverse", 1);
  }
  typed(b.graph().add_output(), hidden, 1, {-1, -1, 4}, {"B", "S", ""});
  if (v == Variant::masked_mean || v == Variant::mean_no_mask) {
    if (v == Variant::masked_mean) {
      b.node("Unsqueeze", {"attention_mask", "ax2"}, {"m3"});
      ModelBuilder::attr_int(b.node("Cast", {"m3"}, {"m3f"}), "to", 1);
      b.node("Mul", {"hidden", "m3f"}, {"hm"});
      b.node("ReduceSum", {"hm", "ax1"}, {"hsum"});
      b.node("ReduceSum", {"m3f", "ax1"}, {"msum"});
      b.node("Div", {"hsum", "msum"}, {"mean3"});
    } else {
      b.node("ReduceMean", {"hidden", "ax1"}, {"mean3"});
    }
    b.node("Squeeze", {"mean3", "ax1"}, {"pooled"});
  } else {
    auto& g = b.node("Gather", {"hidden", "i0"}, {"first"});
    ModelBuilder::attr_int(g, "axis", 1);
    b.node("Tanh", {"first"}, {"pooled"});
  }
  typed(b.graph().add_output(), "pooled", 1, {-1, 4}, {"B", ""});
  return b;
}

ir::Model imported(const ModelBuilder& b, const TempDir& dir) {
  auto path = dir / "m.onnx";
  b.save(path);
  return onnx_import::import_file(path);
}

/// The decision on the attention variant (outputs: hidden has S at axis 1, pooled none).
bool decide(Variant v, std::string* why) {
  TempDir dir;
  return sequence_padding_safe(imported(attention(v), dir), "S", {"B", "S"}, {1, -1}, why);
}

TEST(SequenceProver, HfMaskedAttentionIsAccepted) {
  for (Variant v : {Variant::hf, Variant::hf_10000, Variant::masked_mean, Variant::rms, Variant::roberta,
                    Variant::roberta_mask}) {
    std::string why;
    EXPECT_TRUE(decide(v, &why)) << static_cast<int>(v) << ": " << why;
  }
}

TEST(SequenceProver, EveryWayThePaddingLeaksIsRefused) {
  struct Case {
    Variant v;
    const char* reason;  // part of the refusal
  };
  for (const Case& c : {Case{Variant::no_mask, "Softmax"}, Case{Variant::mask_after, "Softmax"},
                        Case{Variant::float_mask, "Softmax"}, Case{Variant::cumsum, "CumSum"},
                        Case{Variant::mean_no_mask, "ReduceMean"}, Case{Variant::reverse_ids, "reverse"},
                        Case{Variant::float_ids, "not a known constant nor bounded"},
                        Case{Variant::small_table, "not a known constant nor bounded within the 12 rows"}}) {
    std::string why;
    EXPECT_FALSE(decide(c.v, &why)) << static_cast<int>(c.v);
    EXPECT_NE(why.find(c.reason), std::string::npos) << static_cast<int>(c.v) << ": " << why;
  }
}

// RoBERTa's position ids grow with the padded size L (in [1, L + 1] there):
// a table of 20 rows holds them up to L = 18; ids from the mask are exactly 1.
TEST(SequenceProver, PositionIdsFromACumSumBoundThePaddedSize) {
  TempDir dir;
  int64_t cap = 0;
  std::string why;
  EXPECT_TRUE(sequence_padding_safe(imported(attention(Variant::roberta), dir), "S", {"B", "S"}, {1, -1}, &why, &cap))
      << why;
  EXPECT_EQ(cap, 18);
  EXPECT_TRUE(sequence_padding_safe(imported(attention(Variant::roberta_mask), dir), "S", {"B", "S"}, {1, -1}, &why,
                                    &cap))
      << why;
  EXPECT_EQ(cap, std::numeric_limits<int64_t>::max());
}

TEST(SequenceProver, OnlyIntegerMasksAreKeepMasks) {
  TempDir dir;
  EXPECT_EQ(keep_mask_inputs(imported(attention(Variant::hf), dir), "S"), std::vector<std::string>{"attention_mask"});
  EXPECT_TRUE(keep_mask_inputs(imported(attention(Variant::hf), dir), "B").size() == 1);
  EXPECT_TRUE(keep_mask_inputs(imported(attention(Variant::float_mask), dir), "S").empty());
}

TEST(SequenceProver, OutputsMustCarryTheDimWhereTheInterfaceSlices) {
  std::string why;
  TempDir dir;
  // hidden declared without the dim: it would come back unsliced.
  EXPECT_FALSE(sequence_padding_safe(imported(attention(Variant::hf), dir), "S", {"B", "S"}, {-1, -1}, &why));
  EXPECT_NE(why.find("graph output 'hidden'"), std::string::npos) << why;
}

/// The batch prover's adversarial models, read as a sequence: each must be refused.
TEST(SequenceProver, TheBatchProversAdversarialCasesAreRefused) {
  TempDir dir;
  {
    // x[N,6,4] reshaped to [6, -1]: N merged into axis 1.
    ModelBuilder b;
    b.input("x", 1, {-1, 6, 4}, "N");
    b.initializer_i64("idx", {}, {1}).initializer_i64("minus1", {1}, {-1}).initializer_i64("zero", {1}, {0});
    b.node("Shape", {"x"}, {"shape"});
    ModelBuilder::attr_int(b.node("Gather", {"shape", "idx"}, {"first"}), "axis", 0);
    b.node("Unsqueeze", {"first", "zero"}, {"first1"});
    ModelBuilder::attr_int(b.node("Concat", {"first1", "minus1"}, {"target"}), "axis", 0);
    b.node("Reshape", {"x", "target"}, {"flat"});
    b.initializer_i64("axes", {1}, {1});
    b.node("ReduceSum", {"flat", "axes"}, {"y"});
    b.output("y", 1, {-1, 1});
    EXPECT_FALSE(sequence_padding_safe(imported(b, dir), "N", {"N"}, {0}));
  }
  {
    // y = Shape(x): the padded size would be reported.
    ModelBuilder b;
    b.input("x", 1, {-1, 4}, "B");
    b.node("Shape", {"x"}, {"y"});
    b.output("y", 7, {2});
    EXPECT_FALSE(sequence_padding_safe(imported(b, dir), "B", {"B"}, {-1}));
  }
  {
    // y = x * float(B): the size as data.
    ModelBuilder b;
    b.input("x", 1, {-1, 4}, "B");
    b.initializer_i64("idx", {}, {0});
    b.node("Shape", {"x"}, {"s"});
    ModelBuilder::attr_int(b.node("Gather", {"s", "idx"}, {"n"}), "axis", 0);
    ModelBuilder::attr_int(b.node("Cast", {"n"}, {"nf"}), "to", 1);
    b.node("Mul", {"x", "nf"}, {"y"});
    b.output("y", 1, {-1, 4});
    std::string why;
    EXPECT_FALSE(sequence_padding_safe(imported(b, dir), "B", {"B"}, {0}, &why));
    EXPECT_NE(why.find("computed from the dim's size"), std::string::npos) << why;
  }
  {
    // Softmax over the dim with nothing masking the padded zeros.
    ModelBuilder b;
    b.input("x", 1, {-1, 4}, "B");
    ModelBuilder::attr_int(b.node("Softmax", {"x"}, {"y"}), "axis", 0);
    b.output("y", 1, {-1, 4});
    EXPECT_FALSE(sequence_padding_safe(imported(b, dir), "B", {"B"}, {0}));
  }
}

// --- end to end: specialized sessions pad a proven sequence --------------------------

Tensor floats(std::vector<int64_t> shape, int seed) {
  Tensor t(DType::f32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = 0.1f * static_cast<float>((i * 7 + seed * 3) % 13) - 0.6f;
  return t;
}

/// How the first row of a test mask is written.
enum class Row0 { right_padded, zeros, left_padded };

/// A keep-mask [B,S]: row r attends to its first S - r % 3 positions (at
/// least one); row 0 may attend to nothing, or to all but its first two.
Tensor mask(int64_t batch, int64_t seq, Row0 row0 = Row0::right_padded) {
  Tensor t(DType::i64, {batch, seq});
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t j = 0; j < seq; ++j) t.data<int64_t>()[r * seq + j] = (j < std::max<int64_t>(1, seq - r % 3)) ? 1 : 0;
  for (int64_t j = 0; j < seq; ++j)
    if (row0 == Row0::zeros || (row0 == Row0::left_padded && j < 2)) t.data<int64_t>()[j] = 0;
  return t;
}

/// RoBERTa-style token ids for a keep-mask: 2..7 where it attends, the padding id 1 where not.
Tensor token_ids(const Tensor& keep) {
  Tensor t(DType::i64, keep.shape());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = keep.data<int64_t>()[i] ? 2 + (i * 5) % 6 : 1;
  return t;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f + 1e-5f * std::fabs(want.data<float>()[i]))
        << what << " element " << i;
}

/// Runs sequence lengths through one specialized session and each through a
/// fresh session of exactly that shape, comparing every output.
std::vector<std::vector<int64_t>> stream(Variant v, Target target, const std::vector<std::pair<int64_t, Row0>>& seqs,
                                         std::string* mode) {
  TempDir dir;
  attention(v).save(dir / "m.onnx");
  SessionOptions opt;
  opt.use_cache = false;
  opt.target = target;
  Session s(dir / "m.onnx", opt);
  for (auto [seq, row0] : seqs) {
    std::map<std::string, Tensor> in{{"x", floats({2, seq, 4}, static_cast<int>(seq))},
                                     {"attention_mask", mask(2, seq, row0)}};
    if (roberta_like(v)) in["input_ids"] = token_ids(in.at("attention_mask"));
    auto got = s.run(in);
    Session exact(dir / "m.onnx", opt);
    auto want = exact.run(in);
    for (auto& [name, t] : want)
      expect_close(got.at(name), t, fmt::format("{} {} S={}", target.name(), name, seq));
  }
  *mode = s.buckets().modes.at(1);
  EXPECT_EQ(s.buckets().dims, (std::vector<std::string>{"B", "S"}));
  std::vector<std::vector<int64_t>> programs;
  for (auto& p : s.buckets().programs) programs.push_back(p);
  return programs;
}

TEST(SequenceProver, PaddedRunsEqualExactRunsOnRefAndCpu) {
  for (Target t : {Target::ref(), Target::cpu()}) {
    for (Variant v : {Variant::hf, Variant::hf_10000, Variant::masked_mean, Variant::rms}) {
      std::string mode;
      auto programs = stream(v, t, {{3, Row0::right_padded}, {6, Row0::right_padded}, {5, Row0::right_padded}, {9, Row0::right_padded}, {11, Row0::right_padded}}, &mode);
      // 3 and 6 exact; 5 rounds up to the held 6; 9 -> 16 (compiled), 11 -> the held 16.
      EXPECT_EQ(programs, (std::vector<std::vector<int64_t>>{{2, 3}, {2, 6}, {2, 16}})) << t.name();
      EXPECT_NE(mode.find("sequence padding proven safe"), std::string::npos) << mode;
    }
  }
}

// RoBERTa-style position ids: padded runs equal exact ones; ids that grow
// with the padded size cap it at 18 (20 table rows), ids from the mask do not.
TEST(SequenceProver, RobertaPositionIdsPadOnRefAndCpu) {
  const std::vector<std::pair<int64_t, Row0>> seqs = {{3, Row0::right_padded}, {6, Row0::right_padded},
                                                      {5, Row0::right_padded}, {9, Row0::right_padded},
                                                      {17, Row0::right_padded}, {11, Row0::right_padded}};
  for (Target t : {Target::ref(), Target::cpu()}) {
    std::string mode;
    auto programs = stream(Variant::roberta, t, seqs, &mode);
    // 5 -> the held 6; 9 -> 16; 17 -> 32 capped at 18; 11 -> the held 16.
    EXPECT_EQ(programs, (std::vector<std::vector<int64_t>>{{2, 3}, {2, 6}, {2, 16}, {2, 18}})) << t.name();
    EXPECT_NE(mode.find("up to 18"), std::string::npos) << mode;
    programs = stream(Variant::roberta_mask, t, seqs, &mode);
    EXPECT_EQ(programs, (std::vector<std::vector<int64_t>>{{2, 3}, {2, 6}, {2, 16}, {2, 32}})) << t.name();
  }
}

TEST(SequenceProver, AMaskNotAttendingToTheFirstPositionRunsUnpadded) {
  std::string mode;
  // The third size would be padded to 6, but one row attends to nothing:
  // exact 5; 12 would be padded to 16, but one row is left-padded: exact 12;
  // 13 is padded to 16.
  auto programs = stream(Variant::hf, Target::cpu(),
                         {{3, Row0::right_padded}, {6, Row0::right_padded}, {5, Row0::zeros},
                          {12, Row0::left_padded}, {13, Row0::right_padded}},
                         &mode);
  EXPECT_EQ(programs, (std::vector<std::vector<int64_t>>{{2, 3}, {2, 6}, {2, 5}, {2, 12}, {2, 16}}));
}

TEST(SequenceProver, RefusedModelsKeepOneProgramPerSize) {
  for (Variant v : {Variant::mask_after, Variant::mean_no_mask}) {
    std::string mode;
    auto programs = stream(v, Target::cpu(), {{3, Row0::right_padded}, {6, Row0::right_padded}, {5, Row0::right_padded}}, &mode);
    EXPECT_EQ(programs, (std::vector<std::vector<int64_t>>{{2, 3}, {2, 6}, {2, 5}}));
    EXPECT_NE(mode.find("not proven safe"), std::string::npos) << mode;
  }
}

// The refused models are refused for a reason: padded by force (a declared
// /pad=sequence), their real positions change.
TEST(SequenceProver, RefusedModelsReallyChangeWhenPadded) {
  for (Variant v : {Variant::mask_after, Variant::cumsum, Variant::mean_no_mask, Variant::no_mask}) {
    TempDir dir;
    attention(v).save(dir / "m.onnx");
    SessionOptions opt;
    opt.use_cache = false;
    Session exact(dir / "m.onnx", opt);
    opt.dims["S"] = DimSpec::parse("1..8/pad=sequence");
    Session padded(dir / "m.onnx", opt);
    std::map<std::string, Tensor> in{{"x", floats({2, 5, 4}, 1)}, {"attention_mask", mask(2, 5)}};
    auto want = exact.run(in), got = padded.run(in);
    EXPECT_EQ(padded.buckets().programs, (std::vector<std::vector<int64_t>>{{2, 8}}));
    double worst = 0;
    for (auto& [name, t] : want)
      for (int64_t i = 0; i < t.numel(); ++i)
        worst = std::max(worst, static_cast<double>(std::fabs(got.at(name).data<float>()[i] - t.data<float>()[i])));
    EXPECT_GT(worst, 1e-3) << static_cast<int>(v);
  }
}

}  // namespace
}  // namespace kiln::testing

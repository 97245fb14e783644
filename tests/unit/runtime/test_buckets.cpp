// Shape buckets: option parsing, bucket choice, padding and slicing, mask
// extension, out-of-bucket policy, cache keys, constants stored once.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../artifact/artifact_test_util.h"
#include "../onnx/model_builder.h"
#include "artifact/artifact.h"
#include "kiln/compile.h"
#include "kiln/session.h"
#include "cache/cache.h"
#include "runtime/buckets.h"
#include "runtime/compile.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using artifact_test::get32;
using artifact_test::get64;
using artifact_test::put32;
using artifact_test::put64;
using artifact_test::restamp;
using artifact_test::section_region;

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// y[N,3] = x[N,4] @ W + b, W 4x3 (W[i][j] = i - j), b = {1, 2, 3}.
ModelBuilder batch_model() {
  ModelBuilder b;
  typed(b.graph().add_input(), "x", 1, {-1, 4}, {"N", ""});
  std::vector<float> w;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) w.push_back(static_cast<float>(i - j));
  b.initializer("W", {4, 3}, w).initializer("b", {3}, {1, 2, 3});
  b.node("MatMul", {"x", "W"}, {"h"});
  b.node("Add", {"h", "b"}, {"y"});
  typed(b.graph().add_output(), "y", 1, {-1, 3}, {"N", ""});
  return b;
}

// Self-attention over x[B,S,4] with a key mask attention_mask[B,S] (int64):
// y = softmax(x x^T + (1 - mask) * -10000) x, shape [B,S,4]. With `mask`
// false the model takes no mask input (so sequence padding is not safe).
ModelBuilder attention_model(bool mask = true) {
  ModelBuilder b;
  typed(b.graph().add_input(), "x", 1, {-1, -1, 4}, {"B", "S", ""});
  if (mask) typed(b.graph().add_input(), "attention_mask", 7, {-1, -1}, {"B", "S"});
  auto& t = b.node("Transpose", {"x"}, {"xt"});
  ModelBuilder::attr_ints(t, "perm", {0, 2, 1});
  b.node("MatMul", {"x", "xt"}, {"scores"});
  std::string logits = "scores";
  if (mask) {
    b.initializer("one", {}, {1.0f}).initializer("big", {}, {-10000.0f}).initializer_i64("axis1", {1}, {1});
    auto& c = b.node("Cast", {"attention_mask"}, {"maskf"});
    ModelBuilder::attr_int(c, "to", 1);
    b.node("Sub", {"one", "maskf"}, {"inv"});
    b.node("Mul", {"inv", "big"}, {"bias2"});
    b.node("Unsqueeze", {"bias2", "axis1"}, {"bias"});
    b.node("Add", {"scores", "bias"}, {"masked"});
    logits = "masked";
  }
  auto& sm = b.node("Softmax", {logits}, {"p"});
  ModelBuilder::attr_int(sm, "axis", -1);
  b.node("MatMul", {"p", "x"}, {"y"});
  typed(b.graph().add_output(), "y", 1, {-1, -1, 4}, {"B", "S", ""});
  return b;
}

Tensor ramp(std::vector<int64_t> shape, float scale = 0.1f) {
  Tensor t(DType::f32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * static_cast<float>((i * 7) % 11) - 0.4f;
  return t;
}

Tensor ones_i64(std::vector<int64_t> shape) {
  Tensor t(DType::i64, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = 1;
  return t;
}

void expect_near(const Tensor& a, const Tensor& b, float tol) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "element " << i;
}

struct Buckets : ::testing::Test {
  TempDir dir;
  fs::path model = dir / "m.onnx";
  SessionOptions opt;
  void SetUp() override { opt.cache_dir = dir / "cache"; }
};

// --- options ---------------------------------------------------------------

TEST(DimSpecParse, ListRangeAndEdges) {
  auto l = DimSpec::parse("1,2,4,8");
  EXPECT_EQ(l.sizes, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(l.min, 1);
  EXPECT_EQ(l.max, 8);
  auto r = DimSpec::parse("1..512");
  EXPECT_EQ(r.sizes, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}));
  auto odd = DimSpec::parse("3..100");
  EXPECT_EQ(odd.sizes, (std::vector<int64_t>{4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(odd.min, 3);
  auto e = DimSpec::parse("1..512:16,64,128");
  EXPECT_EQ(e.sizes, (std::vector<int64_t>{16, 64, 128, 512}));
  EXPECT_EQ(e.str(), "1..512:16,64,128,512");
  EXPECT_EQ(DimSpec::parse("1,2/pad=none").pad, DimSpec::Pad::none);
  EXPECT_EQ(DimSpec::parse("1,2/pad=none").str(), "1..2:1,2/pad=none");
}

TEST(DimSpecParse, ErrorsNameTheOptionAndTheProblem) {
  auto msg = [](const std::string& text) {
    try {
      DimSpec::parse(text, "--dim 'seq=" + text + "'");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("").find("--dim 'seq="), std::string::npos);
  EXPECT_NE(msg("4,2").find("strictly ascending"), std::string::npos);
  EXPECT_NE(msg("0..4").find("1 <= start <= end"), std::string::npos);
  EXPECT_NE(msg("1..4:8").find("outside the range"), std::string::npos);
  EXPECT_NE(msg("a..b").find("'a' in 'a..b' is not a size"), std::string::npos);
  EXPECT_NE(msg("1,2/pad=maybe").find("unknown pad mode 'maybe'"), std::string::npos);
  SessionOptions o;
  o.dims["seq"] = DimSpec{};  // no sizes
  try {
    o.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dims 'seq'"), std::string::npos) << e.what();
  }
}

// --- choice, padding, slicing ----------------------------------------------

artifact::BucketSet two_dims() {
  artifact::BucketSet s;
  s.dims = {{"B", 1, 8, {1, 2, 4, 8}, artifact::PadMode::batch}, {"S", 1, 16, {4, 16}, artifact::PadMode::none}};
  s.inputs = {{"x", {"B", "S"}}};
  s.outputs = {{"y", {"B", "", "S"}}};
  return s;
}

TEST(BucketChoice, SmallestBucketThatFitsAndExactWhereNoPadding) {
  auto s = two_dims();
  auto c = buckets::choose(s, {3, 16});
  EXPECT_TRUE(c.inside);
  EXPECT_EQ(c.sizes, (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(buckets::choose(s, {1, 4}).sizes, (std::vector<int64_t>{1, 4}));
  auto out = buckets::choose(s, {9, 4});
  EXPECT_FALSE(out.inside);
  EXPECT_EQ(out.sizes, (std::vector<int64_t>{9, 4}));
  EXPECT_NE(out.why.find("dim 'B' is 9, outside its range 1..8"), std::string::npos) << out.why;
  auto nopad = buckets::choose(s, {2, 5});  // S may not be padded: 5 is no bucket
  EXPECT_FALSE(nopad.inside);
  EXPECT_NE(nopad.why.find("dim 'S' is 5"), std::string::npos) << nopad.why;
  EXPECT_TRUE(buckets::serves(s, {8, 16}, {5, 16}));
  EXPECT_FALSE(buckets::serves(s, {8, 16}, {5, 4}));   // S not padded
  EXPECT_FALSE(buckets::serves(s, {9, 16}, {5, 16}));  // 9 is an exact program, never padded into
  EXPECT_FALSE(buckets::serves(s, {4, 16}, {5, 16}));
}

TEST(BucketChoice, RequestSizesMustAgreeAcrossInputs) {
  artifact::BucketSet s;
  s.dims = {{"B", 1, 4, {4}, artifact::PadMode::batch}};
  s.inputs = {{"a", {"B"}}, {"b", {"B"}}};
  EXPECT_EQ(buckets::request_sizes(s, {{"a", ramp({3})}, {"b", ramp({3})}}), (std::vector<int64_t>{3}));
  try {
    buckets::request_sizes(s, {{"a", ramp({3})}, {"b", ramp({2})}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_input);
    EXPECT_NE(std::string(e.what()).find("'B' is 3 in input 'a'"), std::string::npos) << e.what();
  }
}

TEST(BucketPadding, ZeroPadsInputsAndSlicesOutputsBack) {
  artifact::BucketSet s;
  s.dims = {{"B", 1, 4, {4}, artifact::PadMode::batch}, {"S", 1, 4, {4}, artifact::PadMode::sequence}};
  s.inputs = {{"x", {"B", "S"}}};
  s.outputs = {{"y", {"B", "", "S"}}};
  Tensor x(DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  auto padded = buckets::pad_inputs(s, {{"x", x}}, {4, 4});
  const Tensor& p = padded.at("x");
  ASSERT_EQ(p.shape(), (std::vector<int64_t>{4, 4}));
  std::vector<float> want{1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(p.data<float>()[i], want[static_cast<size_t>(i)]) << i;
  Tensor y(DType::f32, {4, 2, 4});
  for (int i = 0; i < 32; ++i) y.data<float>()[i] = static_cast<float>(i);
  std::map<std::string, Tensor> outs{{"y", y}};
  buckets::slice_outputs(s, outs, {2, 3});
  const Tensor& r = outs.at("y");
  ASSERT_EQ(r.shape(), (std::vector<int64_t>{2, 2, 3}));
  std::vector<float> wy{0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(r.data<float>()[i], wy[static_cast<size_t>(i)]) << i;
}

TEST(BucketSplit, PlanRowsIsTheCheapestSplitOrPad) {
  using P = std::vector<std::pair<int64_t, double>>;
  auto parts = [](const std::vector<buckets::RowPart>& plan) {
    std::vector<std::pair<int64_t, int64_t>> v;
    for (auto& p : plan) v.emplace_back(p.rows, p.program);
    return v;
  };
  double cost = 0;
  // Time that grows with the rows: 37 = 32 + 4 + 1, nothing padded.
  P cpu{{1, 2}, {4, 5}, {32, 33}};
  EXPECT_EQ(parts(buckets::plan_rows(37, cpu, &cost)),
            (std::vector<std::pair<int64_t, int64_t>>{{32, 32}, {4, 4}, {1, 1}}));
  EXPECT_DOUBLE_EQ(cost, 40);
  // 3 rows: 4 padded (5) beats 1 + 1 + 1 (6); only the last part is padded.
  EXPECT_EQ(parts(buckets::plan_rows(3, cpu, &cost)), (std::vector<std::pair<int64_t, int64_t>>{{3, 4}}));
  EXPECT_DOUBLE_EQ(cost, 5);
  // A fixed cost per call: one padded call beats any split.
  P gpu{{1, 10}, {4, 10.5}, {32, 12}};
  EXPECT_EQ(parts(buckets::plan_rows(20, gpu, &cost)), (std::vector<std::pair<int64_t, int64_t>>{{20, 32}}));
  EXPECT_DOUBLE_EQ(cost, 12);
  // Above the largest program: whole programs, then the rest.
  EXPECT_EQ(parts(buckets::plan_rows(40, gpu, &cost)),
            (std::vector<std::pair<int64_t, int64_t>>{{32, 32}, {8, 32}}));
  // Equal costs: fewer calls win.
  EXPECT_EQ(parts(buckets::plan_rows(2, P{{1, 1}, {2, 2}})), (std::vector<std::pair<int64_t, int64_t>>{{2, 2}}));
  EXPECT_TRUE(buckets::plan_rows(5, P{}).empty());
  EXPECT_TRUE(buckets::plan_rows(0, cpu).empty());
}

TEST(BucketSplit, RowSlicesAndTheirConcatenationRoundTrip) {
  artifact::BucketSet s;
  s.dims = {{"B", 0, 0, {}, artifact::PadMode::batch, artifact::DimKind::specialized}};
  s.inputs = {{"x", {"B", ""}}, {"w", {"", ""}}};
  s.outputs = {{"y", {"B", ""}}, {"n", {}}};
  Tensor x(DType::f32, {5, 2}), w(DType::f32, {2, 2});
  for (int i = 0; i < 10; ++i) x.data<float>()[i] = static_cast<float>(i);
  std::map<std::string, Tensor> in{{"x", x}, {"w", w}};
  auto part = buckets::slice_rows(s, 0, in, 3, 2);
  ASSERT_EQ(part.at("x").shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(part.at("x").data<float>()[0], 6.f);  // a view of rows 3..4
  EXPECT_EQ(part.at("x").raw(), static_cast<const float*>(x.raw()) + 6);
  EXPECT_EQ(part.at("w").shape(), (std::vector<int64_t>{2, 2}));  // no batch: whole
  std::vector<std::map<std::string, Tensor>> outs;
  for (auto [off, rows] : {std::pair<int64_t, int64_t>{0, 3}, {3, 2}}) {
    Tensor n(DType::i64, {});
    *n.data<int64_t>() = 7;
    outs.push_back({{"y", buckets::slice_rows(s, 0, in, off, rows).at("x").clone()}, {"n", n}});
  }
  auto whole = buckets::concat_rows(s, 0, outs);
  ASSERT_EQ(whole.at("y").shape(), (std::vector<int64_t>{5, 2}));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(whole.at("y").data<float>()[i], static_cast<float>(i)) << i;
  EXPECT_EQ(*whole.at("n").data<int64_t>(), 7);
  Tensor str = Tensor::view(DType::string, {5}, nullptr, nullptr);  // never read: refused first
  s.inputs.push_back({"t", {"B"}});
  try {
    buckets::slice_rows(s, 0, {{"t", str}}, 0, 2);
    ADD_FAILURE() << "a string tensor was split";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_input);
    EXPECT_NE(std::string(e.what()).find("input 't'"), std::string::npos) << e.what();
  }
}

// A model whose symbolic dims have no names: the importer names them
// "<input>:<axis>", the error lists that name, and --dim can use it.
TEST_F(Buckets, UnnamedSymbolicDimsAreNamedInTheError) {
  ModelBuilder b;
  typed(b.graph().add_input(), "x", 1, {-1, 4}, {"", ""});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  b.save(model);
  opt.dims["N"] = DimSpec::parse("1,2");
  try {
    Session s(model, opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("(they have: x:0;"), std::string::npos) << e.what();
  }
  opt.dims.clear();
  opt.dims["x:0"] = DimSpec::parse("1,2");
  Session s(model, opt);
  Tensor x(DType::f32, {2, 4});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(i - 4);
  auto y = s.run({{"x", x}}).at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 4}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y.data<float>()[i], std::max(0.f, static_cast<float>(i - 4)));
  EXPECT_EQ(s.buckets().dims, (std::vector<std::string>{"x:0"}));
}

// Exporters often leave output shapes undeclared: the batch padding decision
// then comes from shape inference, not from "nothing declared".
TEST_F(Buckets, UndeclaredOutputShapesStillAllowBatchPadding) {
  ModelBuilder b = batch_model();
  b.graph().mutable_output(0)->clear_type();
  b.save(model);
  opt.dims["N"] = DimSpec::parse("1,2,4");
  opt.use_cache = false;
  Session s(model, opt);
  auto y3 = s.run({{"x", ramp({3, 4})}});
  EXPECT_EQ(y3.at("y").shape(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{4}})) << "3 is padded into bucket 4";
  EXPECT_EQ(s.buckets().compiled_by_run, 1);
}

// --- sessions ----------------------------------------------------------------

TEST_F(Buckets, BatchPaddingEqualsExactRunAndCompilesEachBucketOnce) {
  batch_model().save(model);
  SessionOptions exact_opt = opt;
  exact_opt.use_cache = false;
  Session exact(model, exact_opt);  // one dynamic program, no padding
  opt.dims["N"] = DimSpec::parse("1,2,4,8");
  Session s(model, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  EXPECT_EQ(s.stats().compile_ms, 0);  // nothing compiled before a run needs a bucket
  EXPECT_EQ(s.buckets().programs.size(), 0u);
  ASSERT_EQ(s.inputs().size(), 1u);
  EXPECT_EQ(s.inputs()[0].dims, (std::vector<int64_t>{-1, 4}));

  auto y3 = s.run({{"x", ramp({3, 4})}});
  expect_near(y3.at("y"), exact.run({{"x", ramp({3, 4})}}).at("y"), 1e-6f);
  EXPECT_EQ(y3.at("y").shape(), (std::vector<int64_t>{3, 3}));
  // Row 0 by hand: x = [-0.4, 0.3, -0.1, 0.6] (ramp), y_j = sum_i x_i (i - j) + b_j.
  EXPECT_NEAR(y3.at("y").data<float>()[0], 0.3f * 1 - 0.1f * 2 + 0.6f * 3 + 1, 1e-5);
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{4}}));
  EXPECT_EQ(s.buckets().compiled_by_run, 1);
  s.run({{"x", ramp({4, 4})}});  // same bucket
  s.run({{"x", ramp({2, 4})}});  // bucket 2
  EXPECT_EQ(s.buckets().compiled_by_run, 2);
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{4}, {2}}));

  // A new session finds both buckets in the cache entry and compiles nothing for them.
  Session again(model, opt);
  EXPECT_EQ(again.stats().cache, SessionStats::Cache::hit);
  EXPECT_EQ(again.buckets().programs.size(), 2u);
  expect_near(again.run({{"x", ramp({3, 4})}}).at("y"), y3.at("y"), 0);
  EXPECT_EQ(again.buckets().compiled_by_run, 0);
}

TEST_F(Buckets, SequencePaddingExtendsTheMaskWithZeros) {
  attention_model().save(model);
  SessionOptions exact_opt = opt;
  exact_opt.use_cache = false;
  Session exact(model, exact_opt);
  opt.dims["B"] = DimSpec::parse("1..4");
  opt.dims["S"] = DimSpec::parse("1..8/pad=sequence");  // sequence padding only when asked for
  Session s(model, opt);
  std::map<std::string, Tensor> in{{"x", ramp({2, 5, 4})}, {"attention_mask", ones_i64({2, 5})}};
  auto got = s.run(in);
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{2, 8}}));  // B=2 exact, S 5 -> 8
  expect_near(got.at("y"), exact.run(in).at("y"), 1e-5f);
  // A request with its own padding (mask 0 on the last position) still matches.
  in["attention_mask"].data<int64_t>()[4] = 0;
  expect_near(s.run(in).at("y"), exact.run(in).at("y"), 1e-5f);
  auto bs = artifact::read_file(s.stats().artifact_path).buckets;
  ASSERT_EQ(bs.dims.size(), 2u);
  EXPECT_EQ(bs.dims[0].pad, artifact::PadMode::batch);
  EXPECT_EQ(bs.dims[1].pad, artifact::PadMode::sequence);
}

TEST_F(Buckets, AutoModeNeverPadsASequence) {
  // Without /pad=sequence the masked sequence dim is not padded: a request
  // between buckets gets a program of its exact size.
  attention_model().save(model);
  opt.dims["S"] = DimSpec::parse("1..8");
  Session s(model, opt);
  s.run({{"x", ramp({1, 5, 4})}, {"attention_mask", ones_i64({1, 5})}});
  // B, which --dim leaves open, is specialized to the request (1).
  EXPECT_EQ(s.buckets().dims, (std::vector<std::string>{"B", "S"}));
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{1, 5}}));
}

TEST_F(Buckets, SequencePaddingWithoutAnIntegerMaskIsRefused) {
  attention_model(/*mask=*/false).save(model);
  opt.dims["S"] = DimSpec::parse("1..8/pad=sequence");
  try {
    Session s(model, opt);
    FAIL() << "no mask input, yet /pad=sequence was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("/pad=sequence needs an integer or bool input named *mask*"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Buckets, RowsThatInteractAreNotPadded) {
  // y = Softmax(x, axis 0) mixes the rows: padding N=3 to 4 with a zero row
  // would change every result, so the auto mode must not pad N.
  ModelBuilder b(17);
  b.input("x", 1, {-1, 3}, "N");
  ModelBuilder::attr_int(b.node("Softmax", {"x"}, {"y"}), "axis", 0);
  b.output("y", 1, {-1, 3});
  b.save(model);
  opt.dims["N"] = DimSpec::parse("1..8");
  Session s(model, opt);
  SessionOptions exact_opt = opt;
  exact_opt.dims.clear();
  exact_opt.use_cache = false;
  Session exact(model, exact_opt);
  auto got = s.run({{"x", ramp({3, 3})}});
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{3}}));
  expect_near(got.at("y"), exact.run({{"x", ramp({3, 3})}}).at("y"), 1e-6f);
}

TEST_F(Buckets, WithoutAMaskTheSequenceMustMatchABucket) {
  attention_model(/*mask=*/false).save(model);
  opt.dims["S"] = DimSpec::parse("4,8");
  opt.out_of_bucket = OutOfBucket::error;
  Session s(model, opt);
  auto y = s.run({{"x", ramp({1, 8, 4})}});
  EXPECT_EQ(y.at("y").shape(), (std::vector<int64_t>{1, 8, 4}));
  try {
    s.run({{"x", ramp({1, 5, 4})}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_input);
    EXPECT_NE(std::string(e.what()).find("dim 'S' is 5, not one of its buckets 4,8"), std::string::npos) << e.what();
  }
}

TEST_F(Buckets, OutOfBucketErrorOrCompileAndCache) {
  batch_model().save(model);
  opt.dims["N"] = DimSpec::parse("1..8");
  opt.out_of_bucket = OutOfBucket::error;
  {
    Session s(model, opt);
    try {
      s.run({{"x", ramp({9, 4})}});
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_input);
      EXPECT_NE(std::string(e.what()).find("dim 'N' is 9, outside its range 1..8"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.buckets().compiled_by_run, 0);
  }
  opt.out_of_bucket = OutOfBucket::compile;
  SessionOptions exact_opt = opt;
  exact_opt.dims.clear();
  exact_opt.use_cache = false;
  Session exact(model, exact_opt);
  Session s(model, opt);
  auto y = s.run({{"x", ramp({9, 4})}});
  expect_near(y.at("y"), exact.run({{"x", ramp({9, 4})}}).at("y"), 1e-6f);
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{9}}));
  EXPECT_EQ(s.buckets().compiled_by_run, 1);
  Session again(model, opt);  // the exact program was added to the cache entry
  EXPECT_EQ(again.stats().cache, SessionStats::Cache::hit);
  again.run({{"x", ramp({9, 4})}});
  EXPECT_EQ(again.buckets().compiled_by_run, 0);
}

TEST_F(Buckets, UnknownDimIsAnOptionError) {
  batch_model().save(model);
  opt.dims["batch"] = DimSpec::parse("1,2");
  try {
    Session s(model, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("dims 'batch': the model's inputs have no symbolic dim named 'batch' (they "
                                         "have: N"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Buckets, CacheKeyCoversTheBucketSet) {
  batch_model().save(model);
  SessionOptions a = opt, b = opt, c = opt;
  a.dims["N"] = DimSpec::parse("1,2,4");
  b.dims["N"] = DimSpec::parse("1,2,4,8");
  c.dims["N"] = DimSpec::parse("1,2,4/pad=none");
  auto key = [&](const SessionOptions& o) { return cache::derive_key(key_fields("digest", o)); };
  EXPECT_NE(key(a), key(b));
  EXPECT_NE(key(a), key(c));
  EXPECT_NE(key(a), key(opt));
  SessionOptions a2 = opt;
  a2.dims["N"] = DimSpec::parse("1..4:1,2");  // the same buckets written another way
  EXPECT_EQ(key(a), key(a2));
  Session sa(model, a), sb(model, b);
  EXPECT_NE(sa.stats().artifact_path, sb.stats().artifact_path);
}

// A model whose constants dominate: x[N,256] @ W[256,256].
ModelBuilder heavy_model() {
  ModelBuilder b;
  typed(b.graph().add_input(), "x", 1, {-1, 256}, {"N", ""});
  std::vector<float> w(256 * 256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) * 0.01f;
  b.initializer("W", {256, 256}, w);
  b.node("MatMul", {"x", "W"}, {"y"});
  typed(b.graph().add_output(), "y", 1, {-1, 256}, {"N", ""});
  return b;
}

TEST_F(Buckets, ConstantsAreStoredOnceWhateverTheBucketCount) {
  heavy_model().save(model);
  for (auto target : {Target::ref(), Target::cpu()}) {
    SessionOptions one = opt, six = opt;
    one.target = six.target = target;
    one.dims["N"] = DimSpec::parse("1");
    six.dims["N"] = DimSpec::parse("1..32");
    ASSERT_EQ(six.dims["N"].sizes.size(), 6u);
    auto r1 = compile(model, dir / "one.kiln", one);
    auto r6 = compile(model, dir / "six.kiln", six);
    EXPECT_EQ(r1.programs, 1);
    EXPECT_EQ(r6.programs, 6);
    auto f1 = read_all(dir / "one.kiln"), f6 = read_all(dir / "six.kiln");
    auto c1 = section_region(f1, artifact::detail::SectionKind::constants);
    auto c6 = section_region(f6, artifact::detail::SectionKind::constants);
    EXPECT_GE(c1.size, 256u * 256 * 4) << target.name();
    EXPECT_EQ(c6.size, c1.size) << target.name();
    // The five extra programs add their FlatBuffers only (a few KiB), not weights.
    EXPECT_LT(r6.artifact_bytes, r1.artifact_bytes + 256u * 256 * 4 / 4) << target.name();
    auto cp = artifact::read_file(dir / "six.kiln");
    ASSERT_EQ(cp.more.size(), 5u);
    EXPECT_EQ(cp.sizes, (std::vector<int64_t>{1}));
    EXPECT_EQ(cp.more.back().sizes, (std::vector<int64_t>{32}));
    // Every program's W views the same bytes of the mapping.
    auto weight_of = [](const ir::Model& m) {
      const void* p = nullptr;
      for (auto& v : m.values)
        if (v.constant && v.constant->nbytes() >= 256u * 256 * 4) p = v.constant->raw();
      return p;
    };
    EXPECT_EQ(weight_of(cp.model), weight_of(cp.more.back().model)) << target.name();
    // Loaded without a compiler, each request runs on a bucket it fits.
    SessionOptions lo;
    lo.target = target;
    Session s = Session::load(dir / "six.kiln", lo);
    auto y = s.run({{"x", ramp({3, 256})}});
    EXPECT_EQ(y.at("y").shape(), (std::vector<int64_t>{3, 256}));
    EXPECT_THROW(s.run({{"x", ramp({33, 256})}}), Error);
  }
}

TEST_F(Buckets, TwoSessionsAddTheirBucketsToOneEntry) {
  batch_model().save(model);
  opt.dims["N"] = DimSpec::parse("1,2,4,8");
  Session a(model, opt), b(model, opt);  // both miss: nothing cached yet
  a.run({{"x", ramp({3, 4})}});          // compiles bucket 4, publishes
  b.run({{"x", ramp({1, 4})}});          // compiles bucket 1, publishes the entry with 4 kept
  b.run({{"x", ramp({4, 4})}});          // bucket 4: loaded from the entry a wrote, not compiled
  EXPECT_EQ(a.buckets().compiled_by_run, 1);
  EXPECT_EQ(b.buckets().compiled_by_run, 1);
  Session c(model, opt);
  EXPECT_EQ(c.stats().cache, SessionStats::Cache::hit);
  EXPECT_EQ(c.buckets().programs, (std::vector<std::vector<int64_t>>{{4}, {1}}));
}

// A bucketed artifact: the sample program as buckets N=2 and N=4.
artifact::CompiledProgram bucketed_sample() {
  auto cp = artifact_test::sample_program();
  cp.buckets.dims = {{"N", 1, 4, {2, 4}, artifact::PadMode::batch}};
  cp.sizes = {2};
  cp.more.push_back({{4}, cp.model, cp.plan});
  return cp;
}

TEST(BucketArtifact, RoundTripAndEveryDamagedByteOfTheBucketTableIsRefused) {
  auto bytes = artifact::serialize(bucketed_sample());
  auto back = artifact::read_bytes(std::make_shared<const std::vector<uint8_t>>(bytes), "b.kiln");
  ASSERT_EQ(back.buckets.dims.size(), 1u);
  EXPECT_EQ(back.buckets.dims[0].sizes, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(back.sizes, (std::vector<int64_t>{2}));
  ASSERT_EQ(back.more.size(), 1u);
  EXPECT_EQ(back.more[0].sizes, (std::vector<int64_t>{4}));
  artifact_test::expect_same_program(back, bucketed_sample());
  EXPECT_EQ(back.more[0].model.values.size(), back.model.values.size());
  // Both programs' constants are one copy in the file.
  auto single = artifact::serialize(artifact_test::sample_program());
  EXPECT_EQ(section_region(bytes, artifact::detail::SectionKind::constants).size,
            section_region(single, artifact::detail::SectionKind::constants).size);
  // Every byte of the bucket table flipped (checksums recomputed so the
  // decoder sees it): refused as corrupt or still a valid table, never a crash.
  auto r = section_region(bytes, artifact::detail::SectionKind::buckets);
  int refused = 0;
  for (uint64_t i = r.offset; i < r.offset + r.size; ++i) {
    auto b = bytes;
    b[i] ^= 0x5a;
    restamp(b);
    try {
      artifact::read_bytes(std::make_shared<const std::vector<uint8_t>>(b), "b.kiln");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_artifact) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, static_cast<int>(r.size / 2));
}

TEST(ArtifactVersions, AVersion1FileIsStillRead) {
  // A v2 file of one program minus its 'buckets' section is the v1 layout.
  auto bytes = artifact::serialize(artifact_test::sample_program());
  auto buckets = section_region(bytes, artifact::detail::SectionKind::buckets);
  ASSERT_EQ(buckets.offset + buckets.size, bytes.size());
  auto meta = section_region(bytes, artifact::detail::SectionKind::metadata);
  bytes.resize(meta.offset + meta.size);
  uint64_t table = get64(bytes, 48);
  for (size_t i = 0; i < 32; ++i) bytes[table + 6 * 32 + i] = 0;  // the 7th entry becomes padding
  put32(bytes, 8, 1);
  put32(bytes, 56, 6);
  put64(bytes, 16, bytes.size());
  // The compat block records the format version too.
  auto compat = artifact_test::sample_program().compat;
  auto enc = artifact::detail::encode_compat(compat);
  uint64_t coff = get64(bytes, 24);
  ASSERT_EQ(enc.size(), get64(bytes, 32));
  // encode_compat writes kFormatVersion; find and patch the stored 2 -> 1.
  bool patched = false;
  for (size_t i = 0; i + 4 <= enc.size() && !patched; ++i)
    if (get32(enc, i) == artifact::kFormatVersion) {
      auto trial = enc;
      put32(trial, i, 1);
      try {
        if (artifact::detail::decode_compat(trial.data(), trial.size(), 1, "t").format_version == 1) {
          std::copy(trial.begin(), trial.end(), bytes.begin() + static_cast<ptrdiff_t>(coff));
          patched = true;
        }
      } catch (const Error&) {
      }
    }
  ASSERT_TRUE(patched);
  restamp(bytes);
  auto cp = artifact::read_bytes(std::make_shared<const std::vector<uint8_t>>(bytes), "v1.kiln");
  EXPECT_EQ(cp.compat.format_version, 1u);
  EXPECT_TRUE(cp.buckets.empty());
  EXPECT_TRUE(cp.more.empty());
  auto want = artifact_test::sample_program();
  want.compat.format_version = 1;
  artifact_test::expect_same_program(cp, want);
}

}  // namespace
}  // namespace kiln::testing

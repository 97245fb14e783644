// kiln.cpu.LSTM (oneDNN's LSTM primitive): a one-step cell worked out by
// hand (every gate distinct, so a gate-order slip shows), then each
// direction, batch, state and output combination against the ref target,
// and the forms the lowering leaves to the reference kernel.
#include <gtest/gtest.h>

#include <cmath>

#include "../onnx/model_builder.h"
#include "../passes/graph_pass_util.h"
#include "cpu_test_util.h"
#include "artifact/artifact.h"
#include "kiln/session.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "targets/pipeline.h"

namespace kiln::testing {
namespace {

/// Number of kiln.cpu.LSTM nodes after the cpu pipeline.
int lowered_lstms(const ModelBuilder& b) { return cpu_nodes(b, "LSTM"); }

std::vector<float> wave(int64_t n, float f, float a) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(a * std::sin(f * static_cast<float>(i) + 0.3f));
  return v;
}

Tensor tensor(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  Tensor t(DType::f32, shape);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

/// An LSTM over x [T, N, I] with hidden H and seeded weights; h0 / c0 add
/// the initial_h / initial_c inputs; outputs y, then y_h and y_c when asked.
struct LstmSpec {
  int64_t T = 4, N = 1, I = 3, H = 5;
  std::string direction = "forward";
  bool bias = true, h0 = false, c0 = false, yh = true, yc = true;
};

int64_t directions(const LstmSpec& s) { return s.direction == "bidirectional" ? 2 : 1; }

std::vector<std::string> outputs_of(const LstmSpec& s) {
  std::vector<std::string> o{"y"};
  if (s.yh) o.push_back("y_h");
  if (s.yc) o.push_back("y_c");
  return o;
}

ModelBuilder lstm(const LstmSpec& s) {
  const int64_t D = directions(s);
  ModelBuilder b;
  b.input("x", 1, {s.T, s.N, s.I});
  b.initializer("w", {D, 4 * s.H, s.I}, wave(D * 4 * s.H * s.I, 0.7f, 0.6f));
  b.initializer("r", {D, 4 * s.H, s.H}, wave(D * 4 * s.H * s.H, 0.45f, 0.5f));
  if (s.bias) b.initializer("b", {D, 8 * s.H}, wave(D * 8 * s.H, 0.3f, 0.4f));
  if (s.h0) b.input("h0", 1, {D, s.N, s.H});
  if (s.c0) b.input("c0", 1, {D, s.N, s.H});
  auto& n = b.node("LSTM", {"x", "w", "r", s.bias ? "b" : "", "", s.h0 ? "h0" : "", s.c0 ? "c0" : ""},
                   {"y", s.yh ? "y_h" : "", s.yc ? "y_c" : ""});
  ModelBuilder::attr_int(n, "hidden_size", s.H);
  attr_string(n, "direction", s.direction);
  for (const std::string& o : outputs_of(s)) b.output(o);
  return b;
}

/// Inputs for `s`, varied by `seed` (a different phase per run).
std::map<std::string, Tensor> inputs_of(const LstmSpec& s, float seed = 0.f) {
  const int64_t D = directions(s);
  std::map<std::string, Tensor> in{{"x", tensor({s.T, s.N, s.I}, wave(s.T * s.N * s.I, 0.9f + seed, 1.5f))}};
  if (s.h0) in["h0"] = tensor({D, s.N, s.H}, wave(D * s.N * s.H, 1.3f + seed, 0.8f));
  if (s.c0) in["c0"] = tensor({D, s.N, s.H}, wave(D * s.N * s.H, 0.5f + seed, 1.2f));
  return in;
}

void expect_near(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                 const LstmSpec& s) {
  ASSERT_EQ(got.size(), outputs_of(s).size());
  for (const std::string& o : outputs_of(s)) {
    const Tensor &w = want.at(o), &g = got.at(o);
    ASSERT_EQ(g.shape(), w.shape()) << o;
    for (int64_t i = 0; i < w.numel(); ++i)
      ASSERT_NEAR(g.data<float>()[i], w.data<float>()[i], 1e-5 + 1e-4 * std::fabs(w.data<float>()[i]))
          << o << "[" << i << "]";
  }
}

void expect_cpu_matches_ref(const LstmSpec& s) {
  const auto in = inputs_of(s);
  const ModelBuilder b = lstm(s);
  expect_near(run_on(b, Target::cpu(), in), run_on(b, Target::ref(), in), s);
}

TEST(CpuLstm, OneStepByHand) {
  // I = H = 1, x = 1, h0 = 0, c0 = 0.5; W (ONNX gate order i, o, f, c) = 2, -1, 5, 1:
  // i = s(2), o = s(-1), f = s(5), g = tanh(1); c = f c0 + i g = 1.16746348,
  // h = o tanh(c) = 0.22146178.
  ModelBuilder b;
  b.input("x", 1, {1, 1, 1});
  b.input("h0", 1, {1, 1, 1});
  b.input("c0", 1, {1, 1, 1});
  b.initializer("w", {1, 4, 1}, {2.f, -1.f, 5.f, 1.f});
  b.initializer("r", {1, 4, 1}, {0.f, 0.f, 0.f, 0.f});
  auto& n = b.node("LSTM", {"x", "w", "r", "", "", "h0", "c0"}, {"y", "y_h", "y_c"});
  ModelBuilder::attr_int(n, "hidden_size", 1);
  b.output("y");
  b.output("y_h");
  b.output("y_c");
  EXPECT_EQ(lowered_lstms(b), 1);
  auto out = run_on(b, Target::cpu(),
                    {{"x", tensor({1, 1, 1}, {1.f})}, {"h0", tensor({1, 1, 1}, {0.f})}, {"c0", tensor({1, 1, 1}, {0.5f})}});
  EXPECT_NEAR(out.at("y").data<float>()[0], 0.22146178f, 1e-6);
  EXPECT_NEAR(out.at("y_h").data<float>()[0], 0.22146178f, 1e-6);
  EXPECT_NEAR(out.at("y_c").data<float>()[0], 1.16746348f, 1e-6);
}

TEST(CpuLstm, EveryDirectionBatchAndStateAgainstRef) {
  std::vector<LstmSpec> specs;
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int states = 0; states < 4; ++states) {  // none, initial_h, initial_c, both
      LstmSpec s;
      s.direction = dir;
      s.h0 = states & 1;
      s.c0 = states & 2;
      specs.push_back(s);
    }
  for (const char* dir : {"forward", "reverse"}) {  // batch 3, hidden 17 (not a multiple of 8 or 16)
    LstmSpec batch;
    batch.direction = dir;
    batch.N = 3;
    batch.H = 17;
    specs.push_back(batch);
    batch.h0 = batch.c0 = true;
    batch.bias = false;
    specs.push_back(batch);
  }
  for (int outs = 0; outs < 3; ++outs) {  // Y alone, Y + Y_h, Y + Y_c
    LstmSpec s;
    s.direction = outs == 1 ? "bidirectional" : "reverse";
    s.h0 = true;
    s.yh = outs == 1;
    s.yc = outs == 2;
    specs.push_back(s);
  }
  for (const LstmSpec& s : specs) {
    SCOPED_TRACE(s.direction + " N=" + std::to_string(s.N) + " H=" + std::to_string(s.H) + (s.h0 ? " h0" : "") +
                 (s.c0 ? " c0" : "") + (s.bias ? "" : " no bias") + (s.yh ? " y_h" : "") + (s.yc ? " y_c" : ""));
    EXPECT_EQ(lowered_lstms(lstm(s)), 1);
    expect_cpu_matches_ref(s);
  }
}

TEST(CpuLstm, OneSessionRunsNewDataEachTime) {
  // The primitive, its scratchpad and the output buffers are reused across runs:
  // each run must give the reference's answer for its own inputs.
  LstmSpec s;
  s.direction = "bidirectional";
  s.T = 7;
  s.H = 33;
  s.h0 = s.c0 = true;
  const ModelBuilder b = lstm(s);
  TempDir dir;
  b.save(dir / "lstm.onnx");
  SessionOptions cpu, ref;
  cpu.target = Target::cpu();
  ref.target = Target::ref();
  cpu.use_cache = ref.use_cache = false;
  Session on_cpu(dir / "lstm.onnx", cpu), on_ref(dir / "lstm.onnx", ref);
  std::vector<float> first_y;
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    const auto in = inputs_of(s, 0.37f * static_cast<float>(run));
    const auto got = on_cpu.run(in);
    expect_near(got, on_ref.run(in), s);
    const Tensor& y = got.at("y");
    if (run == 0) first_y.assign(y.data<float>(), y.data<float>() + y.numel());
    else EXPECT_NE(first_y, std::vector<float>(y.data<float>(), y.data<float>() + y.numel()));
  }
}

TEST(CpuLstm, LeavesOtherFormsToTheReferenceKernel) {
  LstmSpec bi_batch;  // oneDNN's concatenated output is [T, N, 2H], ONNX's Y [T, 2, N, H]
  bi_batch.direction = "bidirectional";
  bi_batch.N = 2;
  EXPECT_EQ(lowered_lstms(lstm(bi_batch)), 0);
  expect_cpu_matches_ref(bi_batch);
  ModelBuilder clipped = lstm(LstmSpec{});
  attr_float(*clipped.graph().mutable_node(0), "clip", 0.5f);
  EXPECT_EQ(lowered_lstms(clipped), 0);
}

}  // namespace
}  // namespace kiln::testing

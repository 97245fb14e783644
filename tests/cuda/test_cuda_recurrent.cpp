// LSTM on the cuda target, compile side (label `unit`, no GPU needed:
// cross-compiled for sm_90 with heuristic tuning): an LSTM becomes generated
// kernels (gen_recurrent.cpp) and the program has no host segment; a
// 16-bit program keeps the LSTM float32; GRU still runs on the host, its
// reason named. Running them against ref: test_cuda_recurrent_gpu.cpp.
#include <gtest/gtest.h>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::testing {
namespace {

SessionOptions cross(Precision p = Precision::fp32) {
  SessionOptions o;
  o.target = Target::cuda();
  o.arch = "sm_90";
  o.tuning = Tuning::heuristic;
  o.precision = p;
  o.fallback = Fallback::error;  // a host node would fail the compile
  return o;
}

/// The kiln.cuda.Kernel nodes of `m` generated for an LSTM, by function name.
std::vector<std::string> lstm_kernels(const ir::Model& m) {
  std::vector<std::string> out;
  for (auto& n : m.main.nodes)
    if (n.domain == targets::cuda::kCudaDomain && n.op_type == "Kernel" && n.s("source_op", "") == "LSTM")
      out.push_back(n.s("fn", ""));
  return out;
}

TEST(CudaRecurrent, LstmConfigurationsCompileWithoutHostSegments) {
  std::vector<LstmConfig> configs;
  LstmConfig silero;  // Silero VAD's shape: one step, hidden 128, states in and out
  silero.input = 128, silero.hidden = 128, silero.init_h = silero.init_c = true;
  configs.push_back(silero);
  LstmConfig bi;
  bi.direction = "bidirectional", bi.seq = 37, bi.batch = 3, bi.lens = {37, 20, 0}, bi.peepholes = true;
  bi.clip = 2.f, bi.layout = 1, bi.y = false;
  configs.push_back(bi);
  LstmConfig rev;
  rev.direction = "reverse", rev.seq = 5, rev.input_forget = true, rev.bias = false, rev.yh = rev.yc = false;
  rev.activations = {"HardSigmoid", "LeakyRelu", "Softsign"};
  configs.push_back(rev);
  for (const LstmConfig& c : configs) {
    SCOPED_TRACE(c.label());
    TempDir dir;
    lstm_model(c).save(dir / "l.onnx");
    CompileResult r = compile(dir / "l.onnx", dir / "l.kiln", cross());
    EXPECT_TRUE(r.notes.empty()) << r.notes.front();
    auto cp = artifact::read_file(dir / "l.kiln");
    EXPECT_TRUE(cp.model.segments.empty());  // one device program, no host segment
    for (auto& n : cp.model.main.nodes) EXPECT_EQ(n.domain, targets::cuda::kCudaDomain) << n.label();
    // One recurrence kernel, after an input projection when seq > 8.
    auto k = lstm_kernels(cp.model);
    ASSERT_EQ(k.size(), c.seq > 8 ? 2u : 1u);
    EXPECT_NE(k.back().find("_lstm"), std::string::npos) << k.back();
    if (c.seq > 8) EXPECT_NE(k.front().find("_lstmproj"), std::string::npos) << k.front();
  }
}

TEST(CudaRecurrent, Fp16ProgramKeepsTheLstmFloat32) {
  TempDir dir;
  LstmConfig c;
  c.seq = 12, c.init_h = c.init_c = true;  // projection + recurrence kernels
  lstm_model(c).save(dir / "l.onnx");
  SessionOptions o = cross(Precision::fp16);
  o.precision_check = PrecisionCheck::off;
  compile(dir / "l.onnx", dir / "l.kiln", o);
  auto cp = artifact::read_file(dir / "l.kiln");
  EXPECT_TRUE(cp.model.segments.empty());
  int lstm = 0;
  for (auto& n : cp.model.main.nodes) {
    if (n.s("source_op", "") != "LSTM") continue;
    ++lstm;
    for (auto v : n.inputs)
      if (cp.model.value(v).dtype != DType::i32) EXPECT_EQ(cp.model.value(v).dtype, DType::f32) << cp.model.value(v).name;
    for (auto v : n.outputs) EXPECT_EQ(cp.model.value(v).dtype, DType::f32) << cp.model.value(v).name;
  }
  EXPECT_EQ(lstm, 2);
}

TEST(CudaRecurrent, GruStaysOnTheHostWithItsReason) {
  TempDir dir;
  ModelBuilder b(14);
  b.input("x", 1, {2, 1, 4});
  std::vector<float> w(3 * 4 * 4, 0.1f), r(3 * 4 * 4, -0.1f);
  b.initializer("W", {1, 12, 4}, w).initializer("R", {1, 12, 4}, r);
  auto& n = b.node("GRU", {"x", "W", "R"}, {"y"}, "gru");
  ModelBuilder::attr_int(n, "hidden_size", 4);
  b.output("y");
  b.save(dir / "g.onnx");
  try {
    compile(dir / "g.onnx", dir / "g.kiln", cross());
    FAIL() << "GRU compiled with --fallback error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("no kernel for GRU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::testing

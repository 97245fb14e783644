// WHILE conditional nodes on a GPU (label `cuda`, in kiln_cuda_conditional_gpu_tests,
// whose main prints SKIPPED without a device):
// ONNX Scan and Loop compiled to kiln.cuda.Loop nodes match the ref target,
// captured (a CUDA graph: the control kernel sets the WHILE node's
// condition on the device) and profiled (uncaptured: the decision read
// back after each iteration): a Scan cumulative sum (forward, and reversed
// with its output stacked along axis 1), a Loop with a static trip count
// carrying a value through a cuBLASLt matmul with a scan output (typed and
// untyped body), a Loop swapping its carried values, and a Loop
// whose condition comes from the data (0 to max_trips iterations).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/session.h"
#include "targets/cuda/run/cuda_ops.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {
namespace {

SessionOptions options(Target t) {
  SessionOptions o;
  o.target = t;
  o.use_cache = false;
  o.specialize_values = false;
  o.fallback = Fallback::error;  // the loop must run on the device
  return o;
}

Tensor wave(std::vector<int64_t> shape, float scale, float phase) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase);
  return t;
}

Tensor scalar_i64(int64_t v) {
  Tensor t(DType::i64, {});
  t.data<int64_t>()[0] = v;
  return t;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double a = got.data<float>()[i], b = want.data<float>()[i];
    ASSERT_LE(std::fabs(a - b), 1e-4 + 1e-3 * std::fabs(b)) << what << "[" << i << "]";
  }
}

/// Compiles `b` for this GPU, checks it has one kiln.cuda.Loop and no host
/// segment, and runs every input set on it (graph and profiled) and on the
/// ref target, comparing every output.
void check_against_ref(const kiln::testing::ModelBuilder& b, const std::vector<std::map<std::string, Tensor>>& inputs,
                       const std::string& what) {
  kiln::testing::TempDir dir;
  b.save(dir / "m.onnx");
  compile(dir / "m.onnx", dir / "m.kiln", options(Target::cuda()));
  auto cp = artifact::read_file(dir / "m.kiln");
  int loops = 0;
  for (auto& n : cp.model.main.nodes) loops += n.domain == kCudaDomain && n.op_type == "Loop";
  ASSERT_EQ(loops, 1) << what;
  ASSERT_TRUE(cp.model.segments.empty()) << what;
  SessionOptions ro = options(Target::ref());
  Session ref(dir / "m.onnx", ro);
  auto gpu = Session::load(dir / "m.kiln", options(Target::cuda()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    auto want = ref.run(inputs[k]);
    for (int pass = 0; pass < 2; ++pass) {  // twice: the graph replays with fresh state
      auto got = gpu.run(inputs[k]);
      for (auto& [name, t] : want) expect_close(got.at(name), t, what + " input " + std::to_string(k) + " " + name + " (graph)");
    }
    RunProfile prof;
    auto got = gpu.run(inputs[k], &prof);
    for (auto& [name, t] : want) expect_close(got.at(name), t, what + " input " + std::to_string(k) + " " + name + " (profiled)");
  }
}

TEST(CudaLoopProgram, ScanCumulativeSumMatchesRef) {
  for (bool reverse : {false, true}) {
    int64_t axis = reverse ? 1 : 0;
    check_against_ref(kiln::testing::scan_cumsum_model(7, 33, reverse, axis),
                      {{{"init", wave({33}, 1.f, 0.5f)}, {"x", wave({7, 33}, 2.f, 0.1f)}},
                       {{"init", wave({33}, -3.f, 0.2f)}, {"x", wave({7, 33}, 0.5f, 1.1f)}}},
                      reverse ? "scan reversed, axis 1" : "scan");
  }
  check_against_ref(kiln::testing::scan_cumsum_model(5, 16, false, 1, /*relu_after=*/true),
                    {{{"init", wave({16}, 1.f, 0.5f)}, {"x", wave({5, 16}, 2.f, 0.1f)}}}, "scan, Relus after");
}

TEST(CudaLoopProgram, StaticLoopWithScanOutputMatchesRef) {
  check_against_ref(kiln::testing::loop_static_model(6, 4, 64),
                    {{{"x0", wave({4, 64}, 1.f, 0.3f)}}, {{"x0", wave({4, 64}, -0.5f, 2.f)}}}, "static loop");
  check_against_ref(kiln::testing::loop_static_model(3, 2, 16, /*typed_body=*/false),
                    {{{"x0", wave({2, 16}, 1.f, 0.7f)}}}, "static loop, untyped body");
}

TEST(CudaLoopProgram, SwappedCarriedValuesMatchRef) {
  check_against_ref(kiln::testing::loop_swap_model(6, 8),
                    {{{"a0", wave({8}, 1.f, 0.1f)}, {"b0", wave({8}, 0.5f, 0.9f)}}}, "fibonacci swap");
}

TEST(CudaLoopProgram, DataDependentConditionMatchesRef) {
  // sum|x| of 16 elements: ~160 (no iteration), ~10 (several), ~0.2 (many,
  // until max_trips cuts in for the second M).
  std::vector<std::map<std::string, Tensor>> in;
  for (float scale : {15.f, 1.f, 0.02f})
    for (int64_t m : {1000, 3}) in.push_back({{"x", wave({16}, scale, 0.4f)}, {"max_trips", scalar_i64(m)}});
  check_against_ref(kiln::testing::loop_while_model(16, false), in, "while loop");
  kiln::testing::TempDir dir;  // the iteration counts differ between inputs
  kiln::testing::loop_while_model(16, false).save(dir / "m.onnx");
  Session ref(dir / "m.onnx", options(Target::ref()));
  float counts[3];
  for (int k = 0; k < 3; ++k) counts[k] = ref.run(in[static_cast<size_t>(2 * k)]).at("count").data<float>()[0];
  EXPECT_EQ(counts[0], 0.f);
  EXPECT_GT(counts[1], 1.f);
  EXPECT_GT(counts[2], counts[1]);
  std::printf("while loop: %g, %g and %g iterations matched the ref target\n", counts[0], counts[1], counts[2]);
}

}  // namespace
}  // namespace kiln::targets::cuda

// Conditional nodes in fp16, bf16 and TF32 programs on a GPU (label `cuda`,
// in kiln_cuda_conditional_gpu_tests, whose main prints SKIPPED without a
// device): an If and a Loop between convolutions (conv_if_model,
// conv_loop_model; the main graph 16-bit or TF32 and channels-last, the
// bodies strict float32 NCHW) compiled for this GPU with --fallback error
// match the ref target's float32 outputs within the precision's tolerance,
// on both branches of the If, captured (a CUDA graph) and profiled
// (uncaptured), from an artifact; the same models strict float32 (a cuDNN
// convolution inside a body), the matmul If / Loop models of the fp32
// tests in every kind, and Silero VAD op18 with its If on the device
// (silero_op18() says where it is looked for); the precision check's
// sigmoid head before an If on the data, checked. Compile side:
// test_cuda_control_precision.cpp.
//
// Tolerances (test_cuda_precision_gpu.cpp and docs/cuda.md, "Tolerances"):
// an element passes when |cuda - ref| <= atol * scale + rtol * |ref|,
// scale = max(1, max|ref|): fp16 2e-2, bf16 1e-1, TF32 1e-2. The models'
// dot products have K = 36 (3x3x4) and 4 (the 1x1 head), below the K = 72
// those bounds were derived for; the bodies are float32, so the error comes
// from the convolutions before and after the control flow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "gpu_compare.h"
#include "kiln/compile.h"
#include "kiln/errors.h"
#include "kiln/session.h"
#include "targets/cuda/run/cuda_ops.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

namespace kiln::targets::cuda {
namespace {

struct Kind {
  const char* name;
  Precision precision;
  bool tf32;
  double tol;  ///< rtol = atol
};
const Kind kKinds[] = {{"fp16", Precision::fp16, false, 2e-2},
                       {"bf16", Precision::bf16, false, 1e-1},
                       {"tf32", Precision::fp32, true, 1e-2}};
/// Strict float32 (test_cuda_gpu.cpp's bound): cuDNN inside a body alone.
const Kind kFp32{"fp32", Precision::fp32, false, 1e-4};

SessionOptions options(Target t, const Kind* k = nullptr) {
  SessionOptions o;
  o.target = t;
  o.use_cache = false;
  o.specialize_values = false;
  // The libraries' heuristics, no timing: these tests check values, and
  // they share the device call's few minutes with the other GPU tests.
  if (t.kind == Target::Kind::cuda) o.tuning = Tuning::heuristic;
  if (k) {
    o.precision = k->precision;
    o.allow_tf32 = k->tf32;
    o.fallback = Fallback::error;  // the If / Loop must run on the device
  }
  return o;
}

/// x [1,4,8,8] of sign `sign` times a positive wave: conv_if_model's
/// ReduceSum(Conv(x)) then has a fixed sign per `sign` (W1's sum decides
/// which; both signs are run, so both branches are).
Tensor input(float sign, float phase) {
  Tensor t(DType::f32, {1, 4, 8, 8});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = sign * (0.2f + std::fabs(std::sin(0.37f * static_cast<float>(i) + phase)));
  return t;
}

/// Compiles `b` as kind `k` for this GPU, checks it holds one kiln.cuda
/// `op` and no host segment, and runs each input set on it (graph twice,
/// then profiled) and on the ref target, comparing every output.
void check_against_ref(const kiln::testing::ModelBuilder& b, const Kind& k, const char* op,
                       const std::vector<std::map<std::string, Tensor>>& inputs) {
  const std::string what = std::string(k.name) + " " + op;
  kiln::testing::TempDir dir;
  b.save(dir / "m.onnx");
  compile(dir / "m.onnx", dir / "m.kiln", options(Target::cuda(), &k));
  auto cp = artifact::read_file(dir / "m.kiln");
  int found = 0;
  for (auto& n : cp.model.main.nodes) found += n.domain == kCudaDomain && n.op_type == op;
  ASSERT_EQ(found, 1) << what;
  ASSERT_TRUE(cp.model.segments.empty()) << what;
  Session ref(dir / "m.onnx", options(Target::ref()));
  auto gpu = Session::load(dir / "m.kiln", options(Target::cuda(), &k));
  double worst = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto want = ref.run(inputs[i]);
    for (int pass = 0; pass < 3; ++pass) {  // graph twice (fresh state each replay), then profiled
      RunProfile prof;
      const auto got = pass < 2 ? gpu.run(inputs[i]) : gpu.run(inputs[i], &prof);
      for (auto& [name, t] : want)
        worst = std::max(worst, kiln::testing::expect_within(got.at(name), t,
                                              what + " input " + std::to_string(i) + " " + name +
                                                  (pass < 2 ? " (graph)" : " (profiled)"),
                                              kiln::testing::Tol{k.tol, k.tol}));
    }
  }
  std::printf("%s: worst error %.2f of the tolerance %.0e over %zu input(s)\n", what.c_str(), worst, k.tol,
              inputs.size());
}

/// x [b, d] of sign `sign` (data_if_gemm_model's ReduceSum(x) > 0 picks then for +1).
Tensor signed_rows(int64_t b, int64_t d, float sign) {
  Tensor t(DType::f32, {b, d});
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = sign * (0.1f + std::fabs(std::sin(0.37f * static_cast<float>(i))));
  return t;
}

Tensor wave(std::vector<int64_t> shape, float scale, float phase) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase);
  return t;
}

// Bodies with cuBLASLt matmuls and generated kernels only (what the fp32
// conditional tests run): the precision and layout passes around them.
TEST(CudaControlPrecisionProgram, MatmulIfAndLoopMatchRefInEveryKind) {
  for (const Kind& k : kKinds) {
    check_against_ref(kiln::testing::data_if_gemm_model(8, 256), k, "If",
                      {{{"x", signed_rows(8, 256, 1.f)}}, {{"x", signed_rows(8, 256, -1.f)}}});
    check_against_ref(kiln::testing::loop_static_model(6, 4, 64), k, "Loop",
                      {{{"x0", wave({4, 64}, 1.f, 0.3f)}}, {{"x0", wave({4, 64}, -0.5f, 2.f)}}});
  }
}

// A cuDNN convolution (and its bias Add) captured into a conditional body,
// strict float32: apart from the precision and layout passes.
TEST(CudaControlPrecisionProgram, ConvolutionInABodyMatchesRefInFloat32) {
  std::vector<std::map<std::string, Tensor>> in;
  for (float sign : {1.f, -1.f}) in.push_back({{"x", input(sign, 0.3f)}});
  check_against_ref(kiln::testing::conv_if_model(), kFp32, "If", in);
  check_against_ref(kiln::testing::conv_loop_model(3), kFp32, "Loop", in);
}

TEST(CudaControlPrecisionProgram, IfBetweenConvolutionsMatchesRefOnBothBranches) {
  // The two signs take different branches (ReduceSum(c) changes sign with
  // x): the ref's outputs show it.
  kiln::testing::TempDir dir;
  kiln::testing::conv_if_model().save(dir / "m.onnx");
  Session ref(dir / "m.onnx", options(Target::ref()));
  std::vector<std::map<std::string, Tensor>> in;
  for (float sign : {1.f, -1.f}) in.push_back({{"x", input(sign, 0.3f)}});
  const Tensor z0 = ref.run(in[0]).at("z"), z1 = ref.run(in[1]).at("z");
  // z = branch + r with r = Relu(c) >= 0: the else branch (3 Sigmoid(r) >=
  // 1.5) makes every z >= 1.5, the then branch (a Relu) leaves z near 0
  // where r is 0 (ONNX Runtime: min z 1.5 for sign +1, 0.0068 for -1).
  float min0 = INFINITY, min1 = INFINITY;
  for (int64_t i = 0; i < z0.numel(); ++i) min0 = std::min(min0, z0.data<float>()[i]), min1 = std::min(min1, z1.data<float>()[i]);
  EXPECT_NE(min0 > 1.4f, min1 > 1.4f) << "both inputs take the same branch (min z " << min0 << ", " << min1 << ")";
  for (const Kind& k : kKinds) check_against_ref(kiln::testing::conv_if_model(), k, "If", in);
}

TEST(CudaControlPrecisionProgram, LoopBetweenConvolutionsMatchesRef) {
  std::vector<std::map<std::string, Tensor>> in;
  for (float sign : {1.f, -1.f}) in.push_back({{"x", input(sign, 1.1f)}});
  for (const Kind& k : kKinds) check_against_ref(kiln::testing::conv_loop_model(3), k, "Loop", in);
}

// The precision check's sigmoid head before an If on the data, fp16: the
// check keeps the head's subtraction and the convolutions feeding it in
// float32 (the If bounds it: the sum deciding the branch is compared), so
// the GPU takes ref's branch for both inputs (ysum 248 < 256 for the ramp,
// 264 for its negation: the else and the then branch) and its output
// matches ref within the fp16 tolerance. Without the check (off) the head's
// output is 0.44 of its scale off (test_cuda_precision_gpu.cpp's head).
TEST(CudaControlPrecisionProgram, CheckedHeadBeforeADataIfMatchesRefInFp16) {
  kiln::testing::TempDir dir;
  kiln::testing::data_if_head_model().save(dir / "m.onnx");
  const Kind& k = kKinds[0];
  compile(dir / "m.onnx", dir / "m.kiln", options(Target::cuda(), &k));
  auto cp = artifact::read_file(dir / "m.kiln");
  const auto check = nlohmann::json::parse(cp.metadata_json).at("precision_check");
  ASSERT_EQ(check.value("state", ""), "checked") << check.dump();
  std::vector<std::string> kept;
  for (auto& n : check.at("kept")) kept.push_back(n.at("node").get<std::string>());
  std::sort(kept.begin(), kept.end());
  // (each Conv's bias split into an Add before the check, as cross-compiled:
  // test_cuda_control_precision.cpp, CheckedHeadBeforeADataIfCompiles)
  EXPECT_EQ(kept, (std::vector<std::string>{"conv_a", "conv_a_bias", "conv_b", "conv_b_bias", "sub"})) << check.dump();
  ASSERT_EQ(check.value("boundaries", nlohmann::json::array()).size(), 1u) << check.dump();
  Tensor ramp(DType::f32, {1, 4, 8, 8}), neg(DType::f32, {1, 4, 8, 8});
  for (int64_t i = 0; i < ramp.numel(); ++i) {
    ramp.data<float>()[i] = 0.5f + 0.5f * std::sin(0.37f * static_cast<float>(i));
    neg.data<float>()[i] = -ramp.data<float>()[i];
  }
  check_against_ref(kiln::testing::data_if_head_model(), k, "If", {{{"x", ramp}}, {{"x", neg}}});
}

/// Silero VAD (op18) at batch 1, 576 samples of `phase`'s wave, sample
/// rate `sr`, state `state` (zeros: empty).
std::map<std::string, Tensor> silero_chunk(float phase, int64_t sr, const Tensor& state) {
  Tensor rate(DType::i64, {});
  rate.data<int64_t>()[0] = sr;
  Tensor st = state;
  if (!st.defined()) {
    st = Tensor(DType::f32, {2, 1, 128});
    std::fill_n(st.data<float>(), st.numel(), 0.f);
  }
  return {{"input", wave({1, 576}, 0.1f, phase)}, {"sr", rate}, {"state", st}};
}

/// The op18 Silero VAD to run: KILN_SILERO_OP18, else .gpu/models/silero_vad.onnx
/// (where the device calls stage models, scripts/device/README.md; relative
/// to the repository root remote.sh runs from), else the checkout's
/// .models/silero_vad.onnx; "" when none is there.
std::string silero_op18() {
  if (const char* e = std::getenv("KILN_SILERO_OP18"); e && *e) return e;
  for (std::filesystem::path p : {std::filesystem::path(".gpu/models/silero_vad.onnx"),
                                  std::filesystem::path(KILN_SOURCE_DIR) / ".models" / "silero_vad.onnx"})
    if (std::filesystem::exists(p)) return p.string();
  return "";
}

// Silero VAD op18 (silero_op18(); skipped when there is none), value
// specialization off: its If on the sample rate, around the whole model,
// runs as a conditional node (both branches: sr 16000 and 8000), three
// chunks with the state fed back, fp32 and fp16 (the If and its bodies
// float32 in both), against ref: max|diff| <= 1e-3 x max|ref| (the zoo's
// fp32 bound against ONNX Runtime) for fp32, the fp16 tolerance above.
TEST(CudaControlPrecisionProgram, SileroVadIfRunsOnTheDevice) {
  const std::string path = silero_op18();
  if (path.empty())
    GTEST_SKIP() << "no op18 silero_vad.onnx (KILN_SILERO_OP18, .gpu/models/ or .models/): Silero VAD not run";
  std::printf("silero op18: %s\n", path.c_str());
  kiln::testing::TempDir dir;
  Session ref(path, options(Target::ref()));
  for (const Kind* k : {&kFp32, &kKinds[0]}) {
    SessionOptions o = options(Target::cuda(), k);
    o.input_shapes = {{"input", {1, 576}}, {"state", {2, 1, 128}}};
    compile(path, dir / "s.kiln", o);
    auto cp = artifact::read_file(dir / "s.kiln");
    int ifs = 0;
    for (auto& n : cp.model.main.nodes) ifs += n.domain == kCudaDomain && n.op_type == "If";
    ASSERT_EQ(ifs, 1) << k->name;
    ASSERT_TRUE(cp.model.segments.empty()) << k->name;
    auto gpu = Session::load(dir / "s.kiln", options(Target::cuda(), k));
    for (int64_t sr : {16000, 8000}) {
      Tensor state;
      double worst = 0, rel = 0;
      for (int chunk = 0; chunk < 3; ++chunk) {
        const auto in = silero_chunk(0.5f + 1.3f * static_cast<float>(chunk), sr, state);
        const auto want = ref.run(in);
        const auto got = gpu.run(in);
        for (auto& [name, w] : want) {
          const std::string what = std::string(k->name) + " sr " + std::to_string(sr) + " chunk " +
                                   std::to_string(chunk) + " " + name;
          if (k == &kFp32) {
            double d = 0, m = 0;
            for (int64_t i = 0; i < w.numel() && got.at(name).numel() == w.numel(); ++i) {
              d = std::max(d, std::fabs(double(got.at(name).data<float>()[i]) - w.data<float>()[i]));
              m = std::max(m, std::fabs(double(w.data<float>()[i])));
            }
            ASSERT_EQ(got.at(name).numel(), w.numel()) << what;
            EXPECT_LE(d, 1e-3 * m) << what;
            rel = std::max(rel, m > 0 ? d / m : d);
          } else {
            worst = std::max(worst, kiln::testing::expect_within(got.at(name), w, what, kiln::testing::Tol{k->tol, k->tol}));
          }
        }
        state = want.at("stateN");
      }
      std::printf("silero op18 %s sr %lld: %s %.2e\n", k->name, static_cast<long long>(sr),
                  k == &kFp32 ? "max|diff|/max|ref|" : "worst error / tolerance", k == &kFp32 ? rel : worst);
    }
  }
}

}  // namespace
}  // namespace kiln::targets::cuda

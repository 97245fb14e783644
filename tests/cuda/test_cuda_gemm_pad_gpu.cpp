// Matmuls with n not 16-byte aligned, padded (issue #20, pad_matmul_n), on
// a GPU against the ref target (label `cuda`, part of
// kiln_cuda_kernels_gpu_tests, which prints SKIPPED without a device):
// the padded Gemm with its bias / Relu / Gelu epilogues, transB, the
// compaction kernel with the Cast to float32 (16-bit programs), in float32,
// TF32, fp16 and bf16; the same models with KILN_CUDA_GEMM_PAD_N=0 (today's
// lowering) within the same tolerances; and Slices fused into element-wise
// kernels. test_cuda_gemm_pad.cpp checks the programs' form and runs these
// models on ref and cpu.
//
// Tolerances (gpu_compare.h: |cuda - ref| <= atol * scale + rtol * |ref|,
// scale = max(1, max |ref|)): float32 1e-4 / 1e-5 (cuBLASLt sums k = 96 or
// 256 products in another order); TF32, fp16 and bf16 the forms of
// test_cuda_precision_gpu.cpp (1e-2, 2e-2, 1e-1: k <= 96 products of rounded
// inputs, then the outputs' rounding, is what they were derived for; the
// padded columns add nothing: their B entries are zeros and are cut off).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "cuda_models.h"
#include "gpu_compare.h"
#include "kiln/options.h"
#include "kiln/session.h"
#include "pad_models.h"
#include "scoped_env.h"

namespace kiln::testing {
namespace {

struct Precisions {
  Precision p;
  bool tf32;
  Tol tol;
};

const std::vector<Precisions>& precisions() {
  static const std::vector<Precisions> all = {{Precision::fp32, false, {1e-4, 1e-5}},
                                              {Precision::fp32, true, {1e-2, 1e-2}},
                                              {Precision::fp16, false, {2e-2, 2e-2}},
                                              {Precision::bf16, false, {1e-1, 1e-1}}};
  return all;
}

SessionOptions options(Target t, Precision p = Precision::fp32, bool tf32 = false) {
  SessionOptions o;
  o.target = t;
  o.precision = p;
  o.allow_tf32 = tf32;
  o.use_cache = false;
  return o;
}

/// Compiles `model` for cuda in every precision (with KILN_CUDA_GEMM_PAD_N
/// `pad`) and for ref, runs both on the same smooth signed inputs and checks
/// every output. Returns the worst error / tolerance.
double compare(const std::string& name, const ModelBuilder& model, const char* pad) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", pad);
  TempDir dir;
  model.save(dir / "m.onnx");
  Session ref(dir / "m.onnx", options(Target::ref()));
  std::map<std::string, Tensor> in;
  float phase = 0.3f;
  for (auto& t : ref.inputs()) {
    Tensor x(DType::f32, t.dims);
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + phase) + 0.3f * std::cos(0.013f * static_cast<float>(i));
    in[t.name] = x;
    phase += 0.7f;
  }
  const auto want = ref.run(in);
  double worst = 0;
  for (const auto& pr : precisions()) {
    const std::string what =
        fmt::format("{} {} (KILN_CUDA_GEMM_PAD_N={})", name, precision_text(pr.p, pr.tf32), pad ? pad : "unset");
    Session gpu(dir / "m.onnx", options(Target::cuda(), pr.p, pr.tf32));
    auto got = gpu.run(in);
    for (auto& [out, w] : want) {
      if (!got.count(out)) {
        ADD_FAILURE() << what << ": no output " << out;
        continue;
      }
      double e = expect_within(got.at(out), w, what + " " + out, pr.tol);
      std::printf("%-64s %-3s worst error / tolerance %.3f\n", what.c_str(), out.c_str(), e);
      worst = std::max(worst, e);
    }
  }
  return worst;
}

// Forced padding (the models are under the size rule): MatMul with a bias
// and Relu or Gelu fused, B shared by two batches of A; Gemm transB with
// alpha and a bias C (beta 2); an LM head (no bias: in fp16 / bf16 the
// compaction kernel casts to float32).
TEST(CudaGemmPadGpu, PaddedMatmulsMatchRef) {
  compare("mm+bias+relu", pad_matmul_model(2, 32, 96, 1001, true, "Relu"), "1");
  compare("mm+bias+gelu", pad_matmul_model(2, 32, 96, 1001, true, "Gelu"), "1");
  compare("gemm transB+bias", pad_gemm_model(64, 96, 1001, true, "bias"), "1");
  compare("gemm+bias", pad_gemm_model(64, 96, 1001, false, "bias"), "1");
  compare("lm head", pad_matmul_model(0, 64, 96, 1001, false, ""), "1");
}

// The size rule pads this one by itself (m 1024, k 96, n 1001).
TEST(CudaGemmPadGpu, SizeRulePaddedLmHeadMatchesRef) {
  compare("lm head m1024", pad_matmul_model(4, 256, 96, 1001, false, ""), nullptr);
}

// Today's lowering of the same models (KILN_CUDA_GEMM_PAD_N=0), and the ones
// the pass leaves alone even when forced: a residual C and a Gemm's full C.
TEST(CudaGemmPadGpu, UnpaddedFormsMatchRef) {
  compare("mm+bias+relu", pad_matmul_model(2, 32, 96, 1001, true, "Relu"), "0");
  compare("lm head m1024", pad_matmul_model(4, 256, 96, 1001, false, ""), "0");
  compare("residual", pad_residual_model(64, 96, 1001), "1");
  compare("gemm full C", pad_gemm_model(64, 96, 1001, false, "full"), "1");
}

// Slices fused into element-wise kernels as gathers (vector and element
// loads), and a Slice kernel of its own.
TEST(CudaGemmPadGpu, SliceGathersMatchRef) { compare("slices", slice_chain_model(), nullptr); }

}  // namespace
}  // namespace kiln::testing

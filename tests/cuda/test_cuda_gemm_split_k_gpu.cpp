// Split-K cuBLASLt algorithms (issue #20: batch-1 matmuls with few output
// tiles; tune_gemm times them beside the heuristic's) on a GPU (label `cuda`,
// part of kiln_cuda_kernels_gpu_tests, which prints SKIPPED without a
// device):
//  - gemm_split_k_variants on BERT-base's batch-1 attention output
//    projection (m 128, n 768, k 768, float16, bias): the variants exist on
//    this device's cuBLASLt (on the H200 with cuBLASLt 13 the heuristic's
//    algorithms for the FFN's k 3072 offer none, those for k 768 do), each
//    reduces in float32, and each one's D matches a float64 host product of
//    the same half-precision inputs;
//  - whole models (MatMul + bias [+ Relu], the shapes above and ResNet-50
//    layer4's 1x1 convolution as a matmul, m 49 n 2048 k 512) compiled with
//    and without split-K (KILN_CUDA_GEMM_SPLIT_K=0) against the ref target.
//
// Tolerances: the D of a float16 matmul is rounded once to float16 (2^-11
// relative) after float32 sums of k products; the products of exactly
// representable inputs are exact in float32, and 768 float32 additions in
// any order err by at most ~k * 2^-24 ~ 5e-5 of the sum of |products|, so
// |D - host| <= 2^-11 |host| + 1e-3 * scale (scale = max |host|, >= 1) holds
// with room. Models: gpu_compare.h's forms, float32 1e-4 / 1e-5 and fp16
// 2e-2 / 2e-2 (test_cuda_precision_gpu.cpp derives them).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "cuda_models.h"
#include "gpu_compare.h"
#include "kiln/session.h"
#include "pad_models.h"
#include "support/half.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/blaslt_api.h"
#include "targets/cuda/run/driver.h"
#include "scoped_env.h"

namespace kiln::testing {
namespace {

using targets::cuda::DeviceBuffer;
using targets::cuda::GemmAlgo;
using targets::cuda::GemmDescs;
using targets::cuda::GemmPlan;
using targets::cuda::GemmSpec;

/// n values of 0.5 sin(0.37 i + phase) + 0.1 cos(0.011 i), rounded to float16.
std::vector<uint16_t> half_wave(size_t n, float phase) {
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i)
    h[i] = float_to_half(0.5f * std::sin(0.37f * static_cast<float>(i) + phase) +
                         0.1f * std::cos(0.011f * static_cast<float>(i)));
  return h;
}

DeviceBuffer upload(const std::vector<uint16_t>& h) {
  DeviceBuffer d(h.size() * 2, "a split-K test buffer");
  targets::cuda::check(targets::cuda::driver().cuMemcpyHtoD(d.get(), h.data(), h.size() * 2), "cuMemcpyHtoD");
  return d;
}

TEST(CudaGemmSplitK, VariantsOfTheAttentionOutputProjectionMatchAHostProduct) {
  targets::cuda::use_device(0);
  GemmSpec s;
  s.m = 128, s.n = 768, s.k = 768;
  s.dtype = DType::f16;
  s.has_bias = true;
  const auto a = half_wave(s.m * s.k, 0.3f), b = half_wave(s.k * s.n, 1.1f), bias = half_wave(s.n, 2.0f);
  DeviceBuffer da = upload(a), db = upload(b), dbias = upload(bias), dd(s.m * s.n * 2, "D");
  GemmDescs descs(s, dbias.get());
  const size_t max_ws = size_t{32} << 20;
  auto cands = targets::cuda::gemm_heuristic(descs, max_ws, 4);
  ASSERT_FALSE(cands.empty());
  std::vector<GemmAlgo> variants;
  for (const auto& c : cands)
    for (auto& v : targets::cuda::gemm_split_k_variants(descs, s, c, {2, 4, 8, 16}, max_ws)) variants.push_back(v);
  std::printf("cuBLASLt %zu heuristic algorithms, %zu split-K variants\n", cands.size(), variants.size());
  ASSERT_FALSE(variants.empty()) << "no heuristic algorithm of this matmul can split k on this device";

  // The float64 product of the same rounded inputs, plus the bias.
  std::vector<double> want(s.m * s.n);
  double scale = 1;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = half_to_float(bias[j]);
      for (int64_t p = 0; p < s.k; ++p) acc += double(half_to_float(a[i * s.k + p])) * half_to_float(b[p * s.n + j]);
      want[i * s.n + j] = acc;
      scale = std::max(scale, std::fabs(acc));
    }
  const auto& api = targets::cuda::blaslt_api();
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    cublasLtMatmulAlgo_t algo;
    std::memcpy(&algo, variants[vi].words.data(), sizeof algo);
    int32_t splits = 0;
    uint32_t scheme = 0;
    size_t written = 0;
    api.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits, &written);
    api.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme,
                                             &written);
    EXPECT_GT(splits, 1) << "variant " << vi;
    EXPECT_EQ(scheme, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)) << "variant " << vi;
    GemmPlan plan(s, variants[vi].words, variants[vi].workspace, dbias.get(), "split-K test");
    DeviceBuffer ws(std::max<size_t>(variants[vi].workspace, 256), "workspace");
    targets::cuda::check(targets::cuda::driver().cuMemsetD8Async(dd.get(), 0xff, dd.bytes(), nullptr), "memset");
    plan.run(nullptr, da.get(), db.get(), 0, dd.get(), ws.get(), ws.bytes());
    targets::cuda::check(targets::cuda::driver().cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<uint16_t> got(s.m * s.n);
    targets::cuda::check(targets::cuda::driver().cuMemcpyDtoH(got.data(), dd.get(), got.size() * 2), "cuMemcpyDtoH");
    double worst = 0;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = half_to_float(got[i]), w = want[i];
      const double r = std::fabs(g - w) / (std::ldexp(std::fabs(w), -11) + 1e-3 * scale);
      if (!(r <= 1) && bad++ < 3) ADD_FAILURE() << "split " << splits << " [" << i << "]: " << g << " want " << w;
      worst = std::max(worst, std::isnan(r) ? INFINITY : r);
    }
    std::printf("split-K %2d (workspace %zu bytes): worst error / tolerance %.3f\n", splits, variants[vi].workspace, worst);
  }
}

/// Compiles `model` for cuda in float32 and fp16 with KILN_CUDA_GEMM_SPLIT_K
/// `split` and for ref, and checks every output on the same inputs.
void compare(const std::string& name, const ModelBuilder& model, const char* split) {
  ScopedEnv env("KILN_CUDA_GEMM_SPLIT_K", split);
  TempDir dir;
  model.save(dir / "m.onnx");
  Session ref(dir / "m.onnx", uncached_options(Target::ref(), Precision::fp32));
  std::map<std::string, Tensor> in;
  for (auto& t : ref.inputs()) {
    Tensor x(DType::f32, t.dims);
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + 0.3f) + 0.3f * std::cos(0.013f * static_cast<float>(i));
    in[t.name] = x;
  }
  const auto want = ref.run(in);
  for (auto [p, tol] : {std::pair{Precision::fp32, Tol{1e-4, 1e-5}}, std::pair{Precision::fp16, Tol{2e-2, 2e-2}}}) {
    const std::string what = fmt::format("{} {} (KILN_CUDA_GEMM_SPLIT_K={})", name, precision_text(p, false),
                                         split ? split : "unset");
    Session gpu(dir / "m.onnx", uncached_options(Target::cuda(), p));
    auto got = gpu.run(in);
    double e = expect_within(got.at("y"), want.at("y"), what, tol);
    std::printf("%-60s worst error / tolerance %.3f\n", what.c_str(), e);
  }
}

TEST(CudaGemmSplitK, FewTileMatmulsMatchRefWithAndWithoutSplitK) {
  for (const char* split : {static_cast<const char*>(nullptr), "0"}) {
    compare("ffn down m128 n768 k3072 +bias", pad_matmul_model(0, 128, 3072, 768, true, ""), split);
    compare("1x1 conv m49 n2048 k512 +bias+relu", pad_matmul_model(0, 49, 512, 2048, true, "Relu"), split);
  }
}

}  // namespace
}  // namespace kiln::testing

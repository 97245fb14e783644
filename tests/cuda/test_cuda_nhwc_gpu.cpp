// DenseNet's dense layer on a GPU (label `cuda`, part of kiln_cuda_gpu_tests,
// whose main() prints SKIPPED and exits 77 without a device): Concat ->
// BatchNormalization -> Relu -> Conv -> AveragePool (dense_block_model), the
// BatchNormalization lowered as a per-channel Mul + Add fused with the Relu
// (batch_norm_to_affine) and, in float16, the whole layer channels-last
// (to_nhwc), against the ref target's float32 outputs at batch 1 and 4.
// test_cuda_layout.cpp checks the same graph's rewrite without a GPU. Also
// Concat's vectorized copies (gen_data.cpp) against ref, bit for bit.
//
// Tolerances: an output element passes when
//     |cuda - ref| <= atol * scale + rtol * |ref|,  scale = max(1, max |ref|)
// (test_cuda_precision_gpu.cpp's form). float32: 1e-4 (cuDNN's float32
// algorithms and s*x + t against (x - mean) / sqrt(var + eps) * scale + B
// differ by a few float32 ulps per term over K = 162 products). float16:
// with u = 2^-11 and the derivation of test_cuda_precision_gpu.cpp, c = 4
// roundings in sequence and sqrt(K) = sqrt(18 * 9) = 12.7 give
// 4 * 2^-11 * 12.7 = 2.5e-2 -> 3e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "artifact/artifact.h"
#include "nhwc_models.h"
#include "kiln/compile.h"
#include "kiln/session.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

Tensor cosine_input(std::vector<int64_t> shape, float phase) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::cos(0.23f * static_cast<float>(i) + phase);
  return t;
}

SessionOptions session_options(Target t, Precision p) {
  SessionOptions o;
  o.target = t;
  o.precision = p;
  o.use_cache = false;
  return o;
}

/// Largest |got - want| / (tol * scale + tol * |want|); adds a failure for
/// the first few elements out of tolerance.
double worst_ratio(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), DType::f32) << what;
  if (got.shape() != want.shape() || got.dtype() != DType::f32) return INFINITY;
  double scale = 1, worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
  int bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.data<float>()[i], w = want.data<float>()[i];
    double r = std::fabs(g - w) / (tol * scale + tol * std::fabs(w));
    if (!(r <= 1)) {
      if (bad++ < 5) ADD_FAILURE() << what << "[" << i << "]: cuda " << g << ", ref " << w << " (scale " << scale << ")";
      r = std::isnan(r) ? INFINITY : r;
    }
    worst = std::max(worst, r);
  }
  return worst;
}

/// Compiles dense_block_model(batch) for cuda with precision `p`, checks
/// what the artifact holds (no BatchNormalization kernel; `transposes`
/// Transpose kernels) and runs it against ref within `tol`.
void check_dense_block(int64_t batch, Precision p, int transposes, double tol) {
  TempDir dir;
  const fs::path model = dir / "dense.onnx", art = dir / "dense.kiln";
  dense_block_model(batch).save(model);
  const std::string what = "dense block batch " + std::to_string(batch) + " " + precision_text(p, false);
  SessionOptions gpu = session_options(Target::cuda(), p);
  compile(model, art, gpu);
  std::map<std::string, int> kernels;
  for (auto& n : artifact::read_file(art).model.main.nodes)
    if (n.op_type == "Kernel") ++kernels[n.s("source_op", "")];
  EXPECT_EQ(kernels["BatchNormalization"], 0) << what << ": the BatchNormalization is not a Mul + Add";
  EXPECT_EQ(kernels["Transpose"], transposes) << what;
  EXPECT_GE(kernels["Relu"], 1) << what << ": the affine and the Relu are one kernel";
  std::map<std::string, Tensor> in{{"x", cosine_input({batch, 4, 8, 8}, 0.3f)},
                                   {"z", cosine_input({batch, 2, 8, 8}, 1.1f)}};
  Tensor want = Session(model, session_options(Target::ref(), Precision::fp32)).run(in).at("y");
  Tensor got = Session::load(art, gpu).run(in).at("y");
  std::printf("%-32s worst error / tolerance %.3f\n", what.c_str(), worst_ratio(got, want, tol, what));
}

// Strict float32 keeps NCHW (no transposes); the affine still fuses.
TEST(CudaDenseBlockGpu, Fp32MatchesRef) {
  for (int64_t batch : {1, 4}) check_dense_block(batch, Precision::fp32, 0, 1e-4);
}

// float16: x and z enter the channels-last region, y leaves it; nothing
// between the Concat and the convolution goes back to NCHW.
TEST(CudaDenseBlockGpu, Fp16StaysChannelsLastAndMatchesRef) {
  for (int64_t batch : {1, 4}) check_dense_block(batch, Precision::fp16, 3, 3e-2);
}

// Concat's vector path (gen_data.cpp): channels-last shapes whose rows are
// multiples of 8 elements copy 16 bytes per access in float16 (8 elements)
// and float32 (4), a row of 6 channels falls to 2 elements per access,
// and an axis-1 Concat keeps len * H * W rows. The values are multiples of
// 1/8 below 64, exact in float16: the outputs equal ref bit for bit.
TEST(CudaConcatGpu, VectorizedCopiesMatchRefExactly) {
  TempDir dir;
  ModelBuilder b(17);
  b.input("a", 1, {2, 3, 5, 8}).input("c", 1, {2, 3, 5, 16}).input("d", 1, {2, 3, 5, 6});
  ModelBuilder::attr_int(b.node("Concat", {"a", "c", "a"}, {"y8"}), "axis", 3);
  ModelBuilder::attr_int(b.node("Concat", {"a", "d", "c"}, {"y6"}), "axis", 3);
  ModelBuilder::attr_int(b.node("Concat", {"c", "c"}, {"y1"}), "axis", 1);
  b.output("y8", 1, {2, 3, 5, 32}).output("y6", 1, {2, 3, 5, 30}).output("y1", 1, {2, 6, 5, 16});
  b.save(dir / "concat.onnx");
  auto exact = [](std::vector<int64_t> shape, int salt) {
    Tensor t(DType::f32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>((i * 7 + salt) % 509) / 8.f;
    return t;
  };
  std::map<std::string, Tensor> in{
      {"a", exact({2, 3, 5, 8}, 1)}, {"c", exact({2, 3, 5, 16}, 2)}, {"d", exact({2, 3, 5, 6}, 3)}};
  auto want = Session(dir / "concat.onnx", session_options(Target::ref(), Precision::fp32)).run(in);
  for (Precision p : {Precision::fp32, Precision::fp16}) {
    auto got = Session(dir / "concat.onnx", session_options(Target::cuda(), p)).run(in);
    for (auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      const Tensor& g = got.at(name);
      ASSERT_EQ(g.shape(), w.shape()) << name;
      int bad = 0;
      for (int64_t i = 0; i < w.numel(); ++i)
        if (g.data<float>()[i] != w.data<float>()[i] && bad++ < 5)
          ADD_FAILURE() << name << " " << precision_text(p, false) << "[" << i << "]: cuda " << g.data<float>()[i]
                        << ", ref " << w.data<float>()[i];
    }
  }
}

}  // namespace
}  // namespace kiln::testing

// kiln.cpu.SkinnyMatMul (compile/skinny_matmul.cpp, run/skinny_matmul.cpp):
// products of 2 to 6 rows by constant weights on kiln's own kernel where
// oneDNN would run its sgemm (no AVX-512). Values against the ref target;
// weights in both orientations; N not a multiple of the 16-column panel;
// bias and post-ops; the artifact round trip; a corrupt node refused.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_test_util.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::testing {
namespace {

/// True when oneDNN runs a [M, K] x [K, N] f32 matmul on its sgemm here (no
/// AVX-512): the only machines where kiln uses SkinnyMatMul.
bool sgemm_here(int64_t M, int64_t K, int64_t N) {
  ir::Node probe;
  probe.op_type = "MatMul";
  probe.domain = "kiln.cpu";
  targets::cpu::set_md_attr(probe, "md.src", targets::cpu::plain_md({M, K}));
  targets::cpu::set_md_attr(probe, "md.wei", targets::cpu::plain_md({K, N}));
  targets::cpu::set_md_attr(probe, "md.dst", targets::cpu::plain_md({M, N}));
  return std::string(targets::cpu::matmul_pd(probe).impl_info_str()).find("gemm") != std::string::npos;
}

/// Every output of b on cpu within 1e-5 + 1e-5 |ref| of the ref target's.
void expect_close_to_ref(const ModelBuilder& b, const std::map<std::string, Tensor>& in, const std::string& what) {
  auto ref = run_on(b, Target::ref(), in);
  auto cpu = run_on(b, Target::cpu(), in);
  for (auto& [name, r] : ref) {
    const Tensor& c = cpu.at(name);
    ASSERT_EQ(c.shape(), r.shape()) << what;
    for (int64_t i = 0; i < r.numel(); ++i) {
      const float want = r.data<float>()[i];
      ASSERT_NEAR(c.data<float>()[i], want, 1e-5 + 1e-5 * std::fabs(want)) << what << " " << name << " [" << i << "]";
    }
  }
}

/// y = a [M, K] x W (+ c): MatMul, or Gemm with W stored transposed ([N, K], transB).
ModelBuilder product(int64_t M, int64_t K, int64_t N, bool trans_b, bool bias) {
  ModelBuilder b;
  b.input("a", 1, {M, K});
  b.initializer("w", trans_b ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N}, seeded_values({K, N}, 3));
  if (bias) b.initializer("c", {N}, seeded_values({N}, 4));
  if (trans_b || bias) {
    auto& g = b.node("Gemm", bias ? std::vector<std::string>{"a", "w", "c"} : std::vector<std::string>{"a", "w"}, {"y"});
    ModelBuilder::attr_int(g, "transB", trans_b ? 1 : 0);
  } else {
    b.node("MatMul", {"a", "w"}, {"y"});
  }
  b.output("y");
  return b;
}

TEST(CpuSkinnyMatMul, TwoToSixRowsRunOnItAndMatchRef) {
  const bool sgemm = sgemm_here(2, 37, 45);
  if (!sgemm) GTEST_LOG_(INFO) << "oneDNN's matmul here is not its sgemm: products stay oneDNN's";
  for (int64_t M : {1, 2, 3, 5, 6, 7, 13})
    for (bool trans_b : {false, true}) {
      // N = 45: two full 16-column panels and a padded one; K = 37 odd.
      ModelBuilder b = product(M, 37, 45, trans_b, trans_b);
      const std::string what = "M " + std::to_string(M) + (trans_b ? " transB + bias" : "");
      const bool skinny = sgemm && M >= 2 && M <= targets::cpu::kMaxSkinnyRows;
      EXPECT_EQ(cpu_nodes(b, "SkinnyMatMul"), skinny ? 1 : 0) << what;
      expect_close_to_ref(b, {{"a", seeded({M, 37}, 10 + static_cast<uint32_t>(M))}}, what);
    }
}

// Gemm + bias -> Relu -> + residual -> * 0.5: one SkinnyMatMul, the rest its
// post-ops (applied after the product by one oneDNN binary primitive).
TEST(CpuSkinnyMatMul, BiasAndPostOpsAreCarriedOver) {
  constexpr int64_t M = 4, K = 64, N = 40;
  ModelBuilder b;
  b.input("a", 1, {M, K});
  b.input("r", 1, {M, N});
  b.initializer("w", {K, N}, seeded_values({K, N}, 5));
  b.initializer("c", {N}, seeded_values({N}, 6));
  b.initializer("half", {}, {0.5f});
  b.node("Gemm", {"a", "w", "c"}, {"g"});
  b.node("Relu", {"g"}, {"h"});
  b.node("Add", {"h", "r"}, {"s"});
  b.node("Mul", {"s", "half"}, {"y"});
  b.output("y");
  auto cp = compile_cpu(b);
  if (sgemm_here(M, K, N)) {
    ASSERT_EQ(cp.model.main.nodes.size(), 1u);
    EXPECT_EQ(cp.model.main.nodes[0].op_type, "SkinnyMatMul");
    EXPECT_EQ(targets::cpu::read_post_ops(cp.model.main.nodes[0]).size(), 3u);
  }
  Tensor a = seeded({M, K}, 7), r = seeded({M, N}, 8);
  expect_close_to_ref(b, {{"a", a}, {"r", r}}, "post-ops");
  // By hand for one element: y[1][3] = 0.5 * (max(0, sum_k a[1][k] w[k][3] + c[3]) + r[1][3]).
  auto w = seeded_values({K, N}, 5), c = seeded_values({N}, 6);
  double acc = c[3];
  for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(a.data<float>()[K + k]) * w[static_cast<size_t>(k * N + 3)];
  const double want = 0.5 * (std::max(0.0, acc) + r.data<float>()[N + 3]);
  Program p(std::move(cp));
  EXPECT_NEAR(p.run({{"a", a}, {"r", r}}, 0).at("y").data<float>()[N + 3], want, 1e-5);
}

TEST(CpuSkinnyMatMul, ArtifactRoundTripAndCorruptNodeRefused) {
  ModelBuilder b = product(3, 200, 70, true, true);
  if (!sgemm_here(3, 200, 70)) GTEST_SKIP() << "SKIPPED: oneDNN's matmul here is not its sgemm (no SkinnyMatMul)";
  auto cp = compile_cpu(b);
  ASSERT_EQ(cp.model.main.nodes.size(), 1u);
  ASSERT_EQ(cp.model.main.nodes[0].op_type, "SkinnyMatMul");
  const std::map<std::string, Tensor> in{{"a", seeded({3, 200}, 9)}};
  expect_artifact_round_trip(cp, in, "y");
  // A node whose N disagrees with its packed weights: refused at load, naming it.
  auto bad = cp;
  bad.model.main.nodes[0].attrs["N"] = int64_t{71};
  expect_refused_as_corrupt(std::move(bad), in, cp.model.main.nodes[0].name);
}

}  // namespace
}  // namespace kiln::testing

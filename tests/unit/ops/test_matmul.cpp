// MatMul and Gemm reference kernels. Literal expectations were computed with
// numpy 1.24 (np.matmul / A.T @ B.T + C) on the same integer-valued inputs, or
// by hand where noted; the randomized tests compare the packed GEMM against a
// naive triple loop written here.
#include <atomic>
#include <cmath>
#include <random>

#include "kiln/errors.h"
#include "op_test_util.h"
#include "ops/gemm_kernel.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;

std::vector<float> arange(int64_t n, float start = 0.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(MatMul, Plain2D) {
  // Hand computed: [[1,2,3],[4,5,6]] x [[1,0],[0,1],[1,1]].
  auto y = run_op("MatMul", {}, {make<float>({2, 3}, {1, 2, 3, 4, 5, 6}), make<float>({3, 2}, {1, 0, 0, 1, 1, 1})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{4, 5, 10, 11}));
}

TEST(MatMul, BatchBroadcast) {
  // numpy: arange(12).reshape(2,1,2,3) @ (arange(18).reshape(3,3,2) - 5)
  auto y = run_op("MatMul", {}, {make<float>({2, 1, 2, 3}, arange(12)), make<float>({3, 3, 2}, arange(18, -5))});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 3, 2, 2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{-5,  -2,  -32, -20, 13,  16,  40,  52,  31,  34,  112, 124,
                                                     -59, -38, -86, -56, 67,  88,  94,  124, 193, 214, 274, 304}));
}

TEST(MatMul, OneDimensionalOperands) {
  // numpy: [1,2,-1] @ arange(24).reshape(2,3,4) -> shape (2,4)
  auto y = run_op("MatMul", {}, {make<float>({3}, {1, 2, -1}), make<float>({2, 3, 4}, arange(24))});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 2, 4, 6, 24, 26, 28, 30}));
  // Matrix x vector: arange(6).reshape(2,3) @ [1,2,-1] = [0, 6]
  y = run_op("MatMul", {}, {make<float>({2, 3}, arange(6)), make<float>({3}, {1, 2, -1})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{0, 6}));
  // Vector x vector gives a scalar: 1 + 4 + 1 = 6.
  y = run_op("MatMul", {}, {make<float>({3}, {1, 2, -1}), make<float>({3}, {1, 2, -1})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{6}));
}

TEST(MatMul, IntegerAndDouble) {
  auto y = run_op("MatMul", {}, {make<int64_t>({2, 2}, {1, 2, 3, 4}), make<int64_t>({2, 1}, {5, -6})});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{-7, -9}));
  y = run_op("MatMul", {}, {make<double>({1, 2}, {0.5, 0.25}), make<double>({2, 2}, {2, 4, 8, 16})});
  EXPECT_EQ(values<double>(y[0]), (std::vector<double>{3, 6}));
}

TEST(MatMul, InnerDimensionMismatchIsAnError) {
  try {
    run_op("MatMul", {}, {make<float>({2, 3}, arange(6)), make<float>({2, 2}, arange(4))});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test_MatMul"), std::string::npos) << e.what();
  }
}

TEST(MatMul, UnsupportedDtypeNamesTheNode) {
  Tensor a(DType::f16, {2, 2}), b(DType::f16, {2, 2});
  try {
    run_op("MatMul", {}, {a, b});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("MatMul node 'test_MatMul'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
}

TEST(MatMul, SymbolicShapeInference) {
  ir::Node n;
  n.op_type = "MatMul";
  n.name = "mm";
  n.inputs = {0, 1};
  n.outputs = {2};
  ops::InType a{DType::f32, ir::Shape{ir::Dim::sym("batch"), ir::Dim::known(1), ir::Dim::sym("seq"),
                                      ir::Dim::known(768)}};
  ops::InType b{DType::f32, ir::Shape{ir::Dim::known(12), ir::Dim::known(768), ir::Dim::known(64)}};
  auto out = ops::infer(n, {a, b});
  ASSERT_TRUE(out[0].shape.has_value());
  EXPECT_EQ(*out[0].shape, (ir::Shape{ir::Dim::sym("batch"), ir::Dim::known(12), ir::Dim::sym("seq"),
                                      ir::Dim::known(64)}));
  b.shape = ir::Shape{ir::Dim::known(767), ir::Dim::known(64)};
  EXPECT_THROW(ops::infer(n, {a, b}), Error);
}

/// A stand-in GEMM for SgemmOverride: counts its calls and writes 7s.
std::atomic<int> g_calls{0};
void sevens(bool, bool, int64_t M, int64_t N, int64_t, float, const float*, int64_t, const float*, int64_t, float,
            float* C, int64_t ldc) {
  ++g_calls;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 7.f;
}

// An override takes every product of the calling thread (MatMul's batches
// on worker threads too) while it lives, and the built-in kernel comes back.
TEST(MatMul, SgemmOverrideForwardsWhileItLives) {
  auto a = make<float>({2, 3}, {1, 2, 3, 4, 5, 6}), b = make<float>({3, 2}, {1, 0, 0, 1, 1, 1});
  std::vector<float> batch_a(64 * 4 * 4, 1.f), batch_b(64 * 4 * 4, 1.f);
  {
    ops::SgemmOverride o(sevens);
    EXPECT_EQ(ops::sgemm_override(), &sevens);
    EXPECT_EQ(values<float>(run_op("MatMul", {}, {a, b})[0]), (std::vector<float>(4, 7.f)));
    g_calls = 0;
    auto y = run_op("MatMul", {}, {make<float>({64, 4, 4}, batch_a), make<float>({64, 4, 4}, batch_b)});
    EXPECT_EQ(g_calls.load(), 64);
    EXPECT_EQ(values<float>(y[0]), (std::vector<float>(64 * 16, 7.f)));
  }
  EXPECT_EQ(ops::sgemm_override(), nullptr);
  EXPECT_EQ(values<float>(run_op("MatMul", {}, {a, b})[0]), (std::vector<float>{4, 5, 10, 11}));
}

TEST(Gemm, TransposesAlphaBetaColumnC) {
  // numpy: 0.5 * A.T @ B.T + 2 * C with A 3x2, B 4x3, C 2x1.
  auto y = run_op("Gemm", {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.f}},
                  {make<float>({3, 2}, {1, 2, 3, 4, 5, 6}), make<float>({4, 3}, {1, 0, 2, -1, 3, 1, 2, 2, -2, 0, 1, 1}),
                   make<float>({2, 1}, {10, 20})});
  EXPECT_EQ(y[0].shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{25.5, 26.5, 19, 24, 47, 48, 40, 45}));
}

TEST(Gemm, RowVectorCAndScalarCAndNoC) {
  const Tensor a = make<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor b = make<float>({4, 3}, {1, 0, 2, -1, 3, 1, 2, 2, -2, 0, 1, 1});
  // numpy: A.T @ B.T + [1,2,3,4]
  auto y = run_op("Gemm", {{"transA", int64_t{1}}, {"transB", int64_t{1}}}, {a, b, make<float>({4}, {1, 2, 3, 4})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{12, 15, 1, 12, 15, 18, 3, 14}));
  // Scalar C = 100, beta 1: the same product + 100 (numpy: A.T @ B.T is the above minus [1,2,3,4]).
  y = run_op("Gemm", {{"transA", int64_t{1}}, {"transB", int64_t{1}}}, {a, b, make<float>({}, {100})});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{111, 113, 98, 108, 114, 116, 100, 110}));
  // No C.
  y = run_op("Gemm", {{"transA", int64_t{1}}, {"transB", int64_t{1}}}, {a, b});
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{11, 13, -2, 8, 14, 16, 0, 10}));
}

TEST(Gemm, BetaZeroIgnoresNaNInC) {
  auto y = run_op("Gemm", {{"beta", 0.f}},
                  {make<double>({1, 2}, {1, 2}), make<double>({2, 1}, {3, 4}), make<double>({1, 1}, {NAN})});
  EXPECT_EQ(values<double>(y[0]), (std::vector<double>{11}));
}

TEST(Gemm, BadCShapeIsAnError) {
  auto bad = [] {
    run_op("Gemm", {}, {make<float>({2, 2}, arange(4)), make<float>({2, 3}, arange(6)), make<float>({2}, {1, 2})});
  };
  EXPECT_THROW(bad(), Error);
}

/// Naive reference: C = alpha * op(A) op(B) + beta * C, in double.
std::vector<float> naive_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const std::vector<float>& A, const std::vector<float>& B, float beta,
                              const std::vector<float>& C) {
  std::vector<float> out(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
      out[i * N + j] = static_cast<float>(alpha * s + (beta == 0.f ? 0.0 : beta * C[i * N + j]));
    }
  return out;
}

std::vector<float> random_vec(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(Sgemm, MatchesNaiveLoopOnOddSizes) {
  std::mt19937 rng(7);
  // Sizes cross the register tile (6x8), the K block (256) and the parallel threshold;
  // M <= 2 takes the vector-matrix path.
  const int64_t sizes[][3] = {{1, 37, 300}, {2, 1000, 19}, {5, 3, 2}, {37, 301, 259}, {61, 70, 520}, {200, 9, 64}};
  for (auto& s : sizes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      auto A = random_vec(rng, M * K), B = random_vec(rng, K * N), C = random_vec(rng, M * N);
      for (float beta : {0.f, 1.f, -0.5f}) {
        std::vector<float> got = C;
        ops::sgemm(ta, tb, M, N, K, 1.5f, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, got.data(), N);
        auto want = naive_gemm(ta, tb, M, N, K, 1.5f, A, B, beta, C);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4f * std::sqrt(static_cast<float>(K)) + 1e-5f)
              << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " beta=" << beta
              << " at " << i;
      }
    }
  }
}

TEST(Sgemm, StridedOperandsAndZeroK) {
  // C has row stride 5 but only 3 columns are written; column 4-5 must stay untouched.
  std::vector<float> A = {1, 2, 9, 3, 4, 9};  // 2x2 with lda 3
  std::vector<float> B = {1, 1, 1, 7, 2, 0, -1, 7};  // 2x3 with ldb 4
  std::vector<float> C(10, 42.f);
  ops::sgemm(false, false, 2, 3, 2, 1.f, A.data(), 3, B.data(), 4, 0.f, C.data(), 5);
  EXPECT_EQ(C, (std::vector<float>{5, 1, -1, 42, 42, 11, 3, -1, 42, 42}));
  ops::sgemm(false, false, 2, 3, 0, 1.f, A.data(), 3, B.data(), 4, 0.5f, C.data(), 5);
  EXPECT_EQ(C, (std::vector<float>{2.5, 0.5, -0.5, 42, 42, 5.5, 1.5, -0.5, 42, 42}));
}

TEST(MatMul, LargeBatchedMatchesNaive) {
  std::mt19937 rng(11);
  const int64_t batch = 5, M = 33, K = 70, N = 41;
  auto A = random_vec(rng, batch * M * K), B = random_vec(rng, batch * K * N);
  auto y = run_op("MatMul", {}, {make<float>({batch, M, K}, A), make<float>({batch, K, N}, B)});
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> Ab(A.begin() + b * M * K, A.begin() + (b + 1) * M * K);
    std::vector<float> Bb(B.begin() + b * K * N, B.begin() + (b + 1) * K * N);
    auto want = naive_gemm(false, false, M, N, K, 1.f, Ab, Bb, 0.f, {});
    for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(y[0].data<float>()[b * M * N + i], want[i], 1e-4f);
  }
}

}  // namespace
}  // namespace kiln

// A fast single-precision matrix multiply for the reference kernels that
// dominate model run time (MatMul, Gemm, Conv, ConvTranspose).
//
// It is a cache-blocked, packed-panel GEMM in the usual Goto/BLIS structure:
// op(B) is packed into column panels that stay in L1, op(A) into row panels
// that stay in L2, and a 6x8 register-tiled micro-kernel computes each tile.
// The micro-kernel uses the compiler's generic vector extension (not ISA
// intrinsics), which -O3 lowers to baseline x86-64 SSE2: no -march, because
// artifacts must run on any x86-64. Measured ~15-20 GFLOP/s per core on large
// products. Work is split over OpenMP threads (each thread owns a slab of C,
// no barriers) unless the call is already inside a parallel region (batched
// callers parallelise over the batch instead).
#pragma once
#include <cstdint>

namespace kiln::ops {

/// C = alpha * op(A) * op(B) + beta * C, all row-major.
///
/// op(A) is M x K: A is M x K (lda >= K) or, with trans_a, K x M (lda >= M).
/// op(B) is K x N: B is K x N (ldb >= N) or, with trans_b, N x K (ldb >= K).
/// C is M x N with row stride ldc >= N. When beta == 0, C is write-only: its
/// previous contents (possibly NaN garbage from a reused buffer) are never read.
/// K == 0 gives C = beta * C. Sizes must be >= 0; this is an internal helper,
/// callers validate shapes and raise kiln::Error themselves.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// sgemm's signature.
using SgemmFn = void (*)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                         int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/// While it lives, sgemm() on the calling thread forwards every product
/// with M, N, K > 0 to `f`, a kernel with sgemm's contract (nullptr: the
/// built-in one); the previous override comes back at destruction. Two
/// callers set one, both to a library GEMM JIT-compiled for this CPU
/// (targets::library_sgemm): the precision check, for its reference runs,
/// and the cpu target around every reference kernel it runs (products with
/// data-dependent shapes, If / Loop bodies). Runs of the ref target, the
/// oracle, never do. Callers that
/// run sgemm on OpenMP worker threads pass the calling thread's override on
/// (sgemm_override()).
class SgemmOverride {
 public:
  explicit SgemmOverride(SgemmFn f);
  ~SgemmOverride();
  SgemmOverride(const SgemmOverride&) = delete;
  SgemmOverride& operator=(const SgemmOverride&) = delete;

 private:
  SgemmFn previous_;
};

/// The calling thread's sgemm override, or nullptr.
SgemmFn sgemm_override();

/// Same contract as sgemm for double and other arithmetic types, with a
/// simple cache-friendly loop (no packing): used for the less common dtypes
/// (float64, int32, int64 MatMul/Gemm). Integer arithmetic wraps as in C++.
template <class T>
void gemm_simple(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == T(0) ? T(0) : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      T a = alpha * (trans_a ? A[k * lda + i] : A[i * lda + k]);
      if (trans_b) {
        for (int64_t j = 0; j < N; ++j) c[j] += a * B[j * ldb + k];
      } else {
        const T* b = B + k * ldb;
        for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
      }
    }
  }
}

}  // namespace kiln::ops

// oneDNN's sgemm with ops::sgemm's contract (targets/kernels.h: library_sgemm).
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>

#include "support/error.h"
#include "targets/kernels.h"

namespace kiln::targets {

namespace {

// C is cut into tiles of this many rows and columns, whatever the thread
// count: each tile is one single-threaded oneDNN call (inside the parallel
// region oneDNN runs on the calling thread), so every element's sum has the
// same order with 1 thread or 64 (oneDNN left to itself may split K across
// threads). Tiles large enough that packing costs little next to the product.
constexpr int64_t kTileRows = 256;
constexpr int64_t kTileCols = 512;

}  // namespace

void library_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const int64_t row_tiles = (M + kTileRows - 1) / kTileRows, col_tiles = (N + kTileCols - 1) / kTileCols;
  const int64_t tiles = row_tiles * col_tiles;
  std::atomic<int> refused{0};
#pragma omp parallel for schedule(dynamic, 1) if (tiles > 1 && !omp_in_parallel())
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t i0 = t / col_tiles * kTileRows, j0 = t % col_tiles * kTileCols;
    const int64_t m = std::min(kTileRows, M - i0), n = std::min(kTileCols, N - j0);
    const float* a = trans_a ? A + i0 : A + i0 * lda;  // op(A) rows i0.. : columns of A when transposed
    const float* b = trans_b ? B + j0 * ldb : B + j0;  // op(B) columns j0.. : rows of B when transposed
    const dnnl_status_t st =
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, K, alpha, a, lda, b, ldb, beta, C + i0 * ldc + j0, ldc);
    if (st != dnnl_success) refused = static_cast<int>(st);
  }
  if (refused)
    fail(ErrorCode::internal, "oneDNN's sgemm refused a {}x{}x{} product (status {})", M, N, K, refused.load());
}

}  // namespace kiln::targets

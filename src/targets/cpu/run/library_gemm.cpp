// oneDNN's sgemm with ops::sgemm's contract (targets/kernels.h: library_sgemm).
#include <oneapi/dnnl/dnnl.h>

#include "support/error.h"
#include "targets/kernels.h"

namespace kiln::targets {

void library_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    fail(ErrorCode::internal, "oneDNN's sgemm refused a {}x{}x{} product (status {})", M, N, K, static_cast<int>(st));
}

}  // namespace kiln::targets

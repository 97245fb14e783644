#include "ops/gemm_kernel.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace kiln::ops {

namespace {

// Register tile: MR rows of A times NR columns of B. 6x8 fp32 accumulators are
// 12 SSE registers, leaving 4 for one B row (2) and the broadcast A element,
// which is the largest tile that fits the 16 XMM registers of baseline x86-64.
constexpr int64_t MR = 6;
constexpr int64_t NR = 8;
// Cache blocks: a KC x NR panel of B (8 KiB) lives in L1 while the MC x KC
// block of A (96 KiB) stays in L2; NC bounds the packed B block (2 MiB).
constexpr int64_t KC = 256;
constexpr int64_t MC = 96;
constexpr int64_t NC = 2048;
// Below this many multiply-adds a thread team costs more than it saves.
constexpr int64_t kParallelMacs = 1 << 18;

/// Grows-only scratch buffer, one per calling thread, so repeated GEMMs do
/// not page-fault fresh allocations every call.
float* scratch(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

/// Packs rows [i0, i0+mr) x cols [p0, p0+kc) of op(A) into one MR-row panel
/// laid out k-major (panel[k*MR + i]); rows past mr are zero.
void pack_a_panel(bool trans_a, const float* A, int64_t lda, int64_t i0, int64_t mr, int64_t p0, int64_t kc,
                  float* panel) {
  if (!trans_a) {
    for (int64_t i = 0; i < MR; ++i) {
      if (i < mr) {
        const float* a = A + (i0 + i) * lda + p0;
        for (int64_t k = 0; k < kc; ++k) panel[k * MR + i] = a[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) panel[k * MR + i] = 0.f;
      }
    }
  } else {
    for (int64_t k = 0; k < kc; ++k) {
      const float* a = A + (p0 + k) * lda + i0;
      float* p = panel + k * MR;
      for (int64_t i = 0; i < MR; ++i) p[i] = i < mr ? a[i] : 0.f;
    }
  }
}

/// Packs rows [p0, p0+kc) x cols [j0, j0+nr) of op(B) into one NR-column
/// panel laid out k-major (panel[k*NR + j]); columns past nr are zero.
void pack_b_panel(bool trans_b, const float* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nr,
                  float* panel) {
  if (!trans_b) {
    for (int64_t k = 0; k < kc; ++k) {
      const float* b = B + (p0 + k) * ldb + j0;
      float* p = panel + k * NR;
      if (nr == NR) {
        for (int64_t j = 0; j < NR; ++j) p[j] = b[j];
      } else {
        for (int64_t j = 0; j < NR; ++j) p[j] = j < nr ? b[j] : 0.f;
      }
    }
  } else {
    for (int64_t j = 0; j < NR; ++j) {
      if (j < nr) {
        const float* b = B + (j0 + j) * ldb + p0;
        for (int64_t k = 0; k < kc; ++k) panel[k * NR + j] = b[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) panel[k * NR + j] = 0.f;
      }
    }
  }
}

/// Four packed floats. This is the GCC/Clang generic vector extension, not an
/// ISA intrinsic: it lowers to SSE2 on baseline x86-64 (and to whatever the
/// build targets elsewhere). Plain nested loops were tried first; GCC 12's SLP
/// vectoriser spilled the accumulators and ran 4x slower.
typedef float v4f __attribute__((vector_size(16)));

inline v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The register-tiled inner product of one A panel and one B panel:
/// out[i*NR + j] = sum_k a[k*MR + i] * b[k*NR + j]. The 6x8 accumulator tile
/// lives in 12 vector registers for the whole k loop.
inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* __restrict out) {
  static_assert(NR == 8, "the micro-kernel holds two 4-wide vectors per row");
  v4f acc[MR][2] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const v4f b0 = load4(b + k * NR);
    const v4f b1 = load4(b + k * NR + 4);
    const float* ak = a + k * MR;
    for (int64_t i = 0; i < MR; ++i) {
      acc[i][0] += ak[i] * b0;
      acc[i][1] += ak[i] * b1;
    }
  }
  std::memcpy(out, acc, sizeof acc);
}

/// Writes an mr x nr tile: C = alpha*acc + beta*C (beta==0: C not read).
inline void store_tile(const float* acc, int64_t mr, int64_t nr, float alpha, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < mr; ++i) {
    float* c = C + i * ldc;
    const float* t = acc + i * NR;
    if (beta == 0.f) {
      for (int64_t j = 0; j < nr; ++j) c[j] = alpha * t[j];
    } else if (beta == 1.f) {
      for (int64_t j = 0; j < nr; ++j) c[j] += alpha * t[j];
    } else {
      for (int64_t j = 0; j < nr; ++j) c[j] = alpha * t[j] + beta * c[j];
    }
  }
}

/// Dot product with eight independent partial sums (two vectors), so the
/// loop vectorises without reassociating a single scalar sum.
float dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  v4f s0 = {}, s1 = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    s0 += load4(x + k) * load4(y + k);
    s1 += load4(x + k + 4) * load4(y + k + 4);
  }
  s0 += s1;
  float s = (s0[0] + s0[1]) + (s0[2] + s0[3]);
  for (; k < n; ++k) s += x[k] * y[k];
  return s;
}

/// Few rows of op(A) (a vector-matrix product, e.g. a classifier head with
/// batch 1): packing all of B for one or two rows costs more than the
/// arithmetic, so each row is computed straight from A and B.
void gemm_few_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel) {
  constexpr int64_t chunk = 256;  // columns per task
  const int64_t tasks = (N + chunk - 1) / chunk;
  std::vector<float> a_row(static_cast<size_t>(K));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t k = 0; k < K; ++k) a_row[k] = trans_a ? A[k * lda + i] : A[i * lda + k];
    float* c = C + i * ldc;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t j0 = t * chunk, j1 = std::min(N, j0 + chunk);
      float acc[chunk];
      if (trans_b) {
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] = dot(a_row.data(), B + j * ldb, K);
      } else {
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] = 0.f;
        for (int64_t k = 0; k < K; ++k) {
          const float a = a_row[k];
          const float* b = B + k * ldb;
          for (int64_t j = j0; j < j1; ++j) acc[j - j0] += a * b[j];
        }
      }
      for (int64_t j = j0; j < j1; ++j)
        c[j] = beta == 0.f ? alpha * acc[j - j0] : alpha * acc[j - j0] + beta * c[j];
    }
  }
}

/// C = beta * C for the degenerate K == 0 case.
void scale_c(int64_t M, int64_t N, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.f ? 0.f : beta * C[i * ldc + j];
}

/// Single-threaded blocked GEMM (the contract of sgemm, K > 0, M > 2).
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  static thread_local std::vector<float> a_buf, b_buf;
  float* a_pack = scratch(a_buf, MC * std::min(K, KC));
  float* b_pack = scratch(b_buf, ((std::min(N, NC) + NR - 1) / NR) * NR * std::min(K, KC));
  alignas(64) float acc[MR * NR];
  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    const int64_t nc = std::min(NC, N - j0);
    const int64_t n_panels = (nc + NR - 1) / NR;
    for (int64_t p0 = 0; p0 < K; p0 += KC) {
      const int64_t kc = std::min(KC, K - p0);
      const float beta_eff = p0 == 0 ? beta : 1.f;
      for (int64_t jp = 0; jp < n_panels; ++jp)
        pack_b_panel(trans_b, B, ldb, p0, kc, j0 + jp * NR, std::min(NR, nc - jp * NR), b_pack + jp * NR * kc);
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        const int64_t mc = std::min(MC, M - i0);
        const int64_t m_panels = (mc + MR - 1) / MR;
        for (int64_t ip = 0; ip < m_panels; ++ip)
          pack_a_panel(trans_a, A, lda, i0 + ip * MR, std::min(MR, mc - ip * MR), p0, kc, a_pack + ip * MR * kc);
        for (int64_t jp = 0; jp < n_panels; ++jp) {
          const float* bp = b_pack + jp * NR * kc;
          const int64_t col = j0 + jp * NR;
          const int64_t nr = std::min(NR, N - col);
          for (int64_t ip = 0; ip < m_panels; ++ip) {
            const int64_t row = i0 + ip * MR;
            micro_kernel(kc, a_pack + ip * MR * kc, bp, acc);
            store_tile(acc, std::min(MR, M - row), nr, alpha, beta_eff, C + row * ldc + col, ldc);
          }
        }
      }
    }
  }
}

}  // namespace

namespace {
thread_local SgemmFn t_override = nullptr;  ///< SgemmOverride's, per thread
}  // namespace

SgemmOverride::SgemmOverride(SgemmFn f) : previous_(t_override) { t_override = f; }
SgemmOverride::~SgemmOverride() { t_override = previous_; }
SgemmFn sgemm_override() { return t_override; }

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  if (t_override) {
    t_override(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int threads = M * N * K >= kParallelMacs && !omp_in_parallel() ? omp_get_max_threads() : 1;
  if (M <= 2) {
    gemm_few_rows(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads > 1);
    return;
  }
  if (threads == 1) {
    gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Each thread computes its own slab of C (a range of register-tile rows or
  // columns, whichever dimension has more tiles) with its own packing. The
  // other operand is packed once per thread, which costs little next to the
  // arithmetic, and buys a parallel region with no barrier but the final
  // join: on a loaded 2-core machine a barrier waiting for a descheduled
  // thread costs far more than the duplicated packing.
  const int64_t m_tiles = (M + MR - 1) / MR, n_tiles = (N + NR - 1) / NR;
  const bool split_n = n_tiles >= m_tiles;
  const int64_t tiles = split_n ? n_tiles : m_tiles;
  const int parts = static_cast<int>(std::min<int64_t>(threads, tiles));
#pragma omp parallel num_threads(parts)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b = tiles * t / nt, e = tiles * (t + 1) / nt;
    if (split_n) {
      const int64_t j0 = b * NR, j1 = std::min(N, e * NR);
      if (j1 > j0)
        gemm_serial(trans_a, trans_b, M, j1 - j0, K, alpha, A, lda, trans_b ? B + j0 * ldb : B + j0, ldb, beta,
                    C + j0, ldc);
    } else {
      const int64_t i0 = b * MR, i1 = std::min(M, e * MR);
      if (i1 > i0)
        gemm_serial(trans_a, trans_b, i1 - i0, N, K, alpha, trans_a ? A + i0 : A + i0 * lda, lda, B, ldb, beta,
                    C + i0 * ldc, ldc);
    }
  }
}

}  // namespace kiln::ops

// An exact int8 matrix product on oneDNN with zero points applied by kiln
// (int8_matmul.cpp): the shared core of kiln.cpu.MatMulInteger and
// kiln.cpu.DynamicQuantizeLSTM.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

/// oneDNN's u8/s8 [M, K] (plain) x s8 [K, N] (layout 'any') -> s32 [M, N]
/// (plain) matmul, with a user scratchpad and no zero points. Throws
/// dnnl::error when oneDNN refuses.
dnnl::matmul::primitive_desc int8_matmul_pd(int64_t M, int64_t K, int64_t N, DType a_type);

/// C[M, N] = sum_k (a[m, k] - az[m]) * (b[k, n] - bz[n]) in int32, wrapping
/// like the reference kernels' int32 accumulation. oneDNN computes sum a * b
/// (weights packed once, here); the zero-point terms
///   - az[m] colsum(b)[n] - bz[n] rowsum(a)[m] + K az[m] bz[n]
/// are added modulo 2^32, so the result is exact wherever oneDNN's products
/// are (int8_exact_isa). Thread-safe: run() may be called concurrently.
class Int8Matmul {
 public:
  /// b: K * N int8 values, row-major (packed into the primitive's layout; not
  /// kept); bz: none, 1 or N zero points of b. Throws Error(unsupported) naming
  /// node n when oneDNN refuses, Error(incompatible_artifact) when this machine
  /// has no int8-exact optimised implementation.
  Int8Matmul(const ir::Node& n, int64_t M, int64_t K, int64_t N, DType a_type, const int8_t* b,
             std::vector<int32_t> bz);
  /// a: M * K values of a_type (uint8 or int8), row-major; az: az_count (0, 1
  /// or M) zero points of a; c: M * N int32 outputs. Throws Error(internal)
  /// naming node n when oneDNN fails.
  void run(const ir::Node& n, const void* a, const int32_t* az, int64_t az_count, int32_t* c) const;
  /// oneDNN's implementation ("brg:avx512_core_amx_int8", ...).
  const std::string& impl() const { return impl_; }

 private:
  void correct(const void* a, const int32_t* az, int64_t az_count, int32_t* c) const;

  int64_t M_, K_, N_;
  DType a_type_;
  dnnl::matmul prim_;
  md_t src_, dst_, scratch_;
  size_t scratch_bytes_ = 0;
  dnnl::memory weights_;
  std::vector<uint32_t> colsum_;  ///< sum_k b[k, n], modulo 2^32
  std::vector<uint32_t> bz_;
  std::string impl_;
};

}  // namespace kiln::targets::cpu

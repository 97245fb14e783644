// An exact int8 matrix product on oneDNN with zero points applied by kiln
// (int8_matmul.cpp): the shared core of kiln.cpu.MatMulInteger and
// kiln.cpu.DynamicQuantizeLSTM.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::targets::cpu {

/// True when float32 arithmetic computes every sum_r a_r * w(o, r) exactly,
/// for any 8-bit data a (|a| <= 255: uint8 / int8 values, or either minus a
/// zero point) and the 8-bit weights w(o, r) = w[o * o_stride + r * r_stride]
/// (o < outputs, r < reduce): when 255 * max_o sum_r |w(o, r)| <= 2^24. Every
/// product and every partial sum, in any order or with FMA, is then an
/// integer of magnitude at most 2^24, which float32 holds exactly. This is how
/// kiln runs ONNX's integer products on machines whose oneDNN int8 kernels are
/// not exact (no VNNI: int8_exact_isa), on its float32 kernels.
bool int8_products_exact_in_f32(const int8_t* w, int64_t outputs, int64_t reduce, int64_t o_stride,
                                int64_t r_stride);

/// oneDNN's u8/s8 [M, K] (plain) x s8 [K, N] (layout 'any') -> s32 [M, N]
/// (plain) matmul, with a user scratchpad and no zero points. Throws
/// dnnl::error when oneDNN refuses.
dnnl::matmul::primitive_desc int8_matmul_pd(int64_t M, int64_t K, int64_t N, DType a_type);

/// C[M, N] = sum_k (a[m, k] - az[m]) * (b[k, n] - bz[n]) in int32, wrapping
/// like the reference kernels' int32 accumulation. oneDNN computes sum a * b
/// (weights packed once, here); the zero-point terms
///   - az[m] colsum(b)[n] - bz[n] rowsum(a)[m] + K az[m] bz[n]
/// are added modulo 2^32, so the result is exact wherever oneDNN's products
/// are: its int8 kernels with VNNI / AMX (int8_exact_isa); elsewhere, when b
/// passes int8_products_exact_in_f32, its float32 matmul on a and b converted
/// (exact there), the result converted back to int32. Thread-safe: run() may
/// be called concurrently.
class Int8Matmul {
 public:
  /// b: K * N int8 values, row-major (packed into the primitive's layout; not
  /// kept); bz: none, 1 or N zero points of b. Throws Error(unsupported) naming
  /// node n when oneDNN refuses, Error(incompatible_artifact) when this machine
  /// has no int8-exact optimised implementation and b's sums are too large for
  /// the float32 one.
  Int8Matmul(const ir::Node& n, int64_t M, int64_t K, int64_t N, DType a_type, const int8_t* b,
             std::vector<int32_t> bz);
  /// a: M * K values of a_type (uint8 or int8), row-major; az: az_count (0, 1
  /// or M) zero points of a; c: M * N int32 outputs. Throws Error(internal)
  /// naming node n when oneDNN fails.
  void run(const ir::Node& n, const void* a, const int32_t* az, int64_t az_count, int32_t* c) const;
  /// oneDNN's implementation ("brg:avx512_core_amx_int8", ...; "gemm:jit (f32)"
  /// when the products run in float32).
  const std::string& impl() const { return impl_; }
  /// True when the products run on oneDNN's float32 matmul.
  bool in_f32() const { return f32_; }

 private:
  void correct(const void* a, const int32_t* az, int64_t az_count, int32_t* c) const;

  int64_t M_, K_, N_;
  DType a_type_;
  bool f32_ = false;
  dnnl::matmul prim_;
  md_t src_, dst_, scratch_;
  size_t scratch_bytes_ = 0;
  dnnl::memory weights_;
  std::vector<uint32_t> colsum_;  ///< sum_k b[k, n], modulo 2^32
  std::vector<uint32_t> bz_;
  std::string impl_;
};

}  // namespace kiln::targets::cpu

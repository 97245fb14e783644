// cuBLASLt matmuls of the cuda target (run side): descriptors rebuilt from a
// kiln.cuda.Gemm node, the stored algorithm checked and replayed. The
// compile side (compile/choose_gemm.cpp) asks the heuristic once and stores
// its answer; a load never calls the heuristic.
#pragma once
#include <cublasLt.h>
#include <cuda.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::targets::cuda {

/// A row-major matmul, batched:
///   D[b] (m x n) = alpha * op(A[b]) (m x k) * op(B[b]) (k x n) + beta * C[b] (+ bias[n]), then the epilogue.
/// op(X) is X or its transpose (trans_a / trans_b: A stored k x m, B stored
/// n x k). stride_a / stride_b are the element distances between batches (0:
/// the operand is shared by every batch); D and C are dense, m*n apart.
/// A, B, C, D and the bias are all of `dtype` (float32, float16 or
/// bfloat16); the products are accumulated in fp32 (CUBLAS_COMPUTE_32F) and
/// alpha / beta are floats. With `tf32` (float32 only) cuBLASLt may round
/// A and B to TF32 for tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32).
struct GemmSpec {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false;
  int64_t stride_a = 0, stride_b = 0;
  float alpha = 1.f, beta = 0.f;
  bool has_bias = false;   ///< a bias of n floats added to every row (cuBLASLt BIAS epilogue)
  bool has_c = false;      ///< beta * C added (C has D's shape)
  int epilogue = 0;        ///< 0 none, 1 Relu, 2 Gelu (tanh approximation)
  DType dtype = DType::f32;  ///< element type of A and B, and of C, D and the bias unless out_dtype says otherwise (attribute `dtype`: "float32", "float16", "bfloat16")
  bool tf32 = false;         ///< float32 only: TF32 tensor-core math allowed (attribute `tf32`)
  /// Element type of C and D (attribute `out_dtype`, absent: `dtype`; format
  /// version 6). float32 on a 16-bit matmul: the Cast of its result to
  /// float32 fused into the matmul (cuBLASLt writes D in float32 from the
  /// float32 accumulator), allowed without bias and C only.
  std::optional<DType> out_dtype;
  /// The element type of C and D: out_dtype, else dtype.
  DType d_type() const { return out_dtype.value_or(dtype); }
};

/// The cuBLASLt data type of a GemmSpec dtype (CUDA_R_32F, CUDA_R_16F,
/// CUDA_R_16BF). Throws Error(invalid_model) for another dtype.
cudaDataType_t blaslt_type(DType t);
/// The compute type of a spec: CUBLAS_COMPUTE_32F, or
/// CUBLAS_COMPUTE_32F_FAST_TF32 for a float32 spec with tf32.
cublasComputeType_t blaslt_compute(const GemmSpec& s);

/// The spec of a kiln.cuda.Gemm node from its attributes (cuda_ops.h); an
/// artifact without `dtype` / `tf32` (older kiln) is float32, strict.
/// Throws Error(invalid_model) naming the node when an attribute is missing
/// or out of range (an unknown dtype, tf32 on a 16-bit matmul).
GemmSpec gemm_spec_from(const ir::Node& n);
/// Writes `s` as attributes of `n` (m, n, k, batch, trans_a, ...).
void set_gemm_attrs(ir::Node& n, const GemmSpec& s);

/// The process-wide cuBLASLt handle (created once, with the device current).
/// Throws Error(unsupported) when cublasLtCreate fails.
cublasLtHandle_t blaslt_handle();
/// Whether blaslt_handle() has been called in this process (a load logs
/// it: a program without kiln.cuda.Gemm nodes never calls it).
bool blaslt_handle_created();

/// Throws Error(internal / unsupported) "<what>: cuBLASLt status N" unless ok.
void check_blaslt(cublasStatus_t s, const std::string& what);

/// The descriptors of one GemmSpec (owned; destroyed with the object).
/// `bias` is the device address of the bias (set in the descriptor), 0 if none.
class GemmDescs {
 public:
  GemmDescs(const GemmSpec& s, CUdeviceptr bias);
  ~GemmDescs();
  GemmDescs(const GemmDescs&) = delete;
  GemmDescs& operator=(const GemmDescs&) = delete;

  cublasLtMatmulDesc_t op = nullptr;
  /// cuBLASLt is column-major: "a" describes B's buffer and "b" A's (D^T = op(B)^T op(A)^T).
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
};

/// One cuBLASLt algorithm for a matmul: its 8 opaque words (the
/// cublasLtMatmulAlgo_t, CUBLASLT_ALGO_CONFIG_* attributes included) and the
/// workspace it needs (bytes).
struct GemmAlgo {
  std::array<uint64_t, 8> words{};
  size_t workspace = 0;
};

/// The cuBLASLt heuristic's best `count` algorithms for `d` (a current
/// device and handle are needed), each needing at most `max_workspace` bytes,
/// with every buffer promised 16-byte aligned (kiln's arena slots, constants
/// and inputs are at least 256-byte aligned). Best first; empty when cuBLASLt has none.
std::vector<GemmAlgo> gemm_heuristic(const GemmDescs& d, size_t max_workspace, int count);

/// Split-K forms of `base` (Hopper's cuBLASLt heuristic rarely offers them,
/// yet a matmul with few output tiles and a long k, e.g. m=128 n=768 k=3072
/// at batch 1, leaves most multiprocessors idle without one): for each
/// `splits` value s > 1 with k / s >= 64, `base` with
/// CUBLASLT_ALGO_CONFIG_SPLITK_NUM = s and the partial sums reduced in the
/// compute type (float32; CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, never
/// INPLACE or OUTPUT_TYPE, which sum in 16 bits). Empty when `base` cannot
/// split k or already does. Each variant is checked with
/// cublasLtMatmulAlgoCheck and kept only when it needs at most
/// `max_workspace` bytes (its workspace recorded). A current device and
/// handle are needed; never throws for a refused variant.
std::vector<GemmAlgo> gemm_split_k_variants(const GemmDescs& d, const GemmSpec& s, const GemmAlgo& base,
                                            const std::vector<int>& splits, size_t max_workspace);

/// A matmul ready to run: descriptors plus the stored algorithm, checked
/// with cublasLtMatmulAlgoCheck at construction.
class GemmPlan {
 public:
  /// `algo`: the stored decision. std::nullopt (an artifact cross-compiled
  /// without a GPU): the cuBLASLt heuristic chooses once, here, within
  /// `workspace` bytes. Throws Error(incompatible_artifact) naming `where`
  /// when cuBLASLt on this machine refuses the stored algorithm, needs more
  /// workspace than recorded, or (nullopt) has no algorithm.
  GemmPlan(const GemmSpec& s, const std::optional<std::array<uint64_t, 8>>& algo, size_t workspace, CUdeviceptr bias,
           const std::string& where);
  /// Enqueues the matmul on `stream`. c may be 0 when the spec has no C.
  void run(CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, CUdeviceptr workspace,
           size_t workspace_bytes) const;
  /// Workspace bytes the algorithm needs here (<= the recorded workspace).
  size_t workspace() const { return workspace_; }
  /// True when the algorithm was chosen at construction (no stored decision).
  bool chosen_at_load() const { return chosen_at_load_; }

 private:
  GemmSpec spec_;
  GemmDescs descs_;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_ = 0;
  bool chosen_at_load_ = false;
};

}  // namespace kiln::targets::cuda

// cuBLASLt descriptors and replay of stored algorithms (blaslt.h).
#include "targets/cuda/run/blaslt_api.h"
#include "targets/cuda/run/blaslt.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "support/error.h"
#include "support/log.h"

namespace kiln::targets::cuda {

void check_blaslt(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail(s == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::unsupported : ErrorCode::internal, "{}: cuBLASLt status {}",
       what, static_cast<int>(s));
}

GemmSpec gemm_spec_from(const ir::Node& n) {
  GemmSpec s;
  s.m = n.i("m");
  s.n = n.i("n");
  s.k = n.i("k");
  s.batch = n.i("batch", 1);
  s.trans_a = n.i("trans_a", 0) != 0;
  s.trans_b = n.i("trans_b", 0) != 0;
  s.stride_a = n.i("stride_a", 0);
  s.stride_b = n.i("stride_b", 0);
  s.alpha = n.f("alpha", 1.f);
  s.beta = n.f("beta", 0.f);
  s.has_bias = n.i("has_bias", 0) != 0;
  s.has_c = n.i("has_c", 0) != 0;
  s.epilogue = static_cast<int>(n.i("epilogue", 0));
  std::string dt = n.s("dtype", "float32");
  auto parsed = dtype_from_name(dt);
  if (!parsed || (*parsed != DType::f32 && *parsed != DType::f16 && *parsed != DType::bf16))
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Gemm dtype '{}' (expected float32, float16 or bfloat16)", n.label(), dt);
  s.dtype = *parsed;
  s.tf32 = n.i("tf32", 0) != 0;
  const std::string od = n.s("out_dtype", dt);
  auto out = dtype_from_name(od);
  if (!out || (*out != s.dtype && !(*out == DType::f32 && s.dtype != DType::f32)))
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Gemm out_dtype '{}' on a {} matmul (expected {}, or float32 on a 16-bit one)",
         n.label(), od, dt, dt);
  if (*out != s.dtype) s.out_dtype = *out;
  if (s.d_type() != s.dtype && (s.has_bias || s.has_c))
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Gemm out_dtype {} with a bias or C (not supported)", n.label(), od);
  if (s.tf32 && s.dtype != DType::f32)
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Gemm tf32 on a {} matmul", n.label(), dt);
  if (s.m <= 0 || s.n <= 0 || s.k <= 0 || s.batch <= 0 || s.epilogue < 0 || s.epilogue > 2)
    fail(ErrorCode::invalid_model, "{}: inconsistent kiln.cuda.Gemm attributes", n.label());
  return s;
}

void set_gemm_attrs(ir::Node& n, const GemmSpec& s) {
  n.attrs["m"] = s.m;
  n.attrs["n"] = s.n;
  n.attrs["k"] = s.k;
  n.attrs["batch"] = s.batch;
  n.attrs["trans_a"] = int64_t{s.trans_a};
  n.attrs["trans_b"] = int64_t{s.trans_b};
  n.attrs["stride_a"] = s.stride_a;
  n.attrs["stride_b"] = s.stride_b;
  n.attrs["alpha"] = s.alpha;
  n.attrs["beta"] = s.beta;
  n.attrs["has_bias"] = int64_t{s.has_bias};
  n.attrs["has_c"] = int64_t{s.has_c};
  n.attrs["epilogue"] = int64_t{s.epilogue};
  n.attrs["dtype"] = std::string(dtype_name(s.dtype));
  n.attrs["tf32"] = int64_t{s.tf32};
  if (s.d_type() != s.dtype) n.attrs["out_dtype"] = std::string(dtype_name(s.d_type()));
}

cudaDataType_t blaslt_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: fail(ErrorCode::invalid_model, "cuBLASLt matmul on {} (float32, float16 or bfloat16 only)", dtype_name(t));
  }
}

cublasComputeType_t blaslt_compute(const GemmSpec& s) {
  return s.dtype == DType::f32 && s.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

namespace {
std::atomic<bool> handle_created{false};
}  // namespace

bool blaslt_handle_created() { return handle_created; }

cublasLtHandle_t blaslt_handle() {
  static std::once_flag once;
  static cublasLtHandle_t h = nullptr;
  static cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::call_once(once, [] {
    handle_created = true;
    status = blaslt_api().cublasLtCreate(&h);
  });
  check_blaslt(status, "cublasLtCreate");
  return h;
}

namespace {
cublasLtMatrixLayout_t layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l;
  check_blaslt(blaslt_api().cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t b = static_cast<int32_t>(batch);
    check_blaslt(blaslt_api().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b), "batch count");
    check_blaslt(blaslt_api().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                 "batch stride");
  }
  return l;
}
}  // namespace

GemmDescs::GemmDescs(const GemmSpec& s, CUdeviceptr bias) {
  // fp32 accumulation and fp32 alpha / beta (scale type) for every dtype;
  // A, B, C, D (and the bias, whose type defaults to D's) are s.dtype, but
  // C and D are s.out_dtype (float32 from 16-bit A and B: one of cuBLASLt's
  // supported type combinations, used only without bias or C).
  const cudaDataType_t type = blaslt_type(s.dtype), out_type = blaslt_type(s.d_type());
  check_blaslt(blaslt_api().cublasLtMatmulDescCreate(&op, blaslt_compute(s), CUDA_R_32F), "cublasLtMatmulDescCreate");
  // Column-major view: D^T (n x m) = op(B)^T (n x k) * op(A)^T (k x m).
  cublasOperation_t ta = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  cublasOperation_t tb = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
  check_blaslt(blaslt_api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
  check_blaslt(blaslt_api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (s.has_bias)
    epi = s.epilogue == 1 ? CUBLASLT_EPILOGUE_RELU_BIAS : s.epilogue == 2 ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else
    epi = s.epilogue == 1 ? CUBLASLT_EPILOGUE_RELU : s.epilogue == 2 ? CUBLASLT_EPILOGUE_GELU : CUBLASLT_EPILOGUE_DEFAULT;
  check_blaslt(blaslt_api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
  if (s.has_bias) {
    void* p = reinterpret_cast<void*>(bias);
    check_blaslt(blaslt_api().cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p), "bias pointer");
  }
  // Our B buffer: stored k x n (ld n), or n x k when transposed (ld k).
  a = s.trans_b ? layout(type, s.k, s.n, s.k, s.batch, s.stride_b) : layout(type, s.n, s.k, s.n, s.batch, s.stride_b);
  // Our A buffer: stored m x k (ld k), or k x m when transposed (ld m).
  b = s.trans_a ? layout(type, s.m, s.k, s.m, s.batch, s.stride_a) : layout(type, s.k, s.m, s.k, s.batch, s.stride_a);
  c = layout(out_type, s.n, s.m, s.n, s.batch, s.m * s.n);
  d = layout(out_type, s.n, s.m, s.n, s.batch, s.m * s.n);
}

GemmDescs::~GemmDescs() {
  if (a) blaslt_api().cublasLtMatrixLayoutDestroy(a);
  if (b) blaslt_api().cublasLtMatrixLayoutDestroy(b);
  if (c) blaslt_api().cublasLtMatrixLayoutDestroy(c);
  if (d) blaslt_api().cublasLtMatrixLayoutDestroy(d);
  if (op) blaslt_api().cublasLtMatmulDescDestroy(op);
}

std::vector<GemmAlgo> gemm_heuristic(const GemmDescs& d, size_t max_workspace, int count) {
  cublasLtMatmulPreference_t pref;
  check_blaslt(blaslt_api().cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  struct Free {
    cublasLtMatmulPreference_t p;
    ~Free() { blaslt_api().cublasLtMatmulPreferenceDestroy(p); }
  } free_pref{pref};
  check_blaslt(blaslt_api().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                    sizeof max_workspace),
               "workspace preference");
  uint32_t align = 16;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    check_blaslt(blaslt_api().cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align), "alignment preference");
  std::vector<cublasLtMatmulHeuristicResult_t> r(static_cast<size_t>(std::max(count, 1)));
  int got = 0;
  cublasStatus_t st = blaslt_api().cublasLtMatmulAlgoGetHeuristic(blaslt_handle(), d.op, d.a, d.b, d.c, d.d, pref,
                                                     static_cast<int>(r.size()), r.data(), &got);
  std::vector<GemmAlgo> out;
  if (st != CUBLAS_STATUS_SUCCESS) return out;
  for (int i = 0; i < got; ++i) {
    if (r[i].state != CUBLAS_STATUS_SUCCESS) continue;
    GemmAlgo a;
    std::memcpy(a.words.data(), &r[i].algo, sizeof a.words);
    a.workspace = r[i].workspaceSize;
    out.push_back(a);
  }
  return out;
}

std::vector<GemmAlgo> gemm_split_k_variants(const GemmDescs& d, const GemmSpec& s, const GemmAlgo& base,
                                            const std::vector<int>& splits, size_t max_workspace) {
  const BlasLtApi& api = blaslt_api();
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, base.words.data(), sizeof algo);
  int32_t support = 0, current = 1;
  uint32_t schemes = 0;
  size_t written = 0;
  if (api.cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof support,
                                            &written) != CUBLAS_STATUS_SUCCESS ||
      !support)
    return {};
  if (api.cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes,
                                            &written) != CUBLAS_STATUS_SUCCESS ||
      !(schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE))
    return {};
  if (api.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &current, sizeof current,
                                               &written) != CUBLAS_STATUS_SUCCESS ||
      current > 1)
    return {};
  std::vector<GemmAlgo> out;
  for (int split : splits) {
    if (split < 2 || s.k / split < 64) continue;
    cublasLtMatmulAlgo_t v = algo;
    const int32_t n = split;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (api.cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &n, sizeof n) !=
            CUBLAS_STATUS_SUCCESS ||
        api.cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme) !=
            CUBLAS_STATUS_SUCCESS)
      continue;
    cublasLtMatmulHeuristicResult_t r{};
    if (api.cublasLtMatmulAlgoCheck(blaslt_handle(), d.op, d.a, d.b, d.c, d.d, &v, &r) != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > max_workspace)
      continue;
    GemmAlgo a;
    std::memcpy(a.words.data(), &v, sizeof a.words);
    a.workspace = r.workspaceSize;
    out.push_back(a);
  }
  return out;
}

GemmPlan::GemmPlan(const GemmSpec& s, const std::optional<std::array<uint64_t, 8>>& algo, size_t workspace,
                   CUdeviceptr bias, const std::string& where)
    : spec_(s), descs_(s, bias) {
  static_assert(sizeof(cublasLtMatmulAlgo_t) == 8 * sizeof(uint64_t), "cublasLtMatmulAlgo_t is 8 words");
  if (!algo) {
    auto found = gemm_heuristic(descs_, workspace, 1);
    if (found.empty())
      fail(ErrorCode::incompatible_artifact,
           "{}: cuBLASLt here has no algorithm for this matmul within {} bytes of workspace (m={} n={} k={} batch={})",
           where, workspace, s.m, s.n, s.k, s.batch);
    std::memcpy(&algo_, found[0].words.data(), sizeof algo_);
    workspace_ = found[0].workspace;
    chosen_at_load_ = true;
    return;
  }
  std::memcpy(&algo_, algo->data(), sizeof algo_);
  Stopwatch check_sw;
  cublasLtMatmulHeuristicResult_t r{};
  cublasStatus_t st = blaslt_api().cublasLtMatmulAlgoCheck(blaslt_handle(), descs_.op, descs_.a, descs_.b, descs_.c, descs_.d,
                                              &algo_, &r);
  static std::atomic<bool> first{true};
  if (first.exchange(false) && log().should_log(spdlog::level::debug))
    log().debug("cuda: the first cublasLtMatmulAlgoCheck took {:.1f} ms ({})", check_sw.ms(), where);
  if (st != CUBLAS_STATUS_SUCCESS)
    fail(ErrorCode::incompatible_artifact,
         "{}: cuBLASLt on this machine refuses the matmul algorithm stored in the artifact (status {}); recompile",
         where, static_cast<int>(st));
  if (r.workspaceSize > workspace)
    fail(ErrorCode::incompatible_artifact,
         "{}: the stored cuBLASLt algorithm needs {} bytes of workspace here, the artifact recorded {}; recompile", where,
         r.workspaceSize, workspace);
  workspace_ = workspace;
}

void GemmPlan::run(CUstream stream, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr d, CUdeviceptr workspace,
                   size_t workspace_bytes) const {
  float beta = spec_.has_c ? spec_.beta : 0.f;
  auto* pc = reinterpret_cast<const void*>(spec_.has_c ? c : d);
  check_blaslt(blaslt_api().cublasLtMatmul(blaslt_handle(), descs_.op, &spec_.alpha, reinterpret_cast<const void*>(b), descs_.a,
                              reinterpret_cast<const void*>(a), descs_.b, &beta, pc, descs_.c,
                              reinterpret_cast<void*>(d), descs_.d, &algo_, reinterpret_cast<void*>(workspace),
                              workspace_bytes, reinterpret_cast<cudaStream_t>(stream)),
               "cublasLtMatmul");
}

}  // namespace kiln::targets::cuda

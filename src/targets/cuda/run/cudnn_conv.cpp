// cuDNN convolution descriptors and replay of stored algorithms (cudnn_conv.h).
#include "targets/cuda/run/cudnn_conv.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

#include "support/error.h"

namespace kiln::targets::cuda {

void check_cudnn(cudnnStatus_t s, const std::string& what) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  // cuDNN 9's statuses are categories with sub-codes (3001: the graph pattern
  // is not supported, 3007: another architecture, ...).
  fail(CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED ? ErrorCode::unsupported : ErrorCode::internal,
       "{}: cuDNN: {}", what, cudnnGetErrorString(s));
}

ConvSpec conv_spec_from(const ir::Node& n) {
  ConvSpec s;
  s.x = n.ints("x_dims");
  s.w = n.ints("w_dims");
  s.y = n.ints("y_dims");
  s.pads = n.ints("pads");
  s.strides = n.ints("strides");
  s.dilations = n.ints("dilations");
  s.group = n.i("group", 1);
  s.transposed = n.i("transposed", 0) != 0;
  std::string dt = n.s("dtype", "float32");
  auto parsed = dtype_from_name(dt);
  if (!parsed || (*parsed != DType::f32 && *parsed != DType::f16 && *parsed != DType::bf16))
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Conv dtype '{}' (expected float32, float16 or bfloat16)", n.label(), dt);
  s.dtype = *parsed;
  s.tf32 = n.i("tf32", 0) != 0;
  s.nhwc = n.i("nhwc", 0) != 0;
  if (s.tf32 && s.dtype != DType::f32)
    fail(ErrorCode::invalid_model, "{}: kiln.cuda.Conv tf32 on a {} convolution", n.label(), dt);
  size_t k = s.x.size() < 3 ? 0 : s.x.size() - 2;
  if (k == 0 || k > 3 || s.w.size() != k + 2 || s.y.size() != k + 2 || s.pads.size() != k || s.strides.size() != k ||
      s.dilations.size() != k || s.group < 1 || (s.nhwc && (k != 2 || s.transposed)))
    fail(ErrorCode::invalid_model, "{}: inconsistent kiln.cuda.Conv attributes", n.label());
  return s;
}

void set_conv_attrs(ir::Node& n, const ConvSpec& s) {
  n.attrs["x_dims"] = s.x;
  n.attrs["w_dims"] = s.w;
  n.attrs["y_dims"] = s.y;
  n.attrs["pads"] = s.pads;
  n.attrs["strides"] = s.strides;
  n.attrs["dilations"] = s.dilations;
  n.attrs["group"] = s.group;
  n.attrs["transposed"] = int64_t{s.transposed};
  n.attrs["dtype"] = std::string(dtype_name(s.dtype));
  n.attrs["tf32"] = int64_t{s.tf32};
  if (s.nhwc) n.attrs["nhwc"] = int64_t{1};
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: fail(ErrorCode::invalid_model, "cuDNN convolution on {} (float32, float16 or bfloat16 only)", dtype_name(t));
  }
}

cudnnMathType_t conv_math(const ConvSpec& s) {
  if (s.dtype != DType::f32) return CUDNN_TENSOR_OP_MATH;
  return s.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

std::optional<size_t> conv_workspace(const ConvDescs& d, bool transposed, int algo) {
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  size_t need = 0;
  cudnnStatus_t st =
      transposed ? cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn_handle(), d.w, d.x, d.conv, d.y,
                                                                static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &need)
                 : cudnnGetConvolutionForwardWorkspaceSize(cudnn_handle(), d.x, d.w, d.conv, d.y,
                                                           static_cast<cudnnConvolutionFwdAlgo_t>(algo), &need);
  if (st != CUDNN_STATUS_SUCCESS) return std::nullopt;
  return need;
}

std::mutex& cudnn_mutex() {
  static std::mutex mu;
  return mu;
}

cudnnHandle_t cudnn_handle() {
  static std::once_flag once;
  static cudnnHandle_t h = nullptr;
  static cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::call_once(once, [] { status = cudnnCreate(&h); });
  check_cudnn(status, "cudnnCreate");
  return h;
}

namespace {
std::vector<int> to_int(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }
std::vector<int> packed_strides(const std::vector<int64_t>& d) {
  std::vector<int> s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * static_cast<int>(d[i + 1]);
  return s;
}
cudnnTensorDescriptor_t tensor(const std::vector<int64_t>& dims, cudnnDataType_t type, bool nhwc) {
  cudnnTensorDescriptor_t t;
  check_cudnn(cudnnCreateTensorDescriptor(&t), "cudnnCreateTensorDescriptor");
  auto d = to_int(dims);
  if (nhwc) {  // dims in NCHW order, memory channels-last
    check_cudnn(cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NHWC, type, static_cast<int>(d.size()), d.data()),
                "cudnnSetTensorNdDescriptorEx (NHWC)");
    return t;
  }
  auto s = packed_strides(dims);
  check_cudnn(cudnnSetTensorNdDescriptor(t, type, static_cast<int>(d.size()), d.data(), s.data()),
              "cudnnSetTensorNdDescriptor");
  return t;
}
}  // namespace

ConvDescs::ConvDescs(const ConvSpec& s) {
  const cudnnDataType_t type = cudnn_type(s.dtype);
  x = tensor(s.x, type, s.nhwc);
  y = tensor(s.y, type, s.nhwc);
  check_cudnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
  auto wd = to_int(s.w);
  check_cudnn(cudnnSetFilterNdDescriptor(w, type, s.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()),
              "cudnnSetFilterNdDescriptor");
  check_cudnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
  auto p = to_int(s.pads), st = to_int(s.strides), dl = to_int(s.dilations);
  check_cudnn(cudnnSetConvolutionNdDescriptor(conv, static_cast<int>(p.size()), p.data(), st.data(), dl.data(),
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),  // fp32 accumulation for every dtype
              "cudnnSetConvolutionNdDescriptor");
  check_cudnn(cudnnSetConvolutionGroupCount(conv, static_cast<int>(s.group)), "cudnnSetConvolutionGroupCount");
  check_cudnn(cudnnSetConvolutionMathType(conv, conv_math(s)), "cudnnSetConvolutionMathType");
}

ConvDescs::~ConvDescs() {
  if (x) cudnnDestroyTensorDescriptor(x);
  if (y) cudnnDestroyTensorDescriptor(y);
  if (w) cudnnDestroyFilterDescriptor(w);
  if (conv) cudnnDestroyConvolutionDescriptor(conv);
}

namespace {
/// "algorithm 1: CUDNN_STATUS_NOT_SUPPORTED, algorithm 0: 4096 bytes, ..." for an error message.
template <typename Perf>
std::string describe_perf(const Perf* perf, int count) {
  std::string s;
  for (int i = 0; i < count; ++i)
    s += fmt::format("{}algorithm {}: {}", s.empty() ? "" : ", ", static_cast<int>(perf[i].algo),
                     perf[i].status == CUDNN_STATUS_SUCCESS ? fmt::format("{} bytes of workspace", perf[i].memory)
                                                            : std::string(cudnnGetErrorString(perf[i].status)));
  return s.empty() ? "cuDNN returned no algorithm" : s;
}
}  // namespace

std::vector<ConvAlgo> conv_heuristic(const ConvDescs& d, bool transposed, size_t max_workspace, std::string* why) {
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  std::vector<ConvAlgo> out;
  if (transposed) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn_handle(), d.w, d.x, d.conv, d.y,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
                "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    for (int i = 0; i < count; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace)
        out.push_back({static_cast<int>(perf[i].algo), perf[i].memory, 0.f});
    if (why) *why = describe_perf(perf, count);
    return out;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(cudnn_handle(), d.x, d.w, d.conv, d.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7");
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace)
      out.push_back({static_cast<int>(perf[i].algo), perf[i].memory, 0.f});
  if (why) *why = describe_perf(perf, count);
  return out;
}

std::vector<ConvAlgo> conv_find(const ConvDescs& d, bool transposed, size_t max_workspace, std::string* why) {
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  check_cudnn(cudnnSetStream(cudnn_handle(), nullptr), "cudnnSetStream");
  std::vector<ConvAlgo> out;
  if (transposed) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    check_cudnn(cudnnFindConvolutionBackwardDataAlgorithm(cudnn_handle(), d.w, d.x, d.conv, d.y,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf),
                "cudnnFindConvolutionBackwardDataAlgorithm");
    for (int i = 0; i < count; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace)
        out.push_back({static_cast<int>(perf[i].algo), perf[i].memory, perf[i].time});
    if (why) *why = describe_perf(perf, count);
    return out;
  }
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  check_cudnn(cudnnFindConvolutionForwardAlgorithm(cudnn_handle(), d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                   &count, perf),
              "cudnnFindConvolutionForwardAlgorithm");
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= max_workspace)
      out.push_back({static_cast<int>(perf[i].algo), perf[i].memory, perf[i].time});
  if (why) *why = describe_perf(perf, count);
  return out;
}

ConvPlan::ConvPlan(const ConvSpec& s, int algo, size_t workspace, const std::string& where)
    : d_(s), transposed_(s.transposed), algo_(algo) {
  if (algo == kConvAlgoAtLoad) {
    auto found = conv_heuristic(d_, transposed_, workspace, nullptr);
    if (found.empty())
      fail(ErrorCode::incompatible_artifact, "{}: cuDNN {} here has no algorithm for this convolution within {} bytes of workspace",
           where, cudnnGetVersion(), workspace);
    algo_ = found[0].algo;
    workspace_ = std::max(found[0].workspace, conv_workspace(d_, transposed_, algo_).value_or(0));
    chosen_at_load_ = true;
    return;
  }
  int count = transposed_ ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT : CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  if (algo < 0 || algo >= count)
    fail(ErrorCode::incompatible_artifact, "{}: the artifact's cuDNN algorithm {} is unknown here; recompile", where, algo);
  workspace_ = workspace;
  // Measurement aid (docs/cuda.md): KILN_CUDA_CONV_CHECK=0 skips the
  // workspace query, which the compatibility block's exact cuDNN version
  // already makes redundant for stored algorithms.
  static const bool query = [] {
    const char* e = std::getenv("KILN_CUDA_CONV_CHECK");
    return !(e && std::string(e) == "0");
  }();
  if (!query) return;
  std::optional<size_t> asked = conv_workspace(d_, transposed_, algo);
  if (!asked)
    fail(ErrorCode::incompatible_artifact, "{}: cuDNN {} here does not support the stored convolution algorithm {}; recompile",
         where, cudnnGetVersion(), algo);
  const size_t need = *asked;
  if (need > workspace)
    fail(ErrorCode::incompatible_artifact,
         "{}: the stored cuDNN algorithm needs {} bytes of workspace here, the artifact recorded {}; recompile", where, need,
         workspace);
  workspace_ = workspace;
}

CudnnOnStream::CudnnOnStream(CUstream stream) : lock_(cudnn_mutex()), h_(cudnn_handle()) {
  check_cudnn(cudnnSetStream(h_, reinterpret_cast<cudaStream_t>(stream)), "cudnnSetStream");
}

CudnnOnStream::~CudnnOnStream() { cudnnSetStream(h_, nullptr); }

void ConvPlan::run(CUstream stream, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUdeviceptr workspace,
                   size_t workspace_bytes) const {
  // Graph replays do not come here: only the capture and unreplayed runs.
  CudnnOnStream on(stream);
  cudnnHandle_t h = on.handle();
  const float one = 1.f, zero = 0.f;
  if (transposed_) {
    // The transposed convolution of x is the backward-data pass of the
    // convolution whose output has x's shape.
    check_cudnn(cudnnConvolutionBackwardData(h, &one, d_.w, reinterpret_cast<const void*>(w), d_.x,
                                             reinterpret_cast<const void*>(x), d_.conv,
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(algo_),
                                             reinterpret_cast<void*>(workspace), workspace_bytes, &zero, d_.y,
                                             reinterpret_cast<void*>(y)),
                "cudnnConvolutionBackwardData");
    return;
  }
  check_cudnn(cudnnConvolutionForward(h, &one, d_.x, reinterpret_cast<const void*>(x), d_.w,
                                      reinterpret_cast<const void*>(w), d_.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(algo_), reinterpret_cast<void*>(workspace),
                                      workspace_bytes, &zero, d_.y, reinterpret_cast<void*>(y)),
              "cudnnConvolutionForward");
}

}  // namespace kiln::targets::cuda

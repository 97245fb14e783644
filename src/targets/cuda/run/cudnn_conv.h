// Convolutions of the cuda target through cuDNN's convolution API (run
// side): descriptors rebuilt from a kiln.cuda.Conv node, the algorithm chosen
// at compile time (compile/lower_conv.cpp) checked and replayed.
#pragma once
#include <cuda.h>
#include <cudnn.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::targets::cuda {

/// An NC<spatial> convolution (cross-correlation, like ONNX Conv) without
/// bias: y = conv(x, w). `x` dims [N, C, D1..Dk], `w` [K, C/group, k1..kk],
/// `y` [N, K, O1..Ok], all packed NCHW of `dtype`; symmetric pads (begin ==
/// end), strides and dilations per spatial dim. Math (conv_math):
///  - float32: strict fp32 (CUDNN_FMA_MATH: no TF32), so results follow the
///    reference kernels; with `tf32`, CUDNN_DEFAULT_MATH (TF32 tensor cores
///    permitted on Ampere and newer).
///  - float16 / bfloat16 (CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16): fp32
///    accumulation (the convolution descriptor's compute type is
///    CUDNN_DATA_FLOAT) on tensor cores (CUDNN_TENSOR_OP_MATH).
/// With `transposed` (ONNX ConvTranspose): y = conv_transpose(x, w), run as
/// cuDNN's backward-data of the convolution from y's shape to x's; `w` dims
/// [C_in, M/group, k1..kk] (ONNX's layout, which is cuDNN's filter layout of
/// that convolution).
struct ConvSpec {
  std::vector<int64_t> x, w, y, pads, strides, dilations;
  int64_t group = 1;
  bool transposed = false;
  DType dtype = DType::f32;  ///< x, w, y element type (attribute `dtype`: "float32", "float16", "bfloat16")
  bool tf32 = false;         ///< float32 only: TF32 allowed (attribute `tf32`)
  /// 2-D only: x, y stored [N, H, W, C] and w [K, R, S, C/group] (cuDNN's
  /// CUDNN_TENSOR_NHWC); x, w, y above still list NCHW-ordered dims
  /// (attribute `nhwc`; absent in older artifacts: NCHW).
  bool nhwc = false;
};

/// The cuDNN data type of x, w and y (CUDNN_DATA_FLOAT / HALF / BFLOAT16).
/// Throws Error(invalid_model) for another dtype.
cudnnDataType_t cudnn_type(DType t);
/// The math type of a spec (see ConvSpec): CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH
/// (float32 with tf32) or CUDNN_TENSOR_OP_MATH (16-bit).
cudnnMathType_t conv_math(const ConvSpec& s);

/// The spec of a kiln.cuda.Conv node (attributes x_dims, w_dims, y_dims,
/// pads, strides, dilations, group, transposed, dtype, tf32, nhwc; an artifact
/// without dtype / tf32 is float32, strict). Throws Error(invalid_model)
/// naming the node when they are inconsistent.
ConvSpec conv_spec_from(const ir::Node& n);
/// Writes `s` as attributes of `n`.
void set_conv_attrs(ir::Node& n, const ConvSpec& s);

/// The process-wide cuDNN handle (created once, the device current).
/// Throws Error(unsupported) when cuDNN cannot be loaded or initialised.
cudnnHandle_t cudnn_handle();
/// Throws Error(internal / unsupported) "<what>: <cuDNN error string>" unless ok.
void check_cudnn(cudnnStatus_t s, const std::string& what);

/// The cuDNN descriptors of one ConvSpec (owned).
class ConvDescs {
 public:
  explicit ConvDescs(const ConvSpec& s);
  ~ConvDescs();
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

/// One cuDNN convolution algorithm (cudnnConvolutionFwdAlgo_t, or
/// cudnnConvolutionBwdDataAlgo_t when transposed) and its workspace (bytes).
struct ConvAlgo {
  int algo = -1;
  size_t workspace = 0;
  float ms = 0;  ///< time cuDNN measured (cudnnFind), 0 from the heuristic
};

/// `kiln.cuda.Conv` attribute `algo` of an artifact cross-compiled without a
/// GPU: cuDNN's heuristic chooses at load.
inline constexpr int kConvAlgoAtLoad = -1;

/// cuDNN's heuristic ranking for `d` (cudnnGetConvolutionForwardAlgorithm_v7,
/// or ...BackwardDataAlgorithm_v7 when `transposed`): the supported
/// algorithms needing at most `max_workspace` bytes, best first. Nothing runs.
/// `why` (may be null) receives each algorithm's status, for error messages.
std::vector<ConvAlgo> conv_heuristic(const ConvDescs& d, bool transposed, size_t max_workspace, std::string* why);
/// cuDNN's own measurement of every algorithm (cudnnFind...; runs each once
/// on the current device): the supported ones within `max_workspace`, fastest first.
std::vector<ConvAlgo> conv_find(const ConvDescs& d, bool transposed, size_t max_workspace, std::string* why);

/// Workspace bytes cuDNN asks for algorithm `algo` of `d`
/// (cudnnGetConvolution{Forward,BackwardData}WorkspaceSize); nullopt when
/// cuDNN does not support that algorithm for it. cudnnFind's reported
/// memory can be below this (seen on the H200: 0 reported, 32 bytes asked),
/// so the compile records the larger of the two.
std::optional<size_t> conv_workspace(const ConvDescs& d, bool transposed, int algo);

/// Serializes every use of the process-wide cuDNN handle (its stream is
/// state: set for one call, reset to the null stream after it).
std::mutex& cudnn_mutex();

/// The process-wide cuDNN handle bound to `stream` for this object's life,
/// cudnn_mutex() held: one handle serves the process, so setting its stream
/// and enqueueing must not interleave with another program's (two sessions
/// loading or, with KILN_CUDA_GRAPH=0, running at once). The handle goes
/// back to the null stream at the end, since `stream` may be destroyed (a
/// tuning stream, an unloaded program) before the handle's next use.
/// Throws Error like check_cudnn when the stream cannot be set.
class CudnnOnStream {
 public:
  explicit CudnnOnStream(CUstream stream);
  ~CudnnOnStream();
  CudnnOnStream(const CudnnOnStream&) = delete;
  CudnnOnStream& operator=(const CudnnOnStream&) = delete;
  cudnnHandle_t handle() const { return h_; }

 private:
  std::lock_guard<std::mutex> lock_;
  cudnnHandle_t h_;
};

/// A convolution ready to run with the stored algorithm.
class ConvPlan {
 public:
  /// `algo` is a cudnnConvolutionFwdAlgo_t, or for a transposed spec a
  /// cudnnConvolutionBwdDataAlgo_t; kConvAlgoAtLoad: cuDNN's heuristic
  /// chooses here, within `workspace` bytes.
  /// Throws Error(incompatible_artifact) naming `where` when cuDNN here does
  /// not support algorithm `algo` for this convolution or needs more
  /// workspace than `workspace` bytes (recorded at compile time).
  ConvPlan(const ConvSpec& s, int algo, size_t workspace, const std::string& where);
  /// Enqueues y = conv(x, w) on `stream`.
  void run(CUstream stream, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUdeviceptr workspace, size_t workspace_bytes) const;
  /// Workspace bytes the algorithm needs here.
  size_t workspace() const { return workspace_; }
  int algo() const { return algo_; }
  bool chosen_at_load() const { return chosen_at_load_; }

 private:
  ConvDescs d_;
  bool transposed_;
  int algo_;
  size_t workspace_ = 0;
  bool chosen_at_load_ = false;
};

}  // namespace kiln::targets::cuda

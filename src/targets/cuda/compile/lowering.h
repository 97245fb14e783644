// The cuda target's lowering pass (compile side): ONNX nodes -> kiln.cuda
// nodes (run/cuda_ops.h), generated kernels compiled by NVRTC into the
// artifact's kernels section, cuBLASLt algorithms chosen and stored.
#pragma once
#include <string>
#include <vector>

#include "artifact/artifact.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

/// What the lowering is for.
struct LowerOptions {
  std::string arch = "sm_90";  ///< cubin architecture
  int sm_count = 132;          ///< multiprocessors (grid sizing)
  /// CUDA device whose cuBLASLt heuristic picks each matmul's algorithm; -1:
  /// no device (then a MatMul / Gemm is refused; tests of the code generator).
  int device = 0;
  /// Element type of the program's float values: float32, or float16 /
  /// bfloat16, for which the precision pass (precision.h) converts the
  /// graph before lowering (SessionOptions::precision).
  DType dtype = DType::f32;
  /// float32 only: matmuls and convolutions may use TF32 tensor cores
  /// (SessionOptions::allow_tf32); recorded in each kiln.cuda.Gemm / Conv.
  bool tf32 = false;
};

/// What the lowering did, for reports and tests.
struct LowerStats {
  int kernels = 0;       ///< kiln.cuda.Kernel nodes (generated kernels)
  int fused = 0;         ///< ONNX nodes folded into another node's kernel or matmul epilogue
  int gemms = 0;         ///< kiln.cuda.Gemm nodes
  int convs = 0;         ///< kiln.cuda.Conv nodes
  int copies = 0;        ///< kiln.cuda.Copy nodes
  size_t cubin_bytes = 0;
  size_t ptx_bytes = 0;
};

/// Lowers every node of cp.model's main graph (shapes inferred and static),
/// compiles the generated kernels with NVRTC into cp.kernels (KernelBundle)
/// and makes the memory plan (cp.plan). A node the cuda target cannot run is
/// Error(unsupported) naming the node, its op_type and "cuda": nothing falls
/// back to the host.
LowerStats lower_for_cuda(artifact::CompiledProgram& cp, const LowerOptions& opt);

/// The uses of each value by the main graph's nodes (node indices, one entry
/// per reading input), and whether it is a graph output.
struct Uses {
  std::vector<std::vector<int>> readers;
  std::vector<bool> is_output;
  std::vector<int> producer;  ///< node index producing each value, -1 if none
};
Uses uses_of(const ir::Model& m);

/// A MatMul / Gemm lowered to kiln.cuda.Gemm, with the nodes whose work it
/// absorbed (a following Add of a [n] constant as the bias epilogue, then a
/// Relu): `node` replaces the last of `absorbed` (the original included).
struct GemmLowered {
  ir::Node node;
  std::vector<int> absorbed;
};

/// Lowers main-graph node `i` (a MatMul or Gemm whose inputs are all
/// float32, all float16 or all bfloat16; fp32 accumulation) or refuses it.
/// With opt.device >= 0 the algorithm comes from the cuBLASLt heuristic on
/// that device (32 MiB workspace at most) and is stored in the node (algo,
/// workspace); the runtime replays it without asking again.
GemmLowered lower_gemm(Lowering& L, int i, const Uses& uses, const LowerOptions& opt);

/// Rewrites every main-graph Conv / ConvTranspose with a constant bias B [K] into Conv(x, w)
/// followed by an ONNX Add of B as [K, 1, .., 1], so that the bias, and
/// whatever element-wise work follows (Relu, a residual Add), fuse into one
/// generated kernel after the cuDNN convolution. Returns the number split.
int split_conv_bias(ir::Model& m);

/// Lowers a Conv or ConvTranspose (x and w both float32, float16 or
/// bfloat16, fp32 accumulation; no bias left, symmetric pads,
/// 1-3 spatial dims, any group; ConvTranspose as cuDNN backward-data, with
/// output_padding below the stride) to kiln.cuda.Conv. With opt.device >= 0 the algorithm is the
/// fastest cudnnFindConvolutionForwardAlgorithm measures on that device
/// (with the spec's math: ConvSpec; at most 256 MiB workspace), stored in the node (algo,
/// workspace); refused without a device.
ir::Node lower_conv(Lowering& L, const ir::Node& n, const LowerOptions& opt);

}  // namespace kiln::targets::cuda

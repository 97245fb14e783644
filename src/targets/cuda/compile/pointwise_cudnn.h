// Matmuls by constant weights as cuDNN 1x1 convolutions, so that a
// ResNet-class program needs no cuBLASLt at all (pointwise_cudnn.cpp).
#pragma once
#include "ir/graph.h"

namespace kiln::targets::cuda {

struct LowerOptions;

/// Whether 1x1 convolutions and matmuls by constant weights go to cuDNN
/// instead of cuBLASLt: opt.pointwise_cudnn when set, else the environment
/// variable KILN_CUDA_POINTWISE ("cudnn": yes; "gemm", unset or empty: no,
/// the default; any other value is warned about once and means no). A
/// compile-time measurement aid, not part of the cache key.
bool pointwise_on_cudnn(const LowerOptions& opt);

/// Rewrites every main-graph Gemm (transA 0, alpha 1, beta 1, A [M, K]
/// static, B a constant [N, K] (transB 1) or [K, N], C absent or a constant
/// of N values as [N] or [1, N]) and MatMul (A [..., K] static, rank >= 2,
/// B a constant [K, N]; a following Add of a constant of N values that only
/// it reads is taken as C) of a float32 / float16 / bfloat16 program into
///   Reshape(A) -> Conv 1x1 (filter [N, K] as a 1x1 filter) -> [Add C] -> Reshape
/// to the matmul's output shape: with `nhwc` the Conv is a channels-last one
/// (kiln_nhwc 1, x [M, 1, 1, K], y [M, 1, 1, N], C as [1, 1, 1, N]), else
/// NCHW (x [M, K, 1, 1], y [M, N, 1, 1], C as [1, N, 1, 1]); the bytes of A
/// and of the output are the same either way, so both Reshapes are aliases
/// (no copy), and lower_conv_fused gives the bias to cuDNN's epilogue.
/// Runs after to_nhwc. Returns the number rewritten.
int gemms_to_convs(ir::Model& m, bool nhwc);

}  // namespace kiln::targets::cuda

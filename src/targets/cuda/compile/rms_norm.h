// RMS normalization as one row kernel on the cuda target (rms_norm.cpp).
#pragma once
#include "ir/graph.h"

namespace kiln::targets::cuda {

/// Rewrites each main-graph chain
///   [a = Cast(x, float)]  r = ReduceMean(Pow(a, 2) | Mul(a, a), last axis, keepdims)
///   y = a * (1 / Sqrt(r + eps)) | a * Reciprocal(Sqrt(r + eps)) | a / Sqrt(r + eps)
///   [Cast(y, float type)]  [* weight (a constant of D elements)]
/// whose intermediate values have no other reader, over a static float32 /
/// float16 / bfloat16 a of last dim D, into one ONNX RMSNormalization (opset
/// 23: axis -1, epsilon eps; inputs x and the weight, or float32 ones),
/// which gen_reduce lowers as a row kernel (statistics in float32). Called by
/// the cuda lowering after the precision pass, so that the node's dtypes are
/// the program's. KILN_CUDA_RMS_NORM=0 turns it off (a measurement aid).
/// Returns the number of chains fused.
int fuse_rms_norms(ir::Model& m);

}  // namespace kiln::targets::cuda

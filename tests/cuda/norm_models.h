// Normalization models of the cuda target's tests (norm_models.cpp).
#pragma once
#include "cuda_models.h"

namespace kiln::testing {

/// RMS normalization over the last axis of x [2, 6, D] float32, as exporters
/// write it (rms_norm.cpp fuses it on cuda):
///   form 0 (transformers' LlamaRMSNorm, torch.onnx): a = Cast(x, float);
///     y = W[D] * Cast(a * Div(1, Sqrt(ReduceMean(Pow(a, 2)) + 1e-6)), float)
///   form 1: y = x / Sqrt(ReduceMean(x * x) + 1e-5)   (no weight)
///   form 2: form 0 whose squares are also an output (`sq`): not fused.
/// Output y [2, 6, D] (and sq for form 2).
ModelBuilder rms_norm_model(int form, int64_t d);

}  // namespace kiln::testing

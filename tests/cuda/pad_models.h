// Matmuls whose n is not 16-byte aligned (issue #20: pad_matmul_n) and
// Slices joining element-wise chains, for the cuda target's tests
// (test_cuda_gemm_pad.cpp, test_cuda_gemm_pad_gpu.cpp).
#pragma once
#include <string>
#include <vector>

#include "../unit/onnx/model_builder.h"

namespace kiln::testing {

/// The weights of pad_matmul_model / pad_gemm_model, in the order they are
/// stored: scale * sin(0.37 i + phase) + 0.25 scale * cos(0.011 i), i < n
/// (signed, smooth, no two columns alike).
std::vector<float> pad_weights(int64_t n, float scale, float phase);

/// y = act(MatMul(x, W) [+ b]), opset 17 (20 with Gelu): x float32[rows, k] (batch 0) or
/// [batch, rows, k] (B shared by the batches), W = pad_weights(k * n,
/// 1 / sqrt(k), 0.3) as [k, n], b = pad_weights(n, 0.5, 1.1) as [n] when
/// `bias`, act "" (none), "Relu" or "Gelu" (erf form). Output "y".
ModelBuilder pad_matmul_model(int64_t batch, int64_t rows, int64_t k, int64_t n, bool bias, const std::string& act);

/// y = Gemm(x, W, [C], alpha 0.5, beta 2, transB `trans_b`), opset 17: x
/// float32[m, k], W = pad_weights(n * k, 1 / sqrt(k), 0.3) as [n, k] with
/// transB (torch.nn.Linear's layout), else [k, n]; C: "" none, "bias" a [n]
/// constant pad_weights(n, 0.5, 1.1), "full" a model input c float32[m, n]
/// (cuBLASLt's C). Output "y".
ModelBuilder pad_gemm_model(int64_t m, int64_t k, int64_t n, bool trans_b, const std::string& c);

/// y = MatMul(x, W) + r, opset 17: x float32[m, k], W as pad_matmul_model's,
/// r a model input float32[m, n] (a residual lower_gemm fuses as C). Output "y".
ModelBuilder pad_residual_model(int64_t m, int64_t k, int64_t n);

/// Slices read by one element-wise node each (gen_elementwise's Slice
/// gathers), opset 17: x float32[6, 5, 40] ->
///   a = Relu(Slice(x, starts 8, ends 40, axes 2))        [6,5,32]  rows, offset multiples of 4: vector loads
///   b = Neg(Slice(x, starts 1, ends 4, axes 1))          [6,3,40]  a window of whole inner rows
///   c = Exp(Slice(x, starts 3, ends 38, axes -1) * 0.5)  [6,5,35]  odd window: element loads
///   d = Slice(x, starts 0, ends 2, axes 0)               [2,5,40]  no element-wise reader: the Slice kernel
/// Outputs a, b, c, d.
ModelBuilder slice_chain_model();

}  // namespace kiln::testing

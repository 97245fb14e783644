// Small ONNX models for the cuda target's tests (tests/cuda).
#pragma once
#include "../unit/onnx/model_builder.h"

namespace kiln::testing {

/// Sets a float attribute on a node.
void attr_float(onnx::NodeProto& n, const std::string& name, float v);

/// A model touching every cuda kernel family except matmuls (no GPU needed
/// to compile it): x float32[2,4,8], idx int64[3] -> outputs
///   soft  = Softmax(Tanh(x * 0.5 + c8), axis -1)          (fused element-wise chain + softmax)
///   tr    = Transpose(soft, perm 0,2,1)                   [2,8,4]
///   sl    = Slice(Concat(x, Gather(x, idx, axis 1), axis 1), starts 1, ends 6, axis 1)  [2,5,8]
///   ln    = LayerNormalization(x - ReduceMean(x, axis 2, keepdims), g8, b8)   [2,4,8]
///   rs    = Reshape(ReduceSum(x, axis 1, keepdims 0), [16])   [16]
///   wh    = Where(x > 0, x, Exp(x) - 1)                   [2,4,8]
ModelBuilder kernels_model();

/// kernels_model() plus matmuls (cuBLASLt): mm = Relu(MatMul(x, W[8,8]) + b[8])
/// (bias + Relu epilogue), bmm = MatMul(soft, tr) (batched [2,4,4]), and
/// gm = Gemm(Reshape(x,[8,8]), W2[5,8], C[5], transB=1, alpha 0.5) [8,5].
ModelBuilder matmul_model();

/// Pooling windows only (no GPU needed to compile): x float32[1,4,9,9] ->
///   mp = MaxPool(x, kernel 3, strides 2, pads 1)                         [1,4,5,5]
///   ap = AveragePool(x, kernel 3, strides 2, pads 1, count_include_pad 0)  [1,4,5,5]
///   ai = AveragePool(x, kernel 2, strides 2, ceil_mode 1, count_include_pad 1) [1,4,5,5]
ModelBuilder pool_model();

/// A small ResNet-like network (cuDNN convolutions, GPU only): x float32[2,3,16,16] ->
/// Relu(Conv 3x3 + bias) -> MaxPool 3/2 -> residual block (Conv + bias, Add, Relu)
/// -> depthwise Conv stride 2 (group 8) -> GlobalAveragePool -> Flatten ->
/// Gemm(transB) -> y [2,10].
ModelBuilder conv_model();

/// A ResNet-style block with unfolded-looking BatchNormalizations (the cuda
/// pipeline folds them into the convolutions): x float32[2,3,16,16] ->
/// Relu(BN(Conv 3x3)) -> BN(Conv 3x3) + residual -> Relu -> MaxPool 2/2 ->
/// GlobalAveragePool -> Flatten -> Gemm(transB) -> y [2,10].
ModelBuilder conv_bn_model();

/// A pre-norm transformer block (d_model 32, 2 heads of 16, seq 8, batch 2,
/// feed-forward 64): x float32[2,8,32] -> LayerNormalization -> Q/K/V
/// MatMul + bias -> Reshape/Transpose -> scores MatMul * 0.25 -> Softmax ->
/// MatMul -> Transpose/Reshape -> output MatMul + bias -> residual Add ->
/// LayerNormalization -> MatMul + bias -> Relu -> MatMul + bias -> residual
/// Add = y [2,8,32]; and rms = y / Sqrt(ReduceMean(y * y, -1) + 1e-5)
/// [2,8,32] (a decomposed variance-style normalization).
ModelBuilder attention_model();

/// 1x1 convolutions (GPU only to run): x float32[2,6,5,7] ->
///   s  = Conv1x1(Relu(Conv1x1(x, W1[4,6,1,1]) + B1), W2[6,4,1,1]) + x   [2,6,5,7]  (two cuBLASLt matmuls)
///   c3 = Conv1x1(s, W3[5,6,1,1], strides 2)                              [2,5,3,4]  (cuDNN: strided)
ModelBuilder pointwise_model();

/// A residual matmul (GPU only to run): x float32[1,6,8] ->
///   y = Relu(x + (MatMul(x, W[8,8]) + B[8]))   [1,6,8]: one cuBLASLt matmul (bias epilogue, x as C, Relu)
ModelBuilder residual_model();

/// Channels-last layout (to_nhwc) corner cases: x float32[2,4,9,9], z float32[2,6,4,4] ->
///   r1 = Relu(Conv 3x3 pad 1 + B1)                       [2,8,9,9]  (also an output: leaves the region mid-way)
///   ap = AveragePool(r1 * S[8,1,1], kernel 3, strides 2, pads 1)  [2,8,5,5] (per-channel constant permuted)
///   mp = MaxPool(Conv1x1(ap) + B2, kernel 2, strides 1)  [2,6,4,4]  (1x1 conv as a matmul with bias epilogue)
///   s  = Sigmoid(mp + z)                                  [2,6,4,4]  (z enters the region through a transpose)
///   c4 = Conv1x1(s, W4[1,6,1,1])                          [2,1,4,4]  (one channel: leaves through a reshape)
///   c5 = Conv(r1, W5[4,8,3,3], dilations 2, pads 2)       [2,4,9,9]
///   c6 = Conv(r1, W6[8,4,3,3], group 2, pads 1)           [2,8,9,9]
ModelBuilder nhwc_model();

/// Symbolic batch (shape buckets): x float32[N, 8] -> y = Sigmoid(Softmax(MatMul(x,
/// W[8,8]) + B[8])) [N, 8]: one cuBLASLt matmul (bias epilogue) and two
/// generated kernels whose loop bounds bake in N.
ModelBuilder batch_model();

}  // namespace kiln::testing

// Channels-last models for the cuda target's tests beyond cuda_models.h
// (nhwc_models.cpp).
#pragma once
#include "cuda_models.h"

namespace kiln::testing {

/// A DenseNet-style dense layer and transition, batch `n`:
/// x float32[n,4,8,8], z float32[n,2,8,8] ->
///   cat = Concat(x, Conv 3x3 pad 1 (4 -> 6), Conv1x1(x) + B2 (4 -> 6), z, axis 1)   [n,18,8,8]
///   y   = AveragePool(Conv 3x3 pad 1 (18 -> 8)(Relu(BatchNormalization(cat))), 2x2 stride 2)  [n,8,4,4]
/// The BatchNormalization follows a Concat (no convolution absorbs it), with
/// scale, B, mean and var all different per channel; z is read only by the
/// Concat (it enters a channels-last region through its own transpose).
ModelBuilder dense_block_model(int64_t n);

/// A ConvNeXt block between two depthwise convolutions (opset 17):
/// x float32[2,8,6,6] ->
///   a  = Conv 3x3 depthwise pad 1 (Wd, Bd)(x); at = Transpose(a, 0,2,3,1) [2,6,6,8]
///   h  = MatMul(Relu(MatMul(LayerNormalization(at, axis -1), W1[8,16])), W2[16,8])
///   y1 = Transpose(h, 0,3,1,2) * gamma[8,1,1] + x;  y = Conv 3x3 depthwise pad 1 (Wd2)(y1)   [2,8,6,6]
/// In a channels-last program the region's exit after `a` merges with the
/// first Transpose, and the second joins the region as an Identity: only x's
/// entry and y's exit remain.
ModelBuilder convnext_block_model();

/// A patch embedding (patch_conv.cpp): x [n, 3, 16, 16] -> Conv 4x4 / 4 to 16
/// channels with a bias -> Relu -> y [n, 16, 4, 4], and a ViT-style
/// Conv 8x8 / 8 without a bias to 8 channels -> Reshape [n, 8, 4] ->
/// Transpose(0, 2, 1) -> tokens [n, 4, 8]; cosine weights.
ModelBuilder patch_embed_model(int64_t n);

/// An RGB stem (stem_pad.cpp): x [n, 3, 32, 32] -> Conv k x k / stride, pad
/// k / 2, 3 -> 16 channels, with a bias -> Relu -> Conv 3x3 pad 1, 16 -> 16,
/// no bias -> y [n, 16, OH, OH]; cosine weights. (7, 2): ResNet's stem, (3,
/// 2): EfficientNet's / MobileNet's.
ModelBuilder rgb_stem_model(int64_t n, int64_t k, int64_t stride);

/// Pads of zeros on one axis (gen_elementwise's Pad gather): x float32
/// [2, 5, 3, 4] -> yc = Relu(Pad channels 2 before, 1 after) [2, 8, 3, 4],
/// yw = Pad(last axis 3 before, 2 after) [2, 5, 3, 9].
ModelBuilder one_axis_pad_model();

/// Two stems on one image: x [n, 3, 16, 16] -> Conv 3x3 / 2 pad 1 (3 -> 8)
/// -> ya [n, 8, 8, 8], and Conv 3x3 pad 1 (3 -> 8) with a bias -> Relu -> yb
/// [n, 8, 16, 16]. The channels-last entry of x has two readers, so each
/// convolution gets a Pad of its own (no Cast reordering).
ModelBuilder shared_stem_model(int64_t n);

/// The NHWC graph `m` (to_nhwc's output) with every kiln_nhwc node wrapped
/// back into NCHW (Transpose in, the plain ONNX node, Transpose out; filters
/// transposed back) and non-constant shapes cleared for inference, so that
/// the ref target can run it: the layout rewrites' semantics are checked on
/// the CPU, independently of the cuda kernels.
ir::Model nchw_shim(ir::Model m);

/// Runs `m` (an ir::Model, e.g. after a cuda graph rewrite) on the ref target
/// with `in`: its outputs by name.
std::map<std::string, Tensor> run_ref(const ir::Model& m, const std::map<std::string, Tensor>& in);

/// Every float32 output in `want` is in `got` with its shape, each element
/// within rel * (1 + |want|) (gtest failures name the output and index).
void expect_all_near(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want, double rel);
/// A ResNet-style tail for KILN_CUDA_POINTWISE=cudnn (pointwise_cudnn.cpp),
/// batch `n`: x float32[n,8,6,6] ->
///   r  = Relu(Conv 3x3 pad 1 (8 -> 8) + B1)
///   c  = Relu(Conv 1x1 (8 -> 16)(r) + B2 + Conv 1x1 (8 -> 16)(x))     [n,16,6,6]
///   f  = Flatten(GlobalAveragePool(c))                                [n,16]
///   y  = Gemm(f, Wfc [10,16], Cfc [10], transB 1)                     [n,10]
///   y2 = MatMul(f, Wm [16,4]) + Bm [4]                                [n,4]
///   y3 = Gemm(f, Wg [16,4], Cg [1,4])  (transB 0)                     [n,4]
/// Cosine weights; every matmul by a constant, every 1x1 convolution unstrided.
ModelBuilder resnet_tail_model(int64_t n);

}  // namespace kiln::testing

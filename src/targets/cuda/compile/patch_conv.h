// Patch-embedding convolutions as a transpose and a matmul (patch_conv.cpp).
#pragma once
#include "ir/graph.h"

namespace kiln::targets::cuda {

/// Rewrites every main-graph 2-D Conv whose kernel equals its stride (kh*kw
/// >= 4, no pads, no dilation, group 1, constant filter, no bias input left
/// by split_conv_bias, static shapes with H and W whole multiples of the
/// kernel, float32 / float16 / bfloat16, C*kh*kw and K multiples of 16 bytes'
/// elements) into Reshape x [N,C,H,W] -> [N,C,OH,kh,OW,kw], Transpose ->
/// [N,OH,OW,C,kh,kw], Reshape -> [N*OH*OW, C*kh*kw], MatMul by the filter as
/// [C*kh*kw, K], [Add of the split-off bias as a [K] row: lower_gemm's bias
/// epilogue], Reshape -> [N,OH,OW,K], Transpose -> [N,K,OH,OW] (the Conv's
/// output, or its bias Add's). Vision transformers' patch embedding
/// (ViT-B/16 16x16 / 16), Swin's and ConvNeXt's 4x4 / 4 stems. Runs before
/// to_nhwc. KILN_CUDA_PATCH_GEMM=0 turns it off (a measurement aid).
/// Returns the number of convolutions rewritten.
int patch_convs_to_gemm(ir::Model& m);

}  // namespace kiln::targets::cuda

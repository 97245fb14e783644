// Channel padding of RGB-stem convolutions (stem_pad.cpp).
#pragma once
#include "ir/graph.h"

namespace kiln::targets::cuda {

/// The channel multiple stem convolutions are padded to: KILN_CUDA_STEM_PAD_C
/// (0: off, 4 or 8), default 4 (measured best on the H200). Another value is ignored with a warning.
int stem_pad_multiple();

/// After to_nhwc, in a 16-bit program: every main-graph channels-last Conv
/// (`kiln_nhwc`, x [N,H,W,C], constant filter [K,R,S,C], group 1, no bias
/// input, float16 / bfloat16, static shapes) with 0 < C < `multiple` reads
/// its input padded with zero channels to C' = `multiple`, through an ONNX
/// Pad (constant 0, end of axis 3), and its filter becomes [K,R,S,C'] with
/// zero weights in the new channels: the same sums (the added products are
/// exact zeros), y unchanged. Where x is the region's entry Transpose of a
/// Cast (float32 -> 16-bit) of the model's NCHW input, each read only by the
/// next, the chain is reordered to Transpose (float32) -> Pad -> Cast, so
/// that the lowering generates one kernel for all three (gen_elementwise:
/// the Pad, read through the Transpose, is a gather of the Cast). `multiple`
/// 0 (or anything but 4 and 8) does nothing. Returns the number of
/// convolutions padded.
int pad_stem_channels(ir::Model& m, int multiple);

}  // namespace kiln::targets::cuda

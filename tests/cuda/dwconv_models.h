// Depthwise convolution models for the cuda target's tests
// (test_cuda_dwconv.cpp, test_cuda_dwconv_gpu.cpp).
#pragma once
#include <string>

#include "../unit/onnx/model_builder.h"

namespace kiln::testing {

/// One depthwise convolution (group = channels) and its epilogue, opset 17:
/// x float32[n, c, h, w] -> y = act(Conv(x, W[c, 1, k, k], [B[c]], group c,
/// strides `stride`, pads k / 2)), act "" (none), "Relu" or "Clip" (min 0,
/// max 6 as constant inputs; with `big_weights` the filter and bias reach
/// +-1.5, so that the Clip bounds are hit). W and B are seeded. Output "y".
struct DwConvConfig {
  int64_t n = 1, c = 8, h = 10, w = 10, k = 3, stride = 1;
  bool bias = true;
  std::string act = "Clip";
  bool big_weights = false;
  std::string label() const;  ///< "n32 c17 10x10 k3 s2 +bias Clip"
};
ModelBuilder dwconv_model(const DwConvConfig& c);

/// Convolutions of which only some are depthwise (lower_depthwise_convs'
/// choice), opset 17: x float32[n, 16, 12, 12] ->
///   a = Clip(Conv(x, Wa[16,1,3,3], Ba, group 16, pads 1), 0, 6)     depthwise 3x3 + bias + Clip
///   e = Relu(Conv(x, We[16,1,5,5], Be, group 16, strides 2, pads 2)) depthwise 5x5 stride 2 + bias + Relu
///   b = Conv(x, Wb[16,16,3,3], pads 1)                              group 1
///   m = Conv(x, Wm[32,1,3,3], group 16, pads 1)                     channel multiplier 2
///   d = Conv(x, Wd[16,1,3,3], group 16, dilations 2, pads 2)        dilated
/// Outputs a, e, b, m, d.
ModelBuilder mixed_convs_model(int64_t n);

}  // namespace kiln::testing

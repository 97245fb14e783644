// DepthToSpace (DCR and CRD modes) and SpaceToDepth
// (https://onnx.ai/onnx/operators/onnx__DepthToSpace.html): a strided copy
// through a 6-D view of the NCHW input.
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "ops/data_movement.h"

namespace kiln::ops {
namespace {

using namespace data_movement;

// ---- DepthToSpace, SpaceToDepth -----------------------------------------------------------

int64_t block_size(const ir::Node& n) {
  int64_t b = n.i("blocksize");
  if (b <= 0) fail(ErrorCode::invalid_model, "{}: blocksize must be positive, got {}", n.label(), b);
  return b;
}

/// dim / by, exact when static (error if not divisible), unknown when symbolic.
Dim div_dim(const ir::Node& n, const Dim& d, int64_t by, const char* what, ErrorCode code) {
  if (!d.is_static()) return Dim::sym("");
  if (d.value % by != 0) fail(code, "{}: {} {} is not divisible by {}", n.label(), what, d.value, by);
  return Dim::known(d.value / by);
}

std::vector<OutType> infer_space_depth(const InferContext& c) {
  const InType& x = c.in(0);
  if (!x.shape) return one(x.dtype, unknown_dims(4));
  if (x.shape->size() != 4) fail(ErrorCode::invalid_model, "{}: input must be 4-D, got {}", c.node.label(), ir::shape_str(x.shape));
  int64_t b = block_size(c.node);
  const Shape& s = *x.shape;
  auto e = ErrorCode::invalid_model;
  Dim bb = Dim::known(b);
  if (c.node.op_type == "DepthToSpace")
    return one(x.dtype, Shape{s[0], div_dim(c.node, s[1], b * b, "channels", e), mul_dim(s[2], bb), mul_dim(s[3], bb)});
  return one(x.dtype, Shape{s[0], mul_dim(s[1], Dim::known(b * b)), div_dim(c.node, s[2], b, "height", e),
                            div_dim(c.node, s[3], b, "width", e)});
}

void kernel_space_depth(KernelContext& c) {
  const Tensor& x = c.in(0);
  if (x.rank() != 4) fail(ErrorCode::invalid_input, "{}: input must be 4-D, got {}", c.node.label(), x.describe());
  int64_t b = block_size(c.node), N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  int64_t sN = C * H * W, sC = H * W, sH = W;
  auto e = ErrorCode::invalid_input;
  std::vector<int64_t> view, strides, out;
  if (c.node.op_type == "DepthToSpace") {
    std::string mode = c.node.s("mode", "DCR");
    int64_t Co = div_dim(c.node, Dim::known(C), b * b, "channels", e).value;
    // Output [N, C', H, b, W, b] in row-major order; where each (c', i, j) reads its input channel.
    view = {N, Co, H, b, W, b};
    if (mode == "DCR") strides = {sN, sC, sH, b * Co * sC, 1, Co * sC};
    else if (mode == "CRD") strides = {sN, b * b * sC, sH, b * sC, 1, sC};
    else fail(ErrorCode::unsupported, "{}: mode '{}' is not supported", c.node.label(), mode);
    out = {N, Co, H * b, W * b};
  } else {
    int64_t Ho = div_dim(c.node, Dim::known(H), b, "height", e).value;
    int64_t Wo = div_dim(c.node, Dim::known(W), b, "width", e).value;
    // Output channel (i*b + j)*C + c takes pixel (h*b + i, w*b + j) of channel c.
    view = {N, b, b, C, Ho, Wo};
    strides = {sN, sH, 1, sC, b * sH, b};
    out = {N, C * b * b, Ho, Wo};
  }
  copy_strided(c.node, x, c.output(0, x.dtype(), out), view, strides, 0);
}

}  // namespace

void register_space_depth(Registry& r) {
  r.add({"", "DepthToSpace", infer_space_depth, kernel_space_depth});
  r.add({"", "SpaceToDepth", infer_space_depth, kernel_space_depth});
}

}  // namespace kiln::ops

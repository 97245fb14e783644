// 1x1 convolutions as cuBLASLt matmuls (lowering.h: lower_pointwise_conv).
#include "support/error.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/pointwise_cudnn.h"
#include "targets/cuda/run/cuda_ops.h"

namespace kiln::targets::cuda {

bool is_pointwise_conv(const ir::Model& m, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Conv" || n.inputs.size() < 2) return false;
  if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) return false;
  if (n.i("kiln_nhwc", 0) != 0) return false;  // channels-last shapes: not the [N, C, H, W] form below
  const ir::Value &xv = m.value(n.inputs[0]), &wv = m.value(n.inputs[1]), &yv = m.value(n.outputs[0]);
  if (!xv.shape || !wv.shape || !yv.shape || !ir::is_static(*xv.shape) || !ir::is_static(*wv.shape) ||
      !ir::is_static(*yv.shape))
    return false;
  const DType dt = xv.dtype;
  if ((dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) || wv.dtype != dt || yv.dtype != dt) return false;
  auto x = ir::to_sizes(*xv.shape), w = ir::to_sizes(*wv.shape), y = ir::to_sizes(*yv.shape);
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || w[2] != 1 || w[3] != 1 || w[1] != x[1]) return false;
  if (n.i("group", 1) != 1 || n.s("auto_pad", "NOTSET") != "NOTSET") return false;
  for (auto v : n.ints("strides", {1, 1}))
    if (v != 1) return false;
  for (auto v : n.ints("dilations", {1, 1}))
    if (v != 1) return false;
  for (auto v : n.ints("pads", {0, 0, 0, 0}))
    if (v != 0) return false;
  return y[0] == x[0] && y[1] == w[0] && y[2] == x[2] && y[3] == x[3];
}

std::optional<ir::Node> lower_pointwise_conv(Lowering& L, const ir::Node& n, const LowerOptions& opt) {
  if (pointwise_on_cudnn(opt) || !is_pointwise_conv(L.model, n)) return std::nullopt;
  const ir::Model& m = L.model;
  const DType dt = m.value(n.inputs[0]).dtype;
  auto x = ir::to_sizes(*m.value(n.inputs[0]).shape), w = ir::to_sizes(*m.value(n.inputs[1]).shape);

  GemmSpec s;
  s.dtype = dt;
  s.tf32 = dt == DType::f32 && opt.tf32;
  s.m = w[0];            // K output channels
  s.k = w[1];            // C input channels
  s.n = x[2] * x[3];     // H * W positions
  s.batch = x[0];
  s.stride_a = 0;        // the weights, shared by every image
  s.stride_b = s.k * s.n;
  ir::Node g;
  g.op_type = "Gemm";
  g.domain = std::string(kCudaDomain);
  g.name = n.name;
  g.opset = n.opset;
  g.attrs["source_op"] = std::string("Conv");
  g.inputs = {n.inputs[1], n.inputs[0]};
  g.outputs = {n.outputs[0]};
  set_gemm_attrs(g, s);
  set_gemm_decision(L, g, s, opt, n.label());
  return g;
}

}  // namespace kiln::targets::cuda

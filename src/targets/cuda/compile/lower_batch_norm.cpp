// Inference BatchNormalization -> per-channel Mul + Add (lowering.h:
// batch_norm_to_affine).
//
// Why: a BatchNormalization that no convolution absorbed (passes::
// fold_batch_norm folds the ones right after a Conv) is, with constant
// statistics, y = s*x + t per channel. As two ONNX element-wise nodes it
// joins what the element-wise fusion already does (the Relu after it, as in
// DenseNet's BN -> Relu -> Conv, becomes part of one kernel) and an NHWC
// region (to_nhwc permutes the per-channel constants to broadcast over the
// last axis), where the generic BatchNormalization kernel (gen_reduce.cpp) is
// a node of its own that reads NCHW only: DenseNet-121 went NHWC -> NCHW ->
// NHWC around each of its 58 post-Concat BatchNormalizations.
#include <fmt/format.h>

#include "passes/passes.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

namespace {

bool float_storage(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

/// A float32 constant [C, 1, .., 1] of rank `rank` - 1: one value per
/// channel, broadcasting (right-aligned) over the spatial dims of a rank
/// `rank` NCHW value, like split_conv_bias's bias.
ir::ValueId channel_constant(ir::Model& m, const std::string& name, const std::vector<float>& data, size_t rank) {
  std::vector<int64_t> dims(rank - 1, 1);
  dims[0] = static_cast<int64_t>(data.size());
  Tensor t(DType::f32, dims);
  std::copy(data.begin(), data.end(), t.data<float>());
  ir::Value v;
  v.name = name;
  v.dtype = DType::f32;
  v.shape = ir::static_shape(dims);
  v.constant = std::move(t);
  return m.add_value(std::move(v));
}

/// The static dims of x if BatchNormalization `n` can become Mul + Add:
/// inference form (training_mode 0, no running-statistics outputs), x of
/// rank >= 2 with a static shape and a float storage dtype; else empty.
std::vector<int64_t> rewritable_dims(const ir::Model& m, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.inputs.size() != 5 || n.outputs.empty() ||
      n.outputs[0] == ir::kNoValue || n.i("training_mode", 0) != 0)
    return {};
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] != ir::kNoValue) return {};
  const ir::Value& x = m.value(n.inputs[0]);
  const ir::Value& y = m.value(n.outputs[0]);
  if (!x.shape || !ir::is_static(*x.shape) || x.shape->size() < 2 || !float_storage(x.dtype) ||
      !float_storage(y.dtype))
    return {};
  return ir::to_sizes(*x.shape);
}

}  // namespace

int batch_norm_to_affine(ir::Model& m) {
  int rewritten = 0;
  std::vector<ir::Node> out;
  out.reserve(m.main.nodes.size());
  for (auto& n : m.main.nodes) {
    const auto x = rewritable_dims(m, n);
    std::vector<float> s, t;
    // batch_norm_affine wants float32 statistics of C values each: the
    // precision pass keeps BatchNormalization's parameters float32.
    if (x.empty() || !passes::batch_norm_affine(m, n, x[1], s, t)) {
      out.push_back(std::move(n));
      continue;
    }
    const ir::ValueId sv = channel_constant(m, n.name + "_bn_scale", s, x.size());
    const ir::ValueId tv = channel_constant(m, n.name + "_bn_shift", t, x.size());
    // The product stays float32 whatever x's dtype (as the BatchNormalization
    // kernel computes): fused with the Add it is never stored, so a 16-bit
    // program rounds y once, not s*x before the shift (s*x and t can be
    // large and cancel).
    ir::Value p = m.value(n.outputs[0]);
    p.name += "_bn_scaled";
    p.dtype = DType::f32;
    p.constant.reset();
    const ir::ValueId pv = m.add_value(std::move(p));
    ir::Node mul;
    mul.op_type = "Mul";
    mul.name = n.name + "_scale";
    mul.opset = n.opset;
    mul.inputs = {n.inputs[0], sv};
    mul.outputs = {pv};
    ir::Node add;
    add.op_type = "Add";
    add.name = n.name;  // the node that writes y keeps the BatchNormalization's name
    add.opset = n.opset;
    add.inputs = {pv, tv};
    add.outputs = {n.outputs[0]};
    out.push_back(std::move(mul));
    out.push_back(std::move(add));
    ++rewritten;
  }
  m.main.nodes = std::move(out);
  if (rewritten) log().debug("cuda: {} BatchNormalization(s) as per-channel Mul + Add", rewritten);
  return rewritten;
}

}  // namespace kiln::targets::cuda

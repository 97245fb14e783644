// Conv -> [Add bias] -> [Add residual] -> [Relu] as one cuDNN graph-API
// convolution with a fused epilogue (lowering.h: lower_conv_fused).
#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/pointwise_cudnn.h"
#include "targets/cuda/compile/tuning.h"

namespace kiln::targets::cuda {

namespace {

bool has_dims(const ir::Value& v, const std::vector<int64_t>& dims, DType dt) {
  return v.dtype == dt && v.shape && ir::is_static(*v.shape) && ir::to_sizes(*v.shape) == dims;
}

}  // namespace

bool is_channel_bias(const ir::Value& v, const std::vector<int64_t>& ydims, size_t axis, DType dt) {
  if (!v.constant || v.dtype != dt || !v.shape || !ir::is_static(*v.shape)) return false;
  auto b = ir::to_sizes(*v.shape);
  if (b.size() > ydims.size()) return false;
  const size_t off = ydims.size() - b.size();
  bool channel = false;
  for (size_t j = 0; j < b.size(); ++j) {
    if (off + j == axis && b[j] == ydims[axis]) channel = true;
    else if (b[j] != 1) return false;
  }
  return channel || ydims[axis] == 1;
}

// 2.5 TB/s: what the H200's generated element-wise kernels reach on
// ResNet-50's activations; 3 us: launch and tail inside a CUDA graph.
double epilogue_kernel_ms(const ConvSpec& s, const ConvEpilogue& ep) {
  double bytes = static_cast<double>(dtype_size(s.dtype));
  for (auto d : s.y) bytes *= static_cast<double>(d);
  bytes *= 2 + (ep.residual ? 1 : 0);
  return 0.003 + bytes / 2.5e9;
}

std::optional<ConvLowered> lower_conv_fused(Lowering& L, int i, const std::vector<ir::Node>& nodes, const Uses& uses,
                                            const LowerOptions& opt, const std::vector<bool>& done) {
  const ir::Node& n = nodes[i];
  if (done[i] || !n.domain.empty() || n.op_type != "Conv" || !graph_convs_enabled(opt)) return std::nullopt;
  if (n.inputs.size() < 2 || (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue)) return std::nullopt;
  const ir::Model& m = L.model;
  if (!pointwise_on_cudnn(opt) && is_pointwise_conv(m, n)) return std::nullopt;  // lower_pointwise_conv's
  const ir::Value& yv = m.value(n.outputs[0]);
  if (!yv.shape || !ir::is_static(*yv.shape) || yv.shape->size() < 3) return std::nullopt;
  const DType dt = yv.dtype;
  const std::vector<int64_t> ydims = ir::to_sizes(*yv.shape);
  const size_t axis = n.i("kiln_nhwc", 0) != 0 ? ydims.size() - 1 : 1;

  // The one reader of `v`, when `v` is nothing else's and the reader is an
  // ONNX node not yet claimed.
  auto sole_reader = [&](ir::ValueId v) -> int {
    if (uses.is_output[v] || uses.readers[v].size() != 1) return -1;
    int r = uses.readers[v][0];
    return done[r] || !nodes[r].domain.empty() ? -1 : r;
  };
  // The other operand of binary node `r` reading `cur` once.
  auto other_input = [&](int r, ir::ValueId cur) -> ir::ValueId {
    const auto& in = nodes[r].inputs;
    if (in.size() != 2 || in[0] == in[1]) return ir::kNoValue;
    return in[0] == cur ? in[1] : in[0];
  };
  ConvEpilogue ep;
  std::vector<int> absorbed = {i};
  std::vector<ir::ValueId> inputs = {n.inputs[0], n.inputs[1]};
  ir::ValueId cur = n.outputs[0], z = ir::kNoValue;
  int r = sole_reader(cur);
  auto take = [&](int node) {
    absorbed.push_back(node);
    cur = nodes[node].outputs[0];
    r = sole_reader(cur);
  };
  if (r >= 0 && nodes[r].op_type == "Add" && has_dims(m.value(nodes[r].outputs[0]), ydims, dt)) {
    ir::ValueId other = other_input(r, cur);
    if (other != ir::kNoValue && is_channel_bias(m.value(other), ydims, axis, dt)) {
      ep.bias = true;
      inputs.push_back(other);
      take(r);
    }
  }
  if (r >= 0 && nodes[r].op_type == "Add" && has_dims(m.value(nodes[r].outputs[0]), ydims, dt)) {
    ir::ValueId other = other_input(r, cur);
    if (other != ir::kNoValue && has_dims(m.value(other), ydims, dt)) {
      ep.residual = true;
      z = other;
      take(r);
    }
  }
  if (r >= 0 && nodes[r].op_type == "Relu" && has_dims(m.value(nodes[r].outputs[0]), ydims, dt)) {
    ep.relu = true;
    take(r);
  }
  if (ep.empty()) return std::nullopt;
  if (z != ir::kNoValue) inputs.push_back(z);
  ConvSpec s = conv_spec_for(L, n, opt);
  if (s.transposed) return std::nullopt;
  auto e = tune_conv_graph(s, ep, opt.tuning, opt.device, n.label(), L.tuning, pointwise_on_cudnn(opt));
  if (!e) {
    log().debug("{}: no cuDNN engine fuses {}: the epilogue stays a separate kernel", n.label(), ep.describe());
    return std::nullopt;
  }
  if (opt.tuning != Tuning::heuristic) {
    // The fusion must beat the legacy API's best algorithm plus the
    // element-wise kernel it saves (seen on the H200: strict float32 NCHW
    // fused engines lose to cudnnFind's choice on some 3x3 convolutions).
    const ConvAlgo legacy = tune_conv(s, opt.tuning, opt.device, n.label(), L.tuning);
    const double saved = epilogue_kernel_ms(s, ep);
    if (legacy.ms > 0 && e->ms > legacy.ms + saved) {
      log().debug("{}: {} {} ({:.4f} ms) loses to the legacy algorithm {} ({:.4f} ms) + an epilogue kernel (~{:.4f} ms)",
                  n.label(), ep.describe(), e->describe(), e->ms, legacy.algo, legacy.ms, saved);
      return std::nullopt;
    }
  }
  return ConvLowered{graph_conv_node(n, s, ep, *e, std::move(inputs), cur), std::move(absorbed)};
}

}  // namespace kiln::targets::cuda

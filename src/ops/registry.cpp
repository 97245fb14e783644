#include "ops/registry.h"

#include <algorithm>
#include <cstring>

#include "support/error.h"

namespace kiln::ops {

const InType& InferContext::in(size_t i) const {
  if (!has(i)) fail(ErrorCode::invalid_model, "{}: required input {} is missing", node.label(), i);
  return inputs[i];
}

const Tensor& KernelContext::in(size_t i) const {
  if (!has(i)) fail(ErrorCode::invalid_model, "{}: required input {} is missing", node.label(), i);
  return *inputs_[i];
}

Tensor& KernelContext::output(size_t i, DType dtype, const std::vector<int64_t>& shape) {
  KILN_CHECK(i < outputs_.size(), "{}: output {} out of range", node.label(), i);
  outputs_[i] = alloc_ ? alloc_(i, dtype, shape) : Tensor(dtype, shape);
  return outputs_[i];
}

void KernelContext::set_output(size_t i, const Tensor& t) {
  Tensor& o = output(i, t.dtype(), t.shape());
  if (t.nbytes() && o.raw() != t.raw()) std::memcpy(o.raw(), t.raw(), t.nbytes());
}

std::vector<Tensor> KernelContext::run_subgraph(const ir::Graph& g, const std::vector<Tensor>& inputs) const {
  KILN_CHECK(static_cast<bool>(subgraphs_), "{}: no subgraph runner", node.label());
  return subgraphs_(g, inputs);
}

void Registry::add(OpInfo info) { ops_.push_back(std::move(info)); }

const OpInfo* Registry::find(std::string_view domain, std::string_view op_type) const {
  // "ai.onnx" is the default domain spelled out.
  if (domain == "ai.onnx") domain = "";
  for (auto& o : ops_)
    if (o.domain == domain && o.op_type == op_type) return &o;
  return nullptr;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (auto& o : ops_) out.push_back(o.domain.empty() ? o.op_type : o.domain + "." + o.op_type);
  std::sort(out.begin(), out.end());
  return out;
}

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    register_elementwise_unary(reg);
    register_elementwise_binary(reg);
    register_activation(reg);
    register_cast(reg);
    register_reduce(reg);
    register_softmax(reg);
    register_conv(reg);
    register_pool(reg);
    register_normalization(reg);
    register_matmul(reg);
    register_resize(reg);
    register_shape_ops(reg);
    register_pad(reg);
    register_space_depth(reg);
    register_gather(reg);
    register_generator(reg);
    register_control_flow(reg);
    register_recurrent(reg);
    register_quantize(reg);
    register_qlinear(reg);
    register_loss(reg);
    register_dropout(reg);
    register_grid_sample(reg);
    register_detection(reg);
    register_einsum(reg);
    register_selection(reg);
    register_misc(reg);
    register_signal(reg);
    register_spatial(reg);
    register_deform_conv(reg);
    register_tfidf(reg);
    register_dynamic_quantize_lstm(reg);
    return reg;
  }();
  return r;
}

namespace {
const OpInfo& lookup(const ir::Node& node) {
  const OpInfo* op = registry().find(node.domain, node.op_type);
  if (!op)
    fail(ErrorCode::unsupported, "unsupported operator {} (domain '{}', opset {}) at node '{}'", node.op_type,
         node.domain.empty() ? "ai.onnx" : node.domain, node.opset, node.name);
  return *op;
}
}  // namespace

std::vector<OutType> infer(const ir::Node& node, std::vector<InType> inputs) {
  const OpInfo& op = lookup(node);
  InferContext ctx{node, std::move(inputs), node.outputs.size()};
  return op.infer(ctx);
}

void run_kernel(KernelContext& ctx) { lookup(ctx.node).kernel(ctx); }

}  // namespace kiln::ops

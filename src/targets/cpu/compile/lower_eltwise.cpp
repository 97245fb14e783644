// ONNX activations -> kiln.cpu.Eltwise (a second step, e.g. HardSigmoid's
// clip, becomes an eltwise post-op).
#include <cfloat>
#include <cmath>

#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

/// The f32 scalar constant of input i, `def` when absent, nullopt when not constant.
std::optional<float> scalar_input(const ir::Model& m, const ir::Node& n, size_t i, float def) {
  if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue) return def;
  const Tensor* t = constant_of(m, n.inputs[i]);
  if (!t || t->dtype() != DType::f32 || t->numel() != 1) return std::nullopt;
  return t->data<float>()[0];
}

}  // namespace

std::optional<std::vector<EltwiseStep>> eltwise_steps(const ir::Model& m, const ir::Node& n) {
  using A = dnnl::algorithm;
  if (!(n.domain.empty() || n.domain == "ai.onnx")) return std::nullopt;
  const std::string& op = n.op_type;
  auto one = [](A a, float alpha = 0, float beta = 0) { return std::vector<EltwiseStep>{{a, alpha, beta}}; };
  if (op == "Relu") return one(A::eltwise_relu);
  if (op == "LeakyRelu") return one(A::eltwise_relu, n.f("alpha", 0.01f));
  if (op == "Sigmoid") return one(A::eltwise_logistic);
  if (op == "Tanh") return one(A::eltwise_tanh);
  if (op == "Exp") return one(A::eltwise_exp);
  // Log stays on the reference kernel: oneDNN's approximation is off by ~1e-6
  // absolute near log(1) = 0, beyond the conformance tolerance.
  if (op == "Sqrt") return one(A::eltwise_sqrt);
  if (op == "Abs") return one(A::eltwise_abs);
  if (op == "Neg") return one(A::eltwise_linear, -1.f, 0.f);
  if (op == "Elu") return one(A::eltwise_elu, n.f("alpha", 1.f));
  if (op == "HardSwish") return one(A::eltwise_hardswish);
  // Softplus and Mish stay on the reference kernel: oneDNN's soft_relu loses
  // ~1% relative accuracy for large negative inputs (log(1 + e^x) ~ e^x).
  if (op == "Round") return one(A::eltwise_round);
  if (op == "HardSigmoid")
    return std::vector<EltwiseStep>{{A::eltwise_linear, n.f("alpha", 0.2f), n.f("beta", 0.5f)},
                                    {A::eltwise_clip, 0.f, 1.f}};
  if (op == "Gelu") {
    std::string approx = n.s("approximate", "none");
    if (approx == "none") return one(A::eltwise_gelu_erf);
    if (approx == "tanh") return one(A::eltwise_gelu_tanh);
    return std::nullopt;
  }
  // Pow(x, 2): the square in RMSNorm (T5, LLaMA-style models) and in
  // exported variances; on the reference kernel (powf per element) it cost
  // T5's encoder 19% of its time. oneDNN's square is x * x correctly rounded;
  // the reference's powf is within an ulp of it. Other exponents stay on the
  // reference kernel.
  if (op == "Pow") {
    auto e = scalar_input(m, n, 1, NAN);
    if (n.inputs.size() == 2 && e && *e == 2.f) return one(A::eltwise_square);
    return std::nullopt;
  }
  if (op == "Clip") {
    auto lo = scalar_input(m, n, 1, -FLT_MAX), hi = scalar_input(m, n, 2, FLT_MAX);
    if (!lo || !hi || std::isnan(*lo) || std::isnan(*hi)) return std::nullopt;
    return one(A::eltwise_clip, *lo, *hi);
  }
  return std::nullopt;
}

std::optional<std::vector<ir::Node>> lower_eltwise(ir::Model& m, const ir::Node& n) {
  if (n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (!is_static_f32(m, x) || !is_static_f32(m, y) || *static_dims(m, x) != *static_dims(m, y)) return std::nullopt;
  if (constant_of(m, x)) return std::nullopt;
  auto steps = eltwise_steps(m, n);
  if (!steps) return std::nullopt;
  auto xd = *static_dims(m, x);
  // One Eltwise node per step (an eltwise primitive with post-ops falls back
  // to oneDNN 2.6's reference implementation, which is wrong); a producer
  // with post-ops may absorb them all later (fuse_post_ops).
  std::vector<ir::Node> out;
  ir::ValueId in = x;
  for (size_t i = 0; i < steps->size(); ++i) {
    ir::Node c = cpu_node(n, "Eltwise");
    if (i) c.name += "/" + std::to_string(i);
    ir::ValueId o = i + 1 == steps->size() ? y : add_value(m, m.value(y).name + "/step" + std::to_string(i), DType::f32, xd);
    c.inputs = {in};
    c.outputs = {o};
    c.attrs["alg"] = static_cast<int64_t>((*steps)[i].alg);
    c.attrs["alpha"] = (*steps)[i].alpha;
    c.attrs["beta"] = (*steps)[i].beta;
    set_md_attr(c, "md.src", plain_md(xd.empty() ? dims_t{1} : dims_t(xd.begin(), xd.end())));
    if (!fast_primitive(c)) return std::nullopt;
    out.push_back(std::move(c));
    in = o;
  }
  return out;
}

}  // namespace kiln::targets::cpu

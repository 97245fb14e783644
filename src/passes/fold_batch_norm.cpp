// BatchNormalization folded into the Conv or Gemm before it: with constant
// weights and statistics, BN(y) = s*(y - mean) + bias (s = scale/sqrt(var+eps),
// per output channel) is the same Conv/Gemm with its weights scaled by s and
// its bias replaced by s*(b - mean) + bias.
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

const Tensor* f32_const(const ir::Model& m, ir::ValueId v) {
  if (v == ir::kNoValue || !m.value(v).constant || m.value(v).constant->dtype() != DType::f32) return nullptr;
  return &*m.value(v).constant;
}

ir::ValueId add_const(ir::Model& m, const std::string& name, Tensor t) {
  ir::Value v;
  v.name = name;
  v.dtype = DType::f32;
  v.shape = ir::static_shape(t.shape());
  v.constant = std::move(t);
  return m.add_value(std::move(v));
}

}  // namespace

bool batch_norm_affine(const ir::Model& m, const ir::Node& bn, int64_t channels, std::vector<float>& s,
                       std::vector<float>& t) {
  if (bn.inputs.size() != 5) return false;
  const Tensor *scale = f32_const(m, bn.inputs[1]), *bias = f32_const(m, bn.inputs[2]),
               *mean = f32_const(m, bn.inputs[3]), *var = f32_const(m, bn.inputs[4]);
  if (!scale || !bias || !mean || !var) return false;
  for (const Tensor* x : {scale, bias, mean, var})
    if (x->numel() != channels) return false;
  float eps = bn.f("epsilon", 1e-5f);
  s.resize(static_cast<size_t>(channels));
  t.resize(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    s[c] = scale->data<float>()[c] / std::sqrt(var->data<float>()[c] + eps);
    t[c] = bias->data<float>()[c] - s[c] * mean->data<float>()[c];
  }
  return true;
}

namespace {

class BnFolder {
 public:
  BnFolder(ir::Model& m, ir::Graph& g) : m_(m), g_(g) {}

  int run() {
    int folded = 0;
    for (auto& n : g_.nodes)
      for (auto& [k, a] : n.attrs)
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) folded += BnFolder(m_, **sg).run();
    std::vector<int> producer(m_.values.size(), -1);
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (auto id : g_.nodes[i].outputs)
        if (id != ir::kNoValue) producer[id] = static_cast<int>(i);
    auto uses = use_counts(g_, m_.values.size());
    std::vector<char> drop(g_.nodes.size(), 0);
    for (size_t j = 0; j < g_.nodes.size(); ++j) {
      ir::Node& bn = g_.nodes[j];
      if (!is_onnx_op(bn, "BatchNormalization") || bn.inputs.size() != 5) continue;
      bool extra_outputs = false;
      for (size_t o = 1; o < bn.outputs.size(); ++o) extra_outputs |= bn.outputs[o] != ir::kNoValue;
      if (extra_outputs || bn.i("training_mode", 0) != 0) continue;
      ir::ValueId y = bn.inputs[0];
      if (producer[y] < 0 || uses[y] != 1) continue;
      ir::Node& p = g_.nodes[static_cast<size_t>(producer[y])];
      if (!fold(p, bn)) continue;
      p.outputs[0] = bn.outputs[0];
      drop[j] = 1;
      ++folded;
    }
    std::vector<ir::Node> kept;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(g_.nodes[i]));
    g_.nodes = std::move(kept);
    return folded;
  }

 private:
  bool affine(const ir::Node& bn, int64_t channels, std::vector<float>& s, std::vector<float>& t) {
    return batch_norm_affine(m_, bn, channels, s, t);
  }

  bool fold(ir::Node& p, const ir::Node& bn) {
    if (p.outputs.size() != 1) return false;
    if (is_onnx_op(p, "Conv")) return fold_conv(p, bn);
    if (is_onnx_op(p, "Gemm")) return fold_gemm(p, bn);
    return false;
  }

  bool fold_conv(ir::Node& p, const ir::Node& bn) {
    const Tensor* w = p.inputs.size() > 1 ? f32_const(m_, p.inputs[1]) : nullptr;
    if (!w || w->rank() < 3) return false;
    int64_t oc = w->dim(0);
    std::vector<float> s, t;
    if (!affine(bn, oc, s, t)) return false;
    const Tensor* b = p.inputs.size() > 2 ? f32_const(m_, p.inputs[2]) : nullptr;
    if (p.inputs.size() > 2 && p.inputs[2] != ir::kNoValue && (!b || b->numel() != oc)) return false;
    Tensor nw = w->clone();
    int64_t per = w->numel() / oc;
    for (int64_t o = 0; o < oc; ++o)
      for (int64_t k = 0; k < per; ++k) nw.data<float>()[o * per + k] *= s[o];
    Tensor nb(DType::f32, {oc});
    for (int64_t o = 0; o < oc; ++o) nb.data<float>()[o] = s[o] * (b ? b->data<float>()[o] : 0.f) + t[o];
    p.inputs.resize(3);
    p.inputs[1] = add_const(m_, m_.value(p.inputs[1]).name + "/bn_folded", std::move(nw));
    p.inputs[2] = add_const(m_, bn.name + "/bias", std::move(nb));
    return true;
  }

  bool fold_gemm(ir::Node& p, const ir::Node& bn) {
    const Tensor* w = p.inputs.size() > 1 ? f32_const(m_, p.inputs[1]) : nullptr;
    if (!w || w->rank() != 2) return false;
    bool tb = p.i("transB", 0) != 0;
    int64_t n = tb ? w->dim(0) : w->dim(1), k = tb ? w->dim(1) : w->dim(0);
    std::vector<float> s, t;
    if (!affine(bn, n, s, t)) return false;
    float alpha = p.f("alpha", 1.f), beta = p.f("beta", 1.f);
    const Tensor* c = p.inputs.size() > 2 && p.inputs[2] != ir::kNoValue ? f32_const(m_, p.inputs[2]) : nullptr;
    if (p.inputs.size() > 2 && p.inputs[2] != ir::kNoValue && (!c || (c->numel() != n && c->numel() != 1))) return false;
    Tensor nw = w->clone();
    for (int64_t r = 0; r < k; ++r)
      for (int64_t col = 0; col < n; ++col) (tb ? nw.data<float>()[col * k + r] : nw.data<float>()[r * n + col]) *= alpha * s[col];
    Tensor nc(DType::f32, {n});
    for (int64_t col = 0; col < n; ++col) {
      float cv = c ? c->data<float>()[c->numel() == 1 ? 0 : col] : 0.f;
      nc.data<float>()[col] = s[col] * beta * cv + t[col];
    }
    p.inputs.resize(3);
    p.inputs[1] = add_const(m_, m_.value(p.inputs[1]).name + "/bn_folded", std::move(nw));
    p.inputs[2] = add_const(m_, bn.name + "/bias", std::move(nc));
    p.attrs["alpha"] = 1.f;
    p.attrs["beta"] = 1.f;
    return true;
  }

  ir::Model& m_;
  ir::Graph& g_;
};

}  // namespace

int fold_batch_norm(ir::Model& m) { return BnFolder(m, m.main).run(); }

}  // namespace kiln::passes

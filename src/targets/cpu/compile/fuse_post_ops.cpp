// Post-op fusion: a kiln.cpu producer absorbs the element-wise consumers of
// its output (bias, activations, scaling, residual / broadcast binary ops), so
// that oneDNN applies them while the output is still in registers.
#include <cmath>

#include "targets/cpu/compile/lower_ops.h"

namespace kiln::targets::cpu {

namespace {

using A = dnnl::algorithm;

/// Producers whose oneDNN primitive applies post-ops in its optimised kernel.
/// (oneDNN 2.6 runs an eltwise primitive with post-ops on its reference
/// implementation, which computes wrong results; so Eltwise is no producer.)
bool can_produce(const ir::Node& p) { return is_cpu(p, "Conv") || is_cpu(p, "MatMul") || is_cpu(p, "Binary"); }

/// The dst descriptor of a producer.
md_t dst_md_of(const ir::Node& p) { return md_attr(p, is_cpu(p, "Eltwise") ? "md.src" : "md.dst"); }

/// The scalar value of a one-element f32 constant.
std::optional<float> scalar_const(const ir::Model& m, ir::ValueId v) {
  const Tensor* t = constant_of(m, v);
  if (!t || t->dtype() != DType::f32 || t->numel() != 1) return std::nullopt;
  return t->data<float>()[0];
}

/// The descriptor of a binary post-op operand w for a producer whose logical
/// output has dims `out` and whose dst descriptor has dims `dd` (a matmul may
/// fold batch dims into M). nullopt when w does not broadcast to the output
/// in a way oneDNN can express in dd.
std::optional<md_t> operand_md(const std::vector<int64_t>& wdims, const std::vector<int64_t>& out, const dims_t& dd) {
  if (wdims.size() > out.size()) return std::nullopt;
  std::vector<int64_t> w(out.size() - wdims.size(), 1);
  w.insert(w.end(), wdims.begin(), wdims.end());
  for (size_t i = 0; i < out.size(); ++i)
    if (w[i] != out[i] && w[i] != 1) return std::nullopt;
  if (dims_t(out.begin(), out.end()) == dd) return plain_md(dims_t(w.begin(), w.end()));
  if (w == out) return plain_md(dd);
  // Folded batch: only an operand broadcast over everything but the last dim.
  for (size_t i = 0; i + 1 < w.size(); ++i)
    if (w[i] != 1) return std::nullopt;
  dims_t o(dd.size(), 1);
  o.back() = w.back();
  return plain_md(o);
}

/// Appends an eltwise step to a post-op chain. Two linear steps in a row are
/// composed into one. oneDNN 2.6's jit binary kernel mixes up the parameters
/// of two eltwise post-ops with the same algorithm, so a chain never gets an
/// algorithm twice: false then (the caller does not fuse).
bool append_eltwise(std::vector<PostOp>& post, A alg, float alpha, float beta) {
  if (alg == A::eltwise_linear && !post.empty() && post.back().kind == PostOp::eltwise &&
      post.back().alg == static_cast<int64_t>(A::eltwise_linear)) {
    PostOp& l = post.back();
    l.beta = alpha * l.beta + beta;
    l.alpha = alpha * l.alpha;
    return true;
  }
  for (auto& p : post)
    if (p.kind == PostOp::eltwise && p.alg == static_cast<int64_t>(alg)) return false;
  post.push_back({PostOp::eltwise, static_cast<int64_t>(alg), alpha, beta, 1.f, -1});
  return true;
}

class Fuser {
 public:
  Fuser(ir::Model& m, ir::Graph& g) : m_(m), g_(g) {}

  int run() {
    int fused = 0;
    for (size_t i = 0; i < g_.nodes.size();) {
      if (try_fuse(i)) {
        ++fused;
        continue;  // the fused node may absorb more; re-examine from the same index
      }
      ++i;
    }
    return fused;
  }

 private:
  // Replaces producer i and consumer j (j > i) by `fused` at j's place.
  void replace(size_t i, size_t j, ir::Node fused, size_t extra_removed = SIZE_MAX) {
    g_.nodes[j] = std::move(fused);
    if (extra_removed != SIZE_MAX && extra_removed > i) g_.nodes.erase(g_.nodes.begin() + extra_removed);
    g_.nodes.erase(g_.nodes.begin() + i);
    if (extra_removed != SIZE_MAX && extra_removed < i) g_.nodes.erase(g_.nodes.begin() + extra_removed);
  }

  bool try_fuse(size_t i) {
    const ir::Node& p = g_.nodes[i];
    if (!can_produce(p) || p.outputs.size() != 1) return false;
    ir::ValueId v = p.outputs[0];
    if (is_output(g_, v)) return false;
    auto uses = uses_of(g_, m_.values.size());
    const auto& u = uses[v];
    if (u.size() == 2) return try_swish(i, u);
    if (u.size() != 1 || u[0].input < 0) return false;
    size_t j = static_cast<size_t>(u[0].node);
    const ir::Node& c = g_.nodes[j];
    if (is_cpu(c, "Eltwise")) return fuse_eltwise(i, j);
    if (is_cpu(c, "Binary")) return fuse_binary(i, j, static_cast<size_t>(u[0].input));
    if (u[0].input == 0 && is_view(c)) return fuse_eltwise_through_view(i, j);
    return false;
  }

  /// ONNX views that keep the element order: an element-wise function commutes with them.
  static bool is_view(const ir::Node& n) {
    if (!(n.domain.empty() || n.domain == "ai.onnx") || n.outputs.size() != 1) return false;
    return n.op_type == "Reshape" || n.op_type == "Flatten" || n.op_type == "Squeeze" || n.op_type == "Unsqueeze";
  }

  // Producer i -> view j -> Eltwise k (each the only use of the value before
  // it): the activation becomes the producer's post-op and the view moves
  // after it. HF's Conv1D (GPT-2) exports Gemm on a 2-D view -> Reshape back
  // to 3-D -> activation, which would otherwise leave the activation a
  // separate pass over memory (or, under 16K elements, a reference kernel).
  bool fuse_eltwise_through_view(size_t i, size_t j) {
    ir::ValueId w = g_.nodes[j].outputs[0];
    if (w == ir::kNoValue || is_output(g_, w)) return false;
    auto uses = uses_of(g_, m_.values.size());
    if (uses[w].size() != 1 || uses[w][0].input != 0) return false;
    const size_t k = static_cast<size_t>(uses[w][0].node);
    const ir::Node& e = g_.nodes[k];
    if (!is_cpu(e, "Eltwise") || e.outputs.size() != 1) return false;
    ir::Node f = g_.nodes[i];
    auto post = read_post_ops(f);
    if (!append_eltwise(post, static_cast<A>(e.i("alg")), e.f("alpha", 0.f), e.f("beta", 0.f))) return false;
    for (auto& q : read_post_ops(e))  // a second step (HardSigmoid's clip); binary operands have the view's shape
      if (q.kind != PostOp::eltwise || !append_eltwise(post, static_cast<A>(q.alg), q.alpha, q.beta)) return false;
    write_post_ops(f, post);
    if (!primitive_ok(f)) return false;
    // The producer's output now holds activated values: a value of its own, so
    // that nothing (kiln verify, by value name) takes it for the ONNX one.
    const ir::Value& v = m_.value(f.outputs[0]);
    auto dims = static_dims(m_, f.outputs[0]);
    if (!dims) return false;
    ir::ValueId act = add_value(m_, v.name + "/" + e.name, v.dtype, *dims);
    f.outputs[0] = act;
    ir::ValueId y = e.outputs[0];
    g_.nodes[i] = std::move(f);
    g_.nodes[j].inputs[0] = act;
    g_.nodes[j].outputs[0] = y;
    g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(k));
    return true;
  }

  bool commit(size_t i, size_t j, ir::Node f, size_t extra = SIZE_MAX) {
    if (!primitive_ok(f)) return false;
    replace(i, j, std::move(f), extra);
    return true;
  }

  bool fuse_eltwise(size_t i, size_t j) {
    const ir::Node& c = g_.nodes[j];
    ir::Node f = g_.nodes[i];
    auto post = read_post_ops(f);
    if (!append_eltwise(post, static_cast<A>(c.i("alg")), c.f("alpha", 0.f), c.f("beta", 0.f))) return false;
    for (auto& q : read_post_ops(c)) {
      if (q.kind == PostOp::eltwise) {
        if (!append_eltwise(post, static_cast<A>(q.alg), q.alpha, q.beta)) return false;
        continue;
      }
      if (q.kind == PostOp::binary) {
        int64_t idx = static_cast<int64_t>(f.inputs.size());
        f.inputs.push_back(c.inputs[q.input]);
        f.attrs["md.post" + std::to_string(idx)] = c.attrs.at("md.post" + std::to_string(q.input));
        q.input = idx;
      }
      post.push_back(q);
    }
    write_post_ops(f, post);
    f.outputs = c.outputs;
    return commit(i, j, std::move(f));
  }

  bool fuse_binary(size_t i, size_t j, size_t k) {
    const ir::Node& c = g_.nodes[j];
    if (!read_post_ops(c).empty()) return false;
    ir::ValueId w = c.inputs[1 - k];
    auto alg = static_cast<A>(c.i("alg"));
    auto out = static_dims(m_, g_.nodes[i].outputs[0]);
    auto wd = static_dims(m_, w);
    auto cd = static_dims(m_, c.outputs[0]);
    if (!out || !wd || !cd || *cd != *out) return false;
    ir::Node f = g_.nodes[i];
    auto post = read_post_ops(f);
    bool ok = true;
    auto linear = [&](float a, float b) { ok = append_eltwise(post, A::eltwise_linear, a, b) && ok; };
    // Per-channel constant Add on a bias-free Conv / MatMul: the bias.
    if (alg == A::binary_add && post.empty() && (is_cpu(f, "Conv") || is_cpu(f, "MatMul")) && f.inputs.size() == 2 &&
        constant_of(m_, w)) {
      int64_t ch = is_cpu(f, "Conv") ? (*out)[1] : out->back();
      std::vector<int64_t> want(out->size(), 1);
      want[is_cpu(f, "Conv") ? 1 : out->size() - 1] = ch;
      std::vector<int64_t> wp(out->size() - std::min(out->size(), wd->size()), 1);
      wp.insert(wp.end(), wd->begin(), wd->end());
      if (wp == want) {
        f.inputs.push_back(w);
        set_md_attr(f, "md.bias", is_cpu(f, "Conv") ? plain_md({ch}) : plain_md({1, ch}));
        f.outputs = c.outputs;
        return commit(i, j, std::move(f));
      }
    }
    // A scalar constant: a linear post-op.
    if (auto s = scalar_const(m_, w)) {
      if (alg == A::binary_add) linear(1.f, *s);
      else if (alg == A::binary_mul) linear(*s, 0.f);
      else if (alg == A::binary_sub) k == 0 ? linear(1.f, -*s) : linear(-1.f, *s);
      else if (alg == A::binary_div && k == 0 && *s != 0.f) linear(1.f / *s, 0.f);
      else return false;
      if (!ok) return false;
      write_post_ops(f, post);
      f.outputs = c.outputs;
      return commit(i, j, std::move(f));
    }
    if (k == 1 && alg == A::binary_div) return false;
    auto omd = operand_md(*wd, *out, dst_md_of(f).dims());
    if (!omd) return false;
    int64_t idx = static_cast<int64_t>(f.inputs.size());
    f.inputs.push_back(w);
    set_md_attr(f, "md.post" + std::to_string(idx), *omd);
    post.push_back({PostOp::binary, static_cast<int64_t>(alg), 0.f, 0.f, 1.f, idx});
    if (k == 1 && alg == A::binary_sub) linear(-1.f, 0.f);  // w - v = -(v - w)
    if (!ok) return false;
    write_post_ops(f, post);
    f.outputs = c.outputs;
    return commit(i, j, std::move(f));
  }

  // v -> Sigmoid -> s, Mul(v, s): swish.
  bool try_swish(size_t i, const std::vector<Use>& u) {
    ir::ValueId v = g_.nodes[i].outputs[0];
    int e = -1, mul = -1;
    for (auto& x : u) {
      if (x.input < 0) return false;
      const ir::Node& c = g_.nodes[x.node];
      if (is_cpu(c, "Eltwise") && c.i("alg") == static_cast<int64_t>(A::eltwise_logistic) && read_post_ops(c).empty())
        e = x.node;
      else if (is_cpu(c, "Binary") && c.i("alg") == static_cast<int64_t>(A::binary_mul) && read_post_ops(c).empty())
        mul = x.node;
    }
    if (e < 0 || mul < 0) return false;
    ir::ValueId s = g_.nodes[e].outputs[0];
    const ir::Node& mn = g_.nodes[mul];
    bool pair = (mn.inputs[0] == v && mn.inputs[1] == s) || (mn.inputs[0] == s && mn.inputs[1] == v);
    auto uses = uses_of(g_, m_.values.size());
    if (!pair || uses[s].size() != 1 || is_output(g_, s) || mul < e) return false;
    ir::Node f = g_.nodes[i];
    auto post = read_post_ops(f);
    if (!append_eltwise(post, A::eltwise_swish, 1.f, 0.f)) return false;
    write_post_ops(f, post);
    f.outputs = mn.outputs;
    return commit(i, static_cast<size_t>(mul), std::move(f), static_cast<size_t>(e));
  }

  ir::Model& m_;
  ir::Graph& g_;
};

int fuse_graph(ir::Model& m, ir::Graph& g) {
  int n = 0;
  for (auto& node : g.nodes)
    for (auto& [k, a] : node.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) n += fuse_graph(m, **sg);
  return n + Fuser(m, g).run();
}

}  // namespace

int fuse_post_ops(ir::Model& m) { return fuse_graph(m, m.main); }

}  // namespace kiln::targets::cpu

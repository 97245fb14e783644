// LayerNormalization recognition: the decomposed form exporters emit for a
// layer norm over the last axis (torch.onnx before opset 17, tf2onnx, ...),
//   mean = ReduceMean(x, [-1]);  d = x - mean
//   var  = ReduceMean(Pow(d, 2) or d * d, [-1])
//   y    = d / Sqrt(var + eps)  [* gamma]  [+ beta]
// becomes one LayerNormalization (ONNX LayerNormalization-17, axis -1,
// epsilon eps, float32 statistics), which the targets run as one kernel
// (oneDNN's layer normalization on cpu, a row kernel on cuda). The bypassed
// nodes become dead.
#include <fmt/format.h>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

class LayerNormMatcher {
 public:
  LayerNormMatcher(ir::Model& m, ir::Graph& g)
      : m_(m), g_(g), producer_(producer_indices(g, m.values.size())), uses_(use_counts(g, m.values.size())) {}

  int run() {
    int found = 0;
    // From the last node back, so that the longest chain (with gamma and
    // beta) is taken before its Div alone would match.
    std::vector<bool> absorbed(g_.nodes.size(), false);
    for (size_t i = g_.nodes.size(); i-- > 0;) {
      Match mt;
      if (absorbed[i] || !match(g_.nodes[i], mt)) continue;
      bool clash = false;
      for (ir::ValueId v : mt.chain) clash |= absorbed[static_cast<size_t>(producer_[v])];
      if (clash) continue;
      for (ir::ValueId v : mt.chain) absorbed[static_cast<size_t>(producer_[v])] = true;
      ir::Node ln;
      ln.op_type = "LayerNormalization";
      ln.name = g_.nodes[i].name + "/layernorm";
      ln.opset = std::max<int64_t>(g_.nodes[i].opset, 17);
      ln.inputs = {mt.x, mt.gamma != ir::kNoValue ? as_vector(mt.gamma, mt) : ones(mt, g_.nodes[i].name),
                   mt.beta != ir::kNoValue ? as_vector(mt.beta, mt) : ir::kNoValue};
      if (mt.beta == ir::kNoValue) ln.inputs.resize(2);
      ln.outputs = {g_.nodes[i].outputs[0]};
      ln.attrs["axis"] = int64_t{-1};
      ln.attrs["epsilon"] = static_cast<float>(mt.eps);
      g_.nodes[i] = std::move(ln);
      ++found;
    }
    return found;
  }

 private:
  struct Match {
    ir::ValueId x = ir::kNoValue, gamma = ir::kNoValue, beta = ir::kNoValue;
    std::vector<ir::ValueId> chain;  ///< the outputs of every node the match absorbs
    double eps = 0;
    int64_t channels = 0;
    DType dtype = DType::f32;
  };

  /// The producer of `v` when it is ONNX `op` and `v` has exactly `uses` readers.
  const ir::Node* prod(ir::ValueId v, const char* op, int uses = 1) const {
    if (v == ir::kNoValue || producer_[v] < 0 || uses_[v] != uses) return nullptr;
    const ir::Node& n = g_.nodes[static_cast<size_t>(producer_[v])];
    return is_onnx_op(n, op) ? &n : nullptr;
  }
  const ir::Value& val(ir::ValueId v) const { return m_.value(v); }

  /// Whether Reduce node `r` averages over the last axis of its input only,
  /// keeping it (axes input [-1] or [rank-1], keepdims 1).
  bool last_axis_mean(const ir::Node& r) const {
    if (r.i("keepdims", 1) != 1 || r.inputs.size() != 2 || r.inputs[1] == ir::kNoValue) return false;
    const ir::Value& x = val(r.inputs[0]);
    const ir::Value& a = val(r.inputs[1]);
    if (!x.shape || !a.constant || a.constant->numel() != 1 || a.constant->dtype() != DType::i64) return false;
    const int64_t axis = a.constant->data<int64_t>()[0], rank = static_cast<int64_t>(x.shape->size());
    return rank >= 1 && (axis == -1 || axis == rank - 1);
  }

  /// A constant of the input's dtype whose shape is [C] or 1s then C:
  /// one value per normalised element, broadcast like LayerNormalization's.
  bool per_channel(ir::ValueId v, const Match& mt) const {
    const ir::Value& c = val(v);
    if (!c.constant || c.dtype != mt.dtype || !c.shape || !ir::is_static(*c.shape) || c.shape->empty()) return false;
    auto s = ir::to_sizes(*c.shape);
    for (size_t i = 0; i + 1 < s.size(); ++i)
      if (s[i] != 1) return false;
    return s.back() == mt.channels;
  }

  /// The value the Mul or Add `n` reads besides `cur` (kNoValue if it reads `cur` twice or not at all).
  static ir::ValueId other(const ir::Node& n, ir::ValueId cur) {
    if (n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) return ir::kNoValue;
    return n.inputs[0] == cur ? n.inputs[1] : n.inputs[1] == cur ? n.inputs[0] : ir::kNoValue;
  }

  /// Whether `n` ends the pattern; fills `mt`. Walks back from the last node.
  bool match(const ir::Node& last, Match& mt) const {
    if (last.outputs.size() != 1) return false;
    ir::ValueId cur = last.outputs[0];
    const ir::Node* n = &last;
    ir::ValueId beta = ir::kNoValue, gamma = ir::kNoValue;
    // Optional + beta, then optional * gamma (each read once by the next).
    auto step_back = [&](const char* op, ir::ValueId& param) {
      if (!is_onnx_op(*n, op)) return true;  // the optional step is not there
      if (n->inputs.size() != 2) return false;
      // `param` is the constant operand, the other one the rest of the chain.
      const ir::ValueId a = n->inputs[0], b = n->inputs[1];
      const ir::ValueId chain = val(a).constant ? b : a;
      param = val(a).constant ? a : val(b).constant ? b : ir::kNoValue;
      if (param == ir::kNoValue || chain == ir::kNoValue || producer_[chain] < 0 || uses_[chain] != 1) return false;
      cur = chain;
      n = &g_.nodes[static_cast<size_t>(producer_[chain])];
      return true;
    };
    if (!step_back("Add", beta)) return false;
    if (!step_back("Mul", gamma)) return false;
    // d / Sqrt(var + eps)
    if (!is_onnx_op(*n, "Div") || n->inputs.size() != 2) return false;
    const ir::ValueId d = n->inputs[0];
    const ir::Node* sq = prod(n->inputs[1], "Sqrt");
    if (!sq) return false;
    const ir::Node* add = prod(sq->inputs[0], "Add");
    if (!add || add->inputs.size() != 2) return false;
    double eps = 0;
    ir::ValueId var = scalar_constant(m_, add->inputs[1], eps) ? add->inputs[0]
                      : scalar_constant(m_, add->inputs[0], eps) ? add->inputs[1]
                                                                 : ir::kNoValue;
    if (var == ir::kNoValue || eps < 0) return false;
    const ir::Node* rv = prod(var, "ReduceMean");
    if (!rv || !last_axis_mean(*rv)) return false;
    // (d)^2 as Pow(d, 2) or Mul(d, d)
    const ir::ValueId s2 = rv->inputs[0];
    ir::ValueId sq_of = ir::kNoValue;
    if (const ir::Node* pw = prod(s2, "Pow"); pw && pw->inputs.size() == 2) {
      double e = 0;
      if (scalar_constant(m_, pw->inputs[1], e) && e == 2.0) sq_of = pw->inputs[0];
    } else if (const ir::Node* mu = prod(s2, "Mul"); mu && mu->inputs.size() == 2 && mu->inputs[0] == mu->inputs[1]) {
      sq_of = mu->inputs[0];
    }
    if (sq_of != d) return false;
    // d = x - ReduceMean(x): read by the square and the Div (Mul(d, d) reads it twice).
    const int d_uses = is_onnx_op(g_.nodes[static_cast<size_t>(producer_[s2])], "Mul") ? 3 : 2;
    const ir::Node* sub = prod(d, "Sub", d_uses);
    if (!sub || sub->inputs.size() != 2) return false;
    const ir::ValueId x = sub->inputs[0];
    const ir::Node* rm = prod(sub->inputs[1], "ReduceMean");
    if (!rm || rm->inputs[0] != x || !last_axis_mean(*rm)) return false;
    const ir::Value& xv = val(x);
    if (!xv.shape || xv.shape->empty() || !xv.shape->back().is_static()) return false;
    // float32 only: the cpu target's layer norm (oneDNN, and the reference
    // kernel it falls back to) takes float32 x, and a 16-bit chain's eps
    // would not be read by scalar_constant anyway.
    if (xv.dtype != DType::f32) return false;
    // The output keeps x's shape (no broadcasting by gamma or beta).
    const ir::Value& yv = val(last.outputs[0]);
    if (!yv.shape || *yv.shape != *xv.shape) return false;
    mt.x = x;
    mt.eps = eps;
    mt.chain = {last.outputs[0], d, s2, var, add->outputs[0], sq->outputs[0], sub->inputs[1], n->outputs[0]};
    if (gamma != ir::kNoValue || beta != ir::kNoValue) {  // the Mul / Add between the Div and the last node
      for (ir::ValueId v = last.outputs[0]; v != n->outputs[0];) {
        mt.chain.push_back(v);
        const ir::Node& p = g_.nodes[static_cast<size_t>(producer_[v])];
        v = val(p.inputs[0]).constant ? p.inputs[1] : p.inputs[0];
      }
    }
    mt.dtype = xv.dtype;
    mt.channels = xv.shape->back().value;
    if (gamma != ir::kNoValue && !per_channel(gamma, mt)) return false;
    if (beta != ir::kNoValue && !per_channel(beta, mt)) return false;
    mt.gamma = gamma;
    mt.beta = beta;
    return true;
  }

  /// `v` (a constant of shape 1s then C) as a [C] constant: LayerNormalization's
  /// reference kernel wants Scale and B of the normalised shape itself.
  ir::ValueId as_vector(ir::ValueId v, const Match& mt) {
    if (val(v).shape->size() == 1) return v;
    ir::Value c = val(v);
    c.name += "_as_vector";
    c.constant = val(v).constant->reshaped({mt.channels});
    c.shape = ir::Shape{ir::Dim{mt.channels, ""}};
    return m_.add_value(std::move(c));
  }

  /// A float32 constant [C] of ones, the Scale a pattern without gamma needs.
  ir::ValueId ones(const Match& mt, const std::string& node) {
    Tensor t(DType::f32, {mt.channels});
    for (int64_t i = 0; i < mt.channels; ++i) t.data<float>()[i] = 1.f;
    ir::Value v;
    v.name = fmt::format("{}_{}_layernorm_ones", val(mt.x).name, node);
    v.dtype = DType::f32;
    v.shape = ir::Shape{ir::Dim{mt.channels, ""}};
    v.constant = std::move(t);
    return m_.add_value(std::move(v));
  }

  ir::Model& m_;
  ir::Graph& g_;
  std::vector<int> producer_;
  std::vector<int> uses_;
};

}  // namespace

int recognize_layernorm(ir::Model& m) {
  return sum_over_graphs(m.main, [&](ir::Graph& g) { return LayerNormMatcher(m, g).run(); });
}

}  // namespace kiln::passes

// Attention recognition: the scaled dot-product attention block
//   scores = MatMul(Q, K^T)  [* or / scalar]  [+ mask]
//   y      = MatMul(Softmax(scores, last axis), V)
// in either form exporters write it:
//   - eager (transformers' BertSelfAttention, ...): the scale is applied to
//     the scores, (Q K^T) / sqrt(d);
//   - torch.onnx's scaled_dot_product_attention: each operand is scaled by
//     the square root of the scale before the product, Q * sqrt(s) and
//     K^T * sqrt(s) (it keeps float16 products in range).
// The second form is rewritten into the first: the two scalar Muls (through
// any Transpose / Reshape between them and the MatMul, which commute with a
// scalar) are bypassed and their product becomes one scaling of the scores,
// merged into the scores' own scalar Mul / Div when there is one. On the cpu
// target that one scaling, the mask Add, and the head Transposes / Reshapes
// then fold into the Q K^T matmul primitive (output scale, binary post-op,
// strides: fuse_post_ops, fold_matmul_views), so an attention block runs as
// two oneDNN matmuls and a softmax with no element-wise pass over Q or K.
// Float32 only: the scale's rounding moves from the operands to the scores,
// which changes results by float32 rounding, not more.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

class AttentionMatcher {
 public:
  AttentionMatcher(ir::Model& m, ir::Graph& g, AttentionStats& st)
      : m_(m), g_(g), st_(st), producer_(producer_indices(g, m.values.size())), uses_(use_counts(g, m.values.size())) {}

  int run() {
    std::vector<Insert> inserts;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!is_onnx_op(g_.nodes[i], "Softmax")) continue;
      auto block = match(i);
      if (!block) continue;
      ++st_.blocks;
      if (block->q_scale.node >= 0 || block->k_scale.node >= 0) rewrite(*block, inserts);
    }
    apply(inserts);
    return static_cast<int>(inserts.size());
  }

 private:
  /// A scalar Mul / Div on the way from a Q or K value to the scores MatMul.
  struct Scale {
    int node = -1;              ///< the Mul / Div, -1: none
    ir::ValueId unscaled = ir::kNoValue;  ///< what it scales
    double factor = 1;          ///< its effect as a multiplier
  };
  struct Block {
    int scores = -1;            ///< MatMul(Q, K^T)
    int scaling = -1;           ///< the scores' own Mul / Div by a scalar, -1: none
    double scaling_factor = 1;
    Scale q_scale, k_scale;
  };
  /// A Mul to place right after node `after`: reads `in`, writes `out`.
  struct Insert {
    int after;
    ir::Node node;
  };

  const ir::Value& val(ir::ValueId v) const { return m_.value(v); }
  // Values added by a rewrite (past the tables) are never matched again.
  int producer(ir::ValueId v) const {
    return v == ir::kNoValue || static_cast<size_t>(v) >= producer_.size() ? -1 : producer_[v];
  }
  bool single_use(ir::ValueId v) const {
    return v != ir::kNoValue && static_cast<size_t>(v) < uses_.size() && uses_[v] == 1;
  }

  /// Whether constant c (when it is one) has no more dims than x.
  bool keeps_rank(ir::ValueId c, ir::ValueId x) const {
    if (c == ir::kNoValue || !val(c).constant || val(c).constant->shape().empty()) return true;
    return x != ir::kNoValue && val(x).shape && val(c).constant->shape().size() <= val(x).shape->size();
  }

  /// For node n = Mul(x, c) / Mul(c, x) / Div(x, c) with c a one-element
  /// constant: x's index among n's inputs and the multiplier c (or 1/c).
  /// (A one-element c of higher rank than x broadcasts x to more dims: not a scalar.)
  std::optional<std::pair<int, double>> scalar_scaling(const ir::Node& n) const {
    if (n.inputs.size() != 2 || !(is_onnx_op(n, "Mul") || is_onnx_op(n, "Div"))) return std::nullopt;
    if (!keeps_rank(n.inputs[0], n.inputs[1]) || !keeps_rank(n.inputs[1], n.inputs[0])) return std::nullopt;
    double c = 0;
    if (scalar_constant(m_, n.inputs[1], c)) {
      if (is_onnx_op(n, "Div")) return c == 0 ? std::nullopt : std::optional<std::pair<int, double>>({0, 1 / c});
      return std::pair<int, double>{0, c};
    }
    if (is_onnx_op(n, "Mul") && scalar_constant(m_, n.inputs[0], c)) return std::pair<int, double>{1, c};
    return std::nullopt;
  }

  /// The scalar scaling of `v` (read once), looking through single-use
  /// Transpose / Reshape nodes, which commute with a scalar.
  Scale scale_of(ir::ValueId v) const {
    Scale s;
    for (int hops = 0; hops < 4 && single_use(v); ++hops) {
      int p = producer(v);
      if (p < 0) break;
      const ir::Node& n = g_.nodes[static_cast<size_t>(p)];
      if (auto sc = scalar_scaling(n)) {
        if (!single_use(n.outputs[0])) break;
        s.node = p;
        s.unscaled = n.inputs[static_cast<size_t>(sc->first)];
        s.factor = sc->second;
        break;
      }
      if (!(is_onnx_op(n, "Transpose") || is_onnx_op(n, "Reshape")) || n.inputs.empty()) break;
      v = n.inputs[0];
    }
    return s;
  }

  /// Whether Softmax node sm normalises over its input's last axis.
  bool last_axis(const ir::Node& sm) const {
    const ir::Value& x = val(sm.inputs[0]);
    if (!x.shape) return false;
    const int64_t rank = static_cast<int64_t>(x.shape->size());
    // Before opset 13 Softmax flattens from `axis` (default 1) on: the same
    // only when that is the last axis.
    const int64_t axis = sm.i("axis", sm.opset >= 13 ? -1 : 1);
    return rank >= 2 && (axis == -1 || axis == rank - 1);
  }

  std::optional<Block> match(size_t sm_index) const {
    const ir::Node& sm = g_.nodes[sm_index];
    if (sm.inputs.size() != 1 || sm.outputs.size() != 1 || !last_axis(sm)) return std::nullopt;
    if (val(sm.inputs[0]).dtype != DType::f32) return std::nullopt;
    // Softmax output read by the MatMul with V (as its left operand) only.
    const ir::ValueId probs = sm.outputs[0];
    if (!single_use(probs)) return std::nullopt;
    bool feeds_matmul = false;
    for (auto& n : g_.nodes)
      if (is_onnx_op(n, "MatMul") && n.inputs.size() == 2 && n.inputs[0] == probs) feeds_matmul = true;
    if (!feeds_matmul) return std::nullopt;
    // Back from the Softmax: [+ mask], [scalar scaling], MatMul(Q, K^T).
    Block b;
    ir::ValueId cur = sm.inputs[0];
    auto step = [&](ir::ValueId v) { return single_use(v) ? producer(v) : -1; };
    int p = step(cur);
    if (p >= 0 && is_onnx_op(g_.nodes[static_cast<size_t>(p)], "Add")) {
      const ir::Node& add = g_.nodes[static_cast<size_t>(p)];
      if (add.inputs.size() != 2) return std::nullopt;
      // The mask is the operand that is not the scores chain: the chain is
      // the MatMul, or a scalar scaling of it.
      int a = step(add.inputs[0]), c = step(add.inputs[1]);
      auto chain_like = [&](int q) {
        if (q < 0) return false;
        const ir::Node& n = g_.nodes[static_cast<size_t>(q)];
        if (is_onnx_op(n, "MatMul")) return true;
        auto sc = scalar_scaling(n);
        int r = sc ? step(n.inputs[static_cast<size_t>(sc->first)]) : -1;
        return r >= 0 && is_onnx_op(g_.nodes[static_cast<size_t>(r)], "MatMul");
      };
      cur = chain_like(a) ? add.inputs[0] : chain_like(c) ? add.inputs[1] : ir::kNoValue;
      if (cur == ir::kNoValue) return std::nullopt;
      p = step(cur);
    }
    if (p >= 0) {
      const ir::Node& n = g_.nodes[static_cast<size_t>(p)];
      if (auto sc = scalar_scaling(n)) {
        b.scaling = p;
        b.scaling_factor = sc->second;
        p = step(n.inputs[static_cast<size_t>(sc->first)]);
      }
    }
    if (p < 0 || !is_onnx_op(g_.nodes[static_cast<size_t>(p)], "MatMul")) return std::nullopt;
    const ir::Node& mm = g_.nodes[static_cast<size_t>(p)];
    if (mm.inputs.size() != 2 || mm.inputs[0] == mm.inputs[1]) return std::nullopt;
    b.scores = p;
    b.q_scale = scale_of(mm.inputs[0]);
    b.k_scale = scale_of(mm.inputs[1]);
    return b;
  }

  ir::ValueId scalar(double x, const std::string& name) {
    Tensor t(DType::f32, {});
    t.data<float>()[0] = static_cast<float>(x);
    ir::Value v;
    v.name = name;
    v.dtype = DType::f32;
    v.shape = ir::Shape{};
    v.constant = std::move(t);
    return m_.add_value(std::move(v));
  }

  /// Bypasses the Q / K scalings and moves their product onto the scores.
  void rewrite(const Block& b, std::vector<Insert>& inserts) {
    double f = 1;
    for (const Scale* s : {&b.q_scale, &b.k_scale})
      if (s->node >= 0) f *= s->factor;
    // The multiplier must be a float32 (a product of two in-range scales may
    // not be: 1e20 * 1e20 would become inf, 1e-25 * 1e-25 zero).
    auto representable = [](double x) {
      const float y = static_cast<float>(x);
      return std::isfinite(y) && (x == 0 || std::fabs(y) >= std::numeric_limits<float>::min());
    };
    if (!representable(f) || (b.scaling >= 0 && !representable(b.scaling_factor * f))) return;
    for (const Scale* s : {&b.q_scale, &b.k_scale}) {
      if (s->node < 0) continue;
      ir::Node& n = g_.nodes[static_cast<size_t>(s->node)];
      // Its single reader (the MatMul, a Transpose or a Reshape) reads the unscaled value.
      replace_uses(g_, n.outputs[0], s->unscaled);
    }
    ir::Node& mm = g_.nodes[static_cast<size_t>(b.scores)];
    const std::string base = mm.name.empty() ? fmt::format("attention{}", b.scores) : mm.name;
    if (b.scaling >= 0) {
      // Merge into the scores' own scaling: one multiplier (a Div's divisor shrinks).
      ir::Node& sc = g_.nodes[static_cast<size_t>(b.scaling)];
      auto pos = scalar_scaling(sc);
      const double total = b.scaling_factor * f;
      sc.op_type = "Mul";
      sc.inputs = {sc.inputs[static_cast<size_t>(pos->first)], scalar(total, base + "/attention_scale")};
      inserts.push_back({-1, {}});  // counted, nothing to insert
      return;
    }
    // A new Mul between the MatMul and its reader.
    ir::Value raw = val(mm.outputs[0]);
    raw.name += "/unscaled";
    const ir::ValueId scores = mm.outputs[0];
    const ir::ValueId unscaled = m_.add_value(std::move(raw));
    mm.outputs[0] = unscaled;
    ir::Node mul;
    mul.op_type = "Mul";
    mul.name = base + "/attention_scale";
    mul.opset = mm.opset;
    mul.inputs = {unscaled, scalar(f, base + "/attention_scale_value")};
    mul.outputs = {scores};
    inserts.push_back({b.scores, std::move(mul)});
  }

  void apply(std::vector<Insert>& inserts) {
    std::vector<std::vector<ir::Node>> after(g_.nodes.size());
    bool any = false;
    for (auto& ins : inserts)
      if (ins.after >= 0) {
        after[static_cast<size_t>(ins.after)].push_back(std::move(ins.node));
        any = true;
      }
    if (!any) return;
    std::vector<ir::Node> nodes;
    nodes.reserve(g_.nodes.size() + inserts.size());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      nodes.push_back(std::move(g_.nodes[i]));
      for (auto& n : after[i]) nodes.push_back(std::move(n));
    }
    g_.nodes = std::move(nodes);
  }

  ir::Model& m_;
  ir::Graph& g_;
  AttentionStats& st_;
  std::vector<int> producer_;
  std::vector<int> uses_;
};

}  // namespace

AttentionStats recognize_attention(ir::Model& m) {
  AttentionStats st;
  st.rewritten = sum_over_graphs(m.main, [&](ir::Graph& g) { return AttentionMatcher(m, g, st).run(); });
  return st;
}

}  // namespace kiln::passes

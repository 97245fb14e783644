// Gelu recognition: the forms exporters emit for Gelu,
//   0.5 * x * (1 + Erf(x / sqrt(2)))   (any association of the three products,
//   x / sqrt(2) also as x * (1/sqrt(2))),
// and the tanh approximation (HF's gelu_new / NewGELU: GPT-2, ALBERT, ...),
//   0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)))),
// become one Gelu node (ONNX Gelu-20, approximate "none" or "tanh"), which
// targets can run as one kernel or fuse. The bypassed nodes become dead.
#include <cmath>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

bool near(double a, double b) { return std::fabs(a - b) <= 1e-4 * std::fabs(b); }

class GeluMatcher {
 public:
  GeluMatcher(ir::Model& m, ir::Graph& g)
      : m_(m), g_(g), producer_(producer_indices(g, m.values.size())), uses_(use_counts(g, m.values.size())) {}

  int run() {
    int found = 0;
    for (auto& n : g_.nodes) {
      ir::ValueId x = match(n);
      if (x == ir::kNoValue) continue;
      ir::Node gelu;
      gelu.op_type = "Gelu";
      gelu.name = n.name + "/gelu";
      gelu.opset = n.opset;
      gelu.inputs = {x};
      gelu.outputs = {n.outputs[0]};
      gelu.attrs["approximate"] = std::string(tanh_ ? "tanh" : "none");
      n = std::move(gelu);
      ++found;
    }
    return found;
  }

 private:
  const ir::Node* prod(ir::ValueId v, const char* op, bool single_use = true) const {
    if (v == ir::kNoValue || producer_[v] < 0) return nullptr;
    if (single_use && uses_[v] != 1) return nullptr;
    const ir::Node& n = g_.nodes[static_cast<size_t>(producer_[v])];
    return is_onnx_op(n, op) ? &n : nullptr;
  }
  bool is_const(ir::ValueId v, double want) const {
    double c;
    return scalar_constant(m_, v, c) && near(c, want);
  }
  /// x when v = 1 + Erf(x / sqrt 2) or 1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3))
  /// (tanh_ says which), else kNoValue.
  ir::ValueId one_plus_erf(ir::ValueId v) const {
    const ir::Node* add = prod(v, "Add");
    if (!add || add->inputs.size() != 2) return ir::kNoValue;
    ir::ValueId e = is_const(add->inputs[0], 1.0) ? add->inputs[1] : is_const(add->inputs[1], 1.0) ? add->inputs[0] : ir::kNoValue;
    tanh_ = false;
    if (const ir::Node* th = prod(e, "Tanh")) {
      tanh_ = true;
      return tanh_argument(th->inputs[0]);
    }
    const ir::Node* erf = prod(e, "Erf");
    if (!erf) return ir::kNoValue;
    ir::ValueId d = erf->inputs[0];
    if (const ir::Node* div = prod(d, "Div"); div && is_const(div->inputs[1], std::sqrt(2.0))) return div->inputs[0];
    if (const ir::Node* mul = prod(d, "Mul")) {
      if (is_const(mul->inputs[1], 1.0 / std::sqrt(2.0))) return mul->inputs[0];
      if (is_const(mul->inputs[0], 1.0 / std::sqrt(2.0))) return mul->inputs[1];
    }
    return ir::kNoValue;
  }
  /// x when v = sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)) (either operand
  /// order of each Mul and Add), else kNoValue.
  ir::ValueId tanh_argument(ir::ValueId v) const {
    const ir::Node* scale = prod(v, "Mul");
    if (!scale) return ir::kNoValue;
    const ir::ValueId inner = times_const(*scale, std::sqrt(2.0 / 3.14159265358979323846));
    const ir::Node* add = prod(inner, "Add");
    if (!add || add->inputs.size() != 2) return ir::kNoValue;
    for (int s = 0; s < 2; ++s) {
      const ir::ValueId x = add->inputs[s];
      const ir::Node* cubic = prod(add->inputs[1 - s], "Mul");
      if (!cubic) continue;
      const ir::Node* pow = prod(times_const(*cubic, 0.044715), "Pow");
      if (pow && pow->inputs.size() == 2 && pow->inputs[0] == x && is_const(pow->inputs[1], 3.0)) return x;
    }
    return ir::kNoValue;
  }
  /// The Mul's operand other than the constant c (kNoValue if neither is c).
  ir::ValueId times_const(const ir::Node& mul, double c) const {
    if (is_const(mul.inputs[1], c)) return mul.inputs[0];
    if (is_const(mul.inputs[0], c)) return mul.inputs[1];
    return ir::kNoValue;
  }

  /// The Gelu input when n is the last node of the pattern.
  ir::ValueId match(const ir::Node& n) const {
    if (!is_onnx_op(n, "Mul") || n.inputs.size() != 2 || n.outputs.size() != 1) return ir::kNoValue;
    ir::ValueId a = n.inputs[0], b = n.inputs[1];
    // (x * (1+erf)) * 0.5
    if (ir::ValueId inner = times_const(n, 0.5); inner != ir::kNoValue) {
      if (const ir::Node* m = prod(inner, "Mul"))
        for (int s = 0; s < 2; ++s) {
          ir::ValueId x = m->inputs[s], o = m->inputs[1 - s];
          if (one_plus_erf(o) == x) return x;
        }
      return ir::kNoValue;
    }
    for (int s = 0; s < 2; ++s) {
      ir::ValueId p = s ? b : a, q = s ? a : b;
      // (x * 0.5) * (1+erf)  or  x * ((1+erf) * 0.5)
      if (const ir::Node* m = prod(p, "Mul")) {
        ir::ValueId x = times_const(*m, 0.5);
        if (x != ir::kNoValue && one_plus_erf(q) == x) return x;
        ir::ValueId o = times_const(*m, 0.5);
        if (o != ir::kNoValue && one_plus_erf(o) == q) return q;
      }
    }
    return ir::kNoValue;
  }

  ir::Model& m_;
  ir::Graph& g_;
  std::vector<int> producer_;
  std::vector<int> uses_;
  mutable bool tanh_ = false;  ///< the last one_plus_erf matched the tanh form
};

}  // namespace

int recognize_gelu(ir::Model& m) {
  return sum_over_graphs(m.main, [&](ir::Graph& g) { return GeluMatcher(m, g).run(); });
}

}  // namespace kiln::passes

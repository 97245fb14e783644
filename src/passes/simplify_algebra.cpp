// Algebraic simplification: nodes that do nothing are bypassed (Identity,
// inference-mode Dropout, Cast to the same type, Reshape / Squeeze /
// Unsqueeze / Flatten to the same shape, identity Transpose, Pad by zero,
// x+0, x-0, x*1, x/1 with a constant that does not broadcast x), and chains of
// Transposes or of Reshapes are merged into one node.
#include <algorithm>

#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

bool same_type(const ir::Model& m, ir::ValueId a, ir::ValueId b) {
  const ir::Value &x = m.value(a), &y = m.value(b);
  return x.dtype == y.dtype && x.dtype != DType::undefined && x.shape && y.shape && ir::is_static(*x.shape) &&
         ir::is_static(*y.shape) && ir::to_sizes(*x.shape) == ir::to_sizes(*y.shape);
}

/// True when every element of constant v equals `value`.
bool all_equal(const ir::Model& m, ir::ValueId v, double value) {
  if (v == ir::kNoValue || !m.value(v).constant) return false;
  const Tensor& t = *m.value(v).constant;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x;
    switch (t.dtype()) {
      case DType::f32: x = t.data<float>()[i]; break;
      case DType::f64: x = t.data<double>()[i]; break;
      case DType::i64: x = static_cast<double>(t.data<int64_t>()[i]); break;
      case DType::i32: x = t.data<int32_t>()[i]; break;
      default: return false;
    }
    if (x != value) return false;
  }
  return true;
}

/// The input a no-op node passes through, or kNoValue.
ir::ValueId passthrough(const ir::Model& m, const ir::Node& n) {
  if (n.inputs.empty() || n.inputs[0] == ir::kNoValue || n.outputs.empty()) return ir::kNoValue;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != ir::kNoValue) return ir::kNoValue;
  ir::ValueId x = n.inputs[0], y = n.outputs[0];
  if (is_onnx_op(n, "Identity")) return x;
  if (is_onnx_op(n, "Dropout")) {
    if (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue && !all_equal(m, n.inputs[2], 0)) return ir::kNoValue;
    return x;
  }
  if (!same_type(m, x, y)) return ir::kNoValue;
  if (is_onnx_op(n, "Cast") || is_onnx_op(n, "Reshape") || is_onnx_op(n, "Squeeze") || is_onnx_op(n, "Unsqueeze") || is_onnx_op(n, "Flatten"))
    return x;
  if (is_onnx_op(n, "Transpose")) {
    auto perm = n.ints("perm");
    for (size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != static_cast<int64_t>(i)) return ir::kNoValue;
    return perm.empty() && m.value(x).shape->size() > 1 ? ir::kNoValue : x;
  }
  if (is_onnx_op(n, "Pad") && n.inputs.size() > 1 && all_equal(m, n.inputs[1], 0) && n.s("mode", "constant") == "constant")
    return x;
  if (n.inputs.size() == 2) {
    ir::ValueId a = n.inputs[0], b = n.inputs[1];
    if ((is_onnx_op(n, "Add") || is_onnx_op(n, "Sub")) && all_equal(m, b, 0)) return a;
    if (is_onnx_op(n, "Add") && all_equal(m, a, 0) && same_type(m, b, y)) return b;
    if ((is_onnx_op(n, "Mul") || is_onnx_op(n, "Div")) && all_equal(m, b, 1)) return a;
    if (is_onnx_op(n, "Mul") && all_equal(m, a, 1) && same_type(m, b, y)) return b;
  }
  return ir::kNoValue;
}

class Simplifier {
 public:
  Simplifier(ir::Model& m, ir::Graph& g) : m_(m), g_(g) {}

  int run() {
    int changed = 0;
    for (auto& n : g_.nodes)
      for (auto& [k, a] : n.attrs)
        if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) changed += Simplifier(m_, **sg).run();
    // Bypass the no-op nodes.
    std::vector<char> drop(g_.nodes.size(), 0);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const ir::Node& n = g_.nodes[i];
      ir::ValueId x = passthrough(m_, n);
      if (x != ir::kNoValue && !is_graph_output(n.outputs[0])) {
        replace_uses(g_, n.outputs[0], x);
        drop[i] = 1;
        ++changed;
      }
    }
    std::vector<ir::Node> kept;
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(g_.nodes[i]));
    g_.nodes = std::move(kept);
    // Merge Transpose and Reshape chains (the inner node becomes dead).
    auto uses = use_counts(g_, m_.values.size());
    std::vector<int> producer(m_.values.size(), -1);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      ir::Node& n = g_.nodes[i];
      if (merge_chain(n, producer, uses)) ++changed;
      for (auto id : n.outputs)
        if (id != ir::kNoValue) producer[id] = static_cast<int>(i);
    }
    return changed;
  }

 private:
  bool is_graph_output(ir::ValueId v) const {
    return std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end();
  }

  /// Transpose(Transpose(x)) and Reshape(Reshape(x)) read x directly when the
  /// inner node has no other reader.
  bool merge_chain(ir::Node& n, const std::vector<int>& producer, std::vector<int>& uses) {
    bool tr = is_onnx_op(n, "Transpose"), rs = is_onnx_op(n, "Reshape");
    if (!(tr || rs) || n.inputs.empty() || n.inputs[0] == ir::kNoValue) return false;
    ir::ValueId mid = n.inputs[0];
    if (producer[mid] < 0 || uses[mid] != 1 || is_graph_output(mid)) return false;
    const ir::Node& inner = g_.nodes[static_cast<size_t>(producer[mid])];
    if (!is_onnx_op(inner, n.op_type.c_str()) || inner.inputs.empty()) return false;
    if (tr) {
      auto in = inner.ints("perm"), out = n.ints("perm");
      if (in.empty() || out.size() != in.size()) return false;
      std::vector<int64_t> perm(out.size());
      for (size_t k = 0; k < out.size(); ++k) perm[k] = in[static_cast<size_t>(out[k])];
      n.attrs["perm"] = perm;
    } else {
      // The outer target must be fully known (no 0 / -1 relative to mid).
      const ir::Value& y = m_.value(n.outputs[0]);
      if (!y.shape || !ir::is_static(*y.shape)) return false;
      auto dims = ir::to_sizes(*y.shape);
      ir::Value shape;
      shape.name = y.name + "/shape";
      shape.dtype = DType::i64;
      shape.shape = ir::static_shape({static_cast<int64_t>(dims.size())});
      Tensor t(DType::i64, {static_cast<int64_t>(dims.size())});
      std::copy(dims.begin(), dims.end(), t.data<int64_t>());
      shape.constant = t;
      ir::ValueId sid = m_.add_value(std::move(shape));
      uses.push_back(1);
      n.inputs[1] = sid;
      n.attrs.erase("allowzero");
    }
    n.inputs[0] = inner.inputs[0];
    --uses[mid];
    ++uses[inner.inputs[0]];
    return true;
  }

  ir::Model& m_;
  ir::Graph& g_;
};

}  // namespace

int simplify_algebra(ir::Model& m) { return Simplifier(m, m.main).run(); }

}  // namespace kiln::passes

// Discrete selection in the precision check (precision_selection.h).
#include "runtime/precision_selection.h"

#include <set>

namespace kiln {

namespace {

/// Ops whose (integer) outputs are indices chosen from their input's values.
const std::set<std::string> kIndexOps = {"TopK", "ArgMax", "ArgMin", "NonMaxSuppression", "NonZero"};

/// Ops that use every input as element-wise data: a discrete tainted value
/// there (a mask, a comparison's result) changes the elements whose
/// comparison flipped, not which elements are computed.
const std::set<std::string> kDiscreteDataAll = {
    "Add",   "Sub",     "Mul",     "Div",      "Mod",      "Neg",        "Abs",        "Sign",          "Min",
    "Max",   "Sum",     "Mean",    "Clip",     "Equal",    "Greater",    "Less",       "GreaterOrEqual", "LessOrEqual",
    "Not",   "And",     "Or",      "Xor",      "Where",    "Cast",       "CastLike",   "Identity",      "BitShift",
    "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "IsNaN", "IsInf", "Relu", "Floor", "Ceil",
    "Round", "Concat", "Dropout"};

/// Ops whose first input is data they move or reduce (a discrete value
/// there stays element-wise data); their other inputs are shapes, indices,
/// axes or counts.
const std::set<std::string> kDiscreteDataFirst = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand",    "Tile",      "Slice",
    "Gather",  "GatherElements", "GatherND", "Pad", "Split", "ReduceSum", "ReduceMax", "ReduceMin",
    "ReduceMean", "ReduceProd", "CumSum"};

/// Whether a discrete tainted value read as input `i` of `n` is element-wise
/// data (else the node selects by it).
bool discrete_data(const ir::Node& n, size_t i) {
  if (!n.domain.empty()) return false;
  if (kDiscreteDataAll.count(n.op_type)) return true;
  return kDiscreteDataFirst.count(n.op_type) && i == 0;
}

bool is_control_flow(const ir::Node& n) {
  return n.domain.empty() && (n.op_type == "If" || n.op_type == "Loop" || n.op_type == "Scan");
}

/// The check's name of a node (targets::cuda::precision_node_key, which the
/// runtime library cannot call without the cuda target): its ONNX name, else
/// its first output's name.
std::string node_key(const ir::Model& m, const ir::Node& n) {
  if (!n.name.empty()) return n.name;
  for (auto v : n.outputs)
    if (v != ir::kNoValue) return m.value(v).name;
  return "";
}

/// Calls f(v) for every value the bodies of `n` read (nested bodies included).
template <class F>
void body_reads(const ir::Node& n, F&& f) {
  for (auto& [k, a] : n.attrs)
    if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
      ir::for_each_graph(**sg, [&](ir::Graph& g) {
        for (auto& inner : g.nodes)
          for (auto v : inner.inputs)
            if (v != ir::kNoValue) f(v);
        for (auto v : g.outputs)
          if (v != ir::kNoValue) f(v);
      });
}

class Analyser {
 public:
  explicit Analyser(const ir::Model& m)
      : m_(m), tainted_(m.values.size(), false), dep_(m.values.size(), false), producer_(m.values.size(), -1),
        main_value_(m.values.size(), false) {
    // Every float value may differ (a float32 constant read by a 16-bit
    // node is read rounded); integers only when computed from floats.
    for (size_t v = 0; v < m.values.size(); ++v) tainted_[v] = dtype_is_float(m.values[v].dtype);
    for (auto v : m.main.inputs) main_value_[v] = true;
    for (size_t i = 0; i < m.main.nodes.size(); ++i)
      for (auto v : m.main.nodes[i].outputs)
        if (v != ir::kNoValue) {
          producer_[v] = static_cast<int>(i);
          main_value_[v] = true;
        }
  }

  SelectionAnalysis run() {
    bool inner = false;
    graph(m_.main, true, inner);
    r_.dependent = dep_;
    for (auto& n : m_.main.nodes)
      for (auto v : n.outputs)
        if (v != ir::kNoValue && dep_[v] && dtype_is_float(m_.value(v).dtype)) ++r_.dependent_floats;
    return std::move(r_);
  }

 private:
  bool is_float(ir::ValueId v) const { return dtype_is_float(m_.value(v).dtype); }

  void graph(const ir::Graph& g, bool main, bool& selects) {
    for (const ir::Node& n : g.nodes) {
      if (is_control_flow(n)) control_flow(n, main, selects);
      else node(n, main, selects);
    }
  }

  void mark(const ir::Node& n, bool taint, bool dep, bool integers_only = false) {
    for (auto v : n.outputs) {
      if (v == ir::kNoValue) continue;
      tainted_[v] = tainted_[v] || taint || dep;
      if (dep && !(integers_only && is_float(v))) dep_[v] = true;
    }
  }

  void node(const ir::Node& n, bool main, bool& selects) {
    bool any_dep = false, any_taint = false;
    for (auto v : n.inputs)
      if (v != ir::kNoValue) any_dep |= dep_[v], any_taint |= tainted_[v];
    if (any_dep) return mark(n, true, true);
    // Shapes are static in the check: the same in both runs.
    if (n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size")) return;
    if (!any_taint) return;
    mark(n, true, false);
    std::vector<ir::ValueId> decide;
    bool integers_only = false;
    if (n.domain.empty() && kIndexOps.count(n.op_type)) {
      integers_only = true;  // TopK's values are a continuous function of its input
      for (auto v : n.inputs)
        if (v != ir::kNoValue && tainted_[v]) decide.push_back(v);
    } else if (n.domain.empty() && n.op_type == "Cast" && n.inputs.size() == 1 && is_float(n.inputs[0]) &&
               n.outputs.size() == 1 && !is_float(n.outputs[0]) && m_.value(n.outputs[0]).dtype != DType::boolean) {
      decide.push_back(n.inputs[0]);  // a float truncated to an integer
    } else {
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const ir::ValueId v = n.inputs[i];
        if (v != ir::kNoValue && tainted_[v] && !is_float(v) && !discrete_data(n, i)) decide.push_back(v);
      }
    }
    if (decide.empty()) return;
    mark(n, true, true, integers_only);
    select(n, main, selects, decide);
  }

  /// Records `n` as a selecting node deciding by `decide` (or, in a body,
  /// tells the enclosing control-flow node).
  void select(const ir::Node& n, bool main, bool& selects, const std::vector<ir::ValueId>& decide) {
    if (!main) {
      selects = true;
      return;
    }
    SelectionBoundary b{node_key(m_, n), n.op_type, {}};
    std::set<ir::ValueId> seen;
    for (auto v : decide) walk(v, b.values, seen);
    r_.boundaries.push_back(std::move(b));
  }

  /// The main-graph float values (not selection-dependent) that tainted
  /// value v is decided by: v itself when float, else those of its producer's
  /// inputs (and body reads).
  void walk(ir::ValueId v, std::vector<ir::ValueId>& out, std::set<ir::ValueId>& seen) {
    if (v == ir::kNoValue || !tainted_[v] || dep_[v] || !main_value_[v] || !seen.insert(v).second) return;
    if (is_float(v)) {
      out.push_back(v);
      return;
    }
    if (producer_[v] < 0) return;
    const ir::Node& p = m_.main.nodes[static_cast<size_t>(producer_[v])];
    for (auto u : p.inputs) walk(u, out, seen);
    body_reads(p, [&](ir::ValueId u) { walk(u, out, seen); });
  }

  /// Flags of a body graph input from the node input that feeds it.
  void feed(ir::ValueId body_input, ir::ValueId from) {
    if (body_input == ir::kNoValue || from == ir::kNoValue) return;
    tainted_[body_input] = tainted_[body_input] || tainted_[from];
    dep_[body_input] = dep_[body_input] || dep_[from];
  }

  void control_flow(const ir::Node& n, bool main, bool& selects) {
    // What it reads: its inputs and the outer values its bodies read
    // (flags of values the bodies make are still unset here).
    bool any_dep = false;
    std::vector<ir::ValueId> reads;
    for (auto v : n.inputs)
      if (v != ir::kNoValue) reads.push_back(v);
    body_reads(n, [&](ir::ValueId v) {
      if (main_value_[v] || producer_[v] >= 0 || tainted_[v]) reads.push_back(v);
    });
    for (auto v : reads) any_dep |= dep_[v];
    bool inner = false;    // a selecting node in a body
    bool decides = false;  // its condition / trip count comes from tainted data
    bool body_cond = false;  // a Loop's body computes its continue condition from tainted data
    const auto in = [&](size_t i) { return i < n.inputs.size() ? n.inputs[i] : ir::kNoValue; };
    const auto taints = [&](ir::ValueId v) { return v != ir::kNoValue && tainted_[v]; };
    std::vector<ir::ValueId> outs_from;  // the body outputs each node output comes from (OR over branches)
    if (n.op_type == "If") {
      const ir::Graph& t = n.graph("then_branch");
      const ir::Graph& e = n.graph("else_branch");
      graph(t, false, inner);
      graph(e, false, inner);
      decides = taints(in(0));
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        for (const ir::Graph* g : {&t, &e})
          if (k < g->outputs.size()) or_into(n.outputs[k], g->outputs[k]);
      }
    } else if (n.op_type == "Loop") {
      const ir::Graph& body = n.graph("body");
      const size_t carried = n.inputs.size() > 2 ? n.inputs.size() - 2 : 0;
      if (body.inputs.size() >= 2) feed(body.inputs[1], in(1));
      for (size_t k = 0; k < carried && 2 + k < body.inputs.size(); ++k) feed(body.inputs[2 + k], in(2 + k));
      // Carried values flow around: a few passes reach the fixed point.
      for (int pass = 0; pass < 3; ++pass) {
        graph(body, false, inner);
        for (size_t k = 0; k < carried && 2 + k < body.inputs.size() && 1 + k < body.outputs.size(); ++k)
          feed(body.inputs[2 + k], body.outputs[1 + k]);
      }
      decides = taints(in(0)) || taints(in(1));
      body_cond = in(1) != ir::kNoValue && !body.outputs.empty() && taints(body.outputs[0]);
      for (size_t k = 0; k < n.outputs.size() && 1 + k < body.outputs.size(); ++k) or_into(n.outputs[k], body.outputs[1 + k]);
    } else {  // Scan
      const ir::Graph& body = n.graph("body");
      for (size_t k = 0; k < n.inputs.size() && k < body.inputs.size(); ++k) feed(body.inputs[k], n.inputs[k]);
      for (int pass = 0; pass < 3; ++pass) {
        graph(body, false, inner);
        const size_t state = n.inputs.size() - static_cast<size_t>(n.i("num_scan_inputs", 0));
        for (size_t k = 0; k < state && k < body.inputs.size() && k < body.outputs.size(); ++k)
          feed(body.inputs[k], body.outputs[k]);
      }
      for (size_t k = 0; k < n.outputs.size() && k < body.outputs.size(); ++k) or_into(n.outputs[k], body.outputs[k]);
    }
    const bool body_decides = inner || body_cond;
    if (any_dep) return mark(n, true, true);
    bool any_taint = false;
    for (auto v : reads) any_taint |= tainted_[v];
    if (any_taint) mark(n, true, false);
    if (!decides && !body_decides) return;
    mark(n, true, true);
    std::vector<ir::ValueId> decide;
    if (n.op_type == "If" && decides) decide.push_back(in(0));
    if (n.op_type == "Loop")
      for (size_t i : {size_t{0}, size_t{1}})
        if (taints(in(i))) decide.push_back(in(i));
    // Decided inside a body: by the float values the node reads.
    if (body_decides) decide.insert(decide.end(), reads.begin(), reads.end());
    select(n, main, selects, decide);
  }

  /// Node output `out` takes the flags of body output `from`.
  void or_into(ir::ValueId out, ir::ValueId from) {
    if (out == ir::kNoValue || from == ir::kNoValue) return;
    tainted_[out] = tainted_[out] || tainted_[from];
    dep_[out] = dep_[out] || dep_[from];
  }

  const ir::Model& m_;
  std::vector<bool> tainted_, dep_;
  std::vector<int> producer_;      ///< main-graph node index of each value, -1 for others
  std::vector<bool> main_value_;   ///< main-graph inputs and node outputs
  SelectionAnalysis r_;
};

}  // namespace

SelectionAnalysis analyse_selection(const ir::Model& m) { return Analyser(m).run(); }

}  // namespace kiln

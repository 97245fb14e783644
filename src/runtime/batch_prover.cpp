#include "runtime/batch_prover.h"

#include <cstring>
#include <map>
#include <set>
#include <variant>

#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"

namespace kiln {

namespace {

/// Operators that treat each index of axis 0 on its own when the batch is
/// axis 0 of every tensor of theirs that has it, and no attribute of theirs
/// names axis 0 (checked in batch_rows_independent).
bool row_wise_op(const std::string& op) {
  static const std::set<std::string> ops = {
      "Abs", "Add", "And", "AveragePool", "BatchNormalization", "Cast", "CastLike", "Ceil", "Clip", "Concat", "Conv",
      "ConvTranspose", "Cos", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp", "Flatten", "Floor", "Gather", "Gelu",
      "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish",
      "Identity", "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu", "Less",
      "LessOrEqual", "Log", "LogSoftmax", "LpNormalization", "MatMul", "Max", "MaxPool", "Min", "Mish", "Mod", "Mul",
      "Neg", "Not", "Or", "PRelu", "Pow", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax",
      "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Resize", "Round",
      "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Softmax", "Softplus", "Softsign", "Split", "Sqrt", "Squeeze",
      "Sub", "Sum", "Tanh", "ThresholdedRelu", "Transpose", "Unsqueeze", "Where", "Xor"};
  return ops.count(op) > 0;
}

/// The rules of batch_rows_independent over `probe`, with `where(v)`
/// saying where value v carries the batch (-1: nowhere; 0: at axis 0 only;
/// 1: anywhere else, or unknown) and `value_ok(n, i, v)` whether value v
/// may be read there: input i of node n, or (n null) a graph output.
template <class Where, class ValueOk>
bool rows_independent(const ir::Model& probe, Where&& where, ValueOk&& value_ok) {
  auto names_axis0 = [](const std::vector<int64_t>& axes, int64_t rank) {
    for (int64_t a : axes)
      if (a == 0 || (rank > 0 && a + rank == 0)) return true;
    return false;
  };
  for (const ir::Node& n : probe.main.nodes) {
    bool touches = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int w = where(n.inputs[i]);
      if (w == 1 || !value_ok(&n, i, n.inputs[i])) return false;
      touches |= w == 0;
    }
    if (!touches) continue;
    if (!row_wise_op(n.op_type) || !(n.domain.empty() || n.domain == "ai.onnx")) return false;
    for (auto& [k, a] : n.attrs)
      if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a)) return false;
    for (auto v : n.outputs)
      if (where(v) != 0) return false;
    const int64_t rank = static_cast<int64_t>(probe.value(n.inputs[0]).shape->size());
    if (n.has("axis") && names_axis0({n.i("axis")}, rank)) return false;
    if (n.has("axes") && names_axis0(n.ints("axes"), rank)) return false;
    if (n.op_type == "Transpose" && (!n.has("perm") || n.ints("perm").empty() || n.ints("perm")[0] != 0)) return false;
    // Axes given as an input (Reduce*-18, Squeeze/Unsqueeze-13, Split's split is sizes: fine).
    if ((n.op_type.rfind("Reduce", 0) == 0 || n.op_type == "Squeeze" || n.op_type == "Unsqueeze") &&
        n.inputs.size() > 1 && n.inputs[1] != ir::kNoValue) {
      const ir::Value& ax = probe.value(n.inputs[1]);
      if (!ax.constant || ax.constant->dtype() != DType::i64) return false;
      std::vector<int64_t> axes(ax.constant->data<int64_t>(), ax.constant->data<int64_t>() + ax.constant->numel());
      if (names_axis0(axes, rank)) return false;
    }
    // A Reduce* without axes reduces every axis, the batch's included.
    if (n.op_type.rfind("Reduce", 0) == 0 && !n.has("axes") && (n.inputs.size() < 2 || n.inputs[1] == ir::kNoValue))
      return false;
    // Flatten's default axis is 1; axis 0 merges the batch away (caught by where() too).
  }
  for (auto id : probe.main.outputs)
    if (where(id) != 0 || !value_ok(nullptr, 0, id)) return false;
  return true;
}


/// Symbolic where(): the value's axes carrying symbol `sym`.
int where_symbolic(const ir::Model& probe, ir::ValueId v, const std::string& sym) {
  if (v == ir::kNoValue) return -1;
  const ir::Value& val = probe.value(v);
  if (!val.shape) return 1;
  int at = -1, count = 0;
  for (size_t a = 0; a < val.shape->size(); ++a) {
    const ir::Dim& d = (*val.shape)[a];
    if (!d.is_static() && d.symbol.empty()) return 1;  // unknown: may be the batch
    if (!d.is_static() && d.symbol == sym) at = static_cast<int>(a), ++count;
  }
  return count == 0 ? -1 : count == 1 && at == 0 ? 0 : 1;
}

/// Bound where(): the axes whose size differs between the two programs
/// (batch 13 in `a`, 17 in `b`).
int where_bound(const ir::Model& a, const ir::Model& b, ir::ValueId v) {
  if (v == ir::kNoValue) return -1;
  const ir::Value& va = a.value(v);
  const ir::Value& vb = b.value(v);
  if (!va.shape || !vb.shape || va.shape->size() != vb.shape->size()) return 1;
  int at = -1, count = 0;
  for (size_t i = 0; i < va.shape->size(); ++i) {
    const ir::Dim& da = (*va.shape)[i];
    const ir::Dim& db = (*vb.shape)[i];
    if (!da.is_static() || !db.is_static()) return 1;  // data-dependent: may be the batch
    if (da.value != db.value) {
      if (da.value != kProbeSmall || db.value != kProbeLarge) return 1;  // a multiple or a part of the batch
      at = static_cast<int>(i), ++count;
    }
  }
  return count == 0 ? -1 : count == 1 && at == 0 ? 0 : 1;
}

}  // namespace

/// Whether constant values `v` differ between the two programs (they were
/// computed from the batch's size).
bool constants_differ(const ir::Model& a, const ir::Model& b, ir::ValueId v) {
  const ir::Value& va = a.value(v);
  const ir::Value& vb = b.value(v);
  if (!va.constant || !vb.constant) return va.constant.has_value() != vb.constant.has_value();
  const Tensor& ta = *va.constant;
  const Tensor& tb = *vb.constant;
  if (ta.raw() == tb.raw()) return false;  // the same buffer: an initializer
  return ta.dtype() != tb.dtype() || ta.shape() != tb.shape() ||
         std::memcmp(ta.raw(), tb.raw(), ta.nbytes()) != 0;
}

namespace {

/// m with its inputs' symbols bound to `sizes` and everything foldable folded.
std::optional<ir::Model> bound_copy(const ir::Model& m, const std::map<std::string, int64_t>& sizes) {
  ir::Model probe = ir::deep_copy(m);  // a plain copy shares (and would fold) the subgraphs
  try {
    passes::bind_symbols(probe, sizes);
    passes::infer_and_fold(probe, /*max_fold_bytes=*/uint64_t{1} << 20);
  } catch (const Error& e) {
    log().debug("padding prover: the model does not compile with {} bound: {}", sizes.size(), e.what());
    return std::nullopt;
  }
  return probe;
}

}  // namespace

std::optional<BoundPair> bound_pair(const ir::Model& m, const std::string& sym, const std::set<std::string>& others) {
  std::map<std::string, int64_t> sizes;
  static const int64_t primes[] = {5, 7, 11, 19, 23, 29, 31, 37, 41, 43, 47, 53};
  size_t k = 0;
  for (auto& o : others)
    if (o != sym) sizes[o] = primes[k++ % (sizeof primes / sizeof *primes)];
  sizes[sym] = kProbeSmall;
  std::optional<ir::Model> a = bound_copy(m, sizes);
  sizes[sym] = kProbeLarge;
  std::optional<ir::Model> b = a ? bound_copy(m, sizes) : std::nullopt;
  if (!a || !b) return std::nullopt;
  // The same program either way: the same nodes reading and writing the same values.
  if (a->main.nodes.size() != b->main.nodes.size()) return std::nullopt;
  for (size_t i = 0; i < a->main.nodes.size(); ++i) {
    const ir::Node& na = a->main.nodes[i];
    const ir::Node& nb = b->main.nodes[i];
    if (na.op_type != nb.op_type || na.inputs != nb.inputs || na.outputs != nb.outputs) return std::nullopt;
  }
  return BoundPair{std::move(*a), std::move(*b)};
}

bool batch_rows_independent(const std::optional<ir::Model>& inferred, const std::string& sym) {
  if (!inferred) return false;  // shape inference failed: nothing is shown
  const ir::Model& probe = *inferred;
  return rows_independent(
      probe, [&](ir::ValueId v) { return where_symbolic(probe, v, sym); },
      [](const ir::Node*, size_t, ir::ValueId) { return true; });
}

bool batch_rows_independent_bound(const ir::Model& m, const std::string& sym, const std::set<std::string>& others) {
  std::optional<BoundPair> pair = bound_pair(m, sym, others);
  if (!pair) return false;
  const ir::Model& pa = pair->a;
  const ir::Model& pb = pair->b;
  return rows_independent(
      pa, [&](ir::ValueId v) { return where_bound(pa, pb, v); },
      [&](const ir::Node* n, size_t i, ir::ValueId v) {
        if (v == ir::kNoValue || !constants_differ(pa, pb, v)) return true;
        // A value computed from the batch's size may set a Reshape's target
        // (the output's axis 0 is then checked to be the batch), nothing
        // else: not an output (a Shape of the batch), not data.
        return n && n->op_type == "Reshape" && i == 1;
      });
}

}  // namespace kiln

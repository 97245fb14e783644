// RMS normalization as one row kernel on the cuda target (rms_norm.h).
//
// Why: Llama-family models (transformers' LlamaRMSNorm, as torch.onnx
// exports it before opset 23's RMSNormalization) write
//   a = Cast(x, float);  r = ReduceMean(Pow(a, 2), [-1]);
//   y = a * (1 / Sqrt(r + eps))  [Cast]  [* weight]
// which the element-wise fusion leaves as three or four kernels (the Pow, the
// ReduceMean, the Div with the Add and Sqrt, the Mul by the weight): 9 norms
// of the zoo's Llama at batch 32 cost ~0.2 ms of its 0.85 ms on the H200
// (issue #20's profile), on rows of 256 elements that one warp normalizes in
// registers. The chain becomes an ONNX RMSNormalization node (opset 23:
// Y = X / sqrt(mean(X^2, last axis) + epsilon) * scale), which gen_reduce
// lowers with the LayerNormalization kernel minus the mean. Only the cuda
// lowering makes it, after the precision pass, and only in the forms that
// kernel takes, so no host target ever sees one.
#include "targets/cuda/compile/rms_norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "passes/graph_edit.h"
#include "support/half.h"
#include "support/log.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

bool onnx_op(const ir::Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

/// passes::scalar_constant, plus 16-bit floats (after the precision pass, a
/// 16-bit program's constants are 16-bit).
bool scalar_of(const ir::Model& m, ir::ValueId v, double& out) {
  if (passes::scalar_constant(m, v, out)) return true;
  if (v == ir::kNoValue || !m.value(v).constant || m.value(v).constant->numel() != 1) return false;
  const Tensor& t = *m.value(v).constant;
  if (t.dtype() == DType::f16) out = half_to_float(t.data<uint16_t>()[0]);
  else if (t.dtype() == DType::bf16) out = bf16_to_float(t.data<uint16_t>()[0]);
  else return false;
  return true;
}

class RmsMatcher {
 public:
  explicit RmsMatcher(ir::Model& m)
      : m_(m), producer_(passes::producer_indices(m.main, m.values.size())),
        uses_(passes::use_counts(m.main, m.values.size())) {}

  /// One match: the nodes it absorbs, x, the optional weight, the output.
  struct Match {
    std::vector<int> nodes;
    ir::ValueId x = ir::kNoValue, weight = ir::kNoValue, y = ir::kNoValue;
    double eps = 0;
    int64_t d = 0;
  };

  /// Whether ReduceMean node `i` starts an RMS chain; fills `mt`.
  bool match(int i, Match& mt) const {
    const ir::Node& r = m_.main.nodes[static_cast<size_t>(i)];
    if (!onnx_op(r, "ReduceMean") || !last_axis_mean(r)) return false;
    // Pow(a, 2) or Mul(a, a), read only by the ReduceMean.
    const int pi = sole_producer(r.inputs[0]);
    if (pi < 0) return false;
    const ir::Node& p = node(pi);
    double two = 0;
    ir::ValueId a = ir::kNoValue;
    if (onnx_op(p, "Pow") && p.inputs.size() == 2 && scalar_of(m_, p.inputs[1], two) && two == 2.0)
      a = p.inputs[0];
    else if (onnx_op(p, "Mul") && p.inputs.size() == 2 && p.inputs[0] == p.inputs[1])
      a = p.inputs[0];
    if (a == ir::kNoValue) return false;
    const ir::Value& av = m_.value(a);
    if (!av.shape || !ir::is_static(*av.shape) || av.shape->empty() || !is_float_storage(av.dtype)) return false;
    mt.d = ir::to_sizes(*av.shape).back();
    mt.nodes = {pi, i};
    // + eps -> Sqrt -> (1 / s, Reciprocal, then * a) or (a / s).
    int n = sole_reader(r.outputs[0]);
    if (n < 0 || !onnx_op(node(n), "Add") || node(n).inputs.size() != 2) return false;
    const ir::Node& add = node(n);
    const ir::ValueId eps_v = add.inputs[0] == r.outputs[0] ? add.inputs[1] : add.inputs[0];
    if (!scalar_of(m_, eps_v, mt.eps) || mt.eps < 0) return false;
    mt.nodes.push_back(n);
    n = sole_reader(add.outputs[0]);
    if (n < 0 || !onnx_op(node(n), "Sqrt")) return false;
    mt.nodes.push_back(n);
    const ir::ValueId s = node(n).outputs[0];
    n = sole_reader(s);
    if (n < 0) return false;
    ir::ValueId y = ir::kNoValue;
    double one = 0;
    if (onnx_op(node(n), "Div") && node(n).inputs.size() == 2 && node(n).inputs[1] == s &&
        root(node(n).inputs[0]) == root(a)) {
      mt.nodes.push_back(n);
      absorb_casts(node(n).inputs[0], mt);
      y = node(n).outputs[0];
    } else {
      const bool recip = onnx_op(node(n), "Reciprocal") ||
                         (onnx_op(node(n), "Div") && node(n).inputs.size() == 2 && node(n).inputs[1] == s &&
                          scalar_of(m_, node(n).inputs[0], one) && one == 1.0);
      if (!recip) return false;
      mt.nodes.push_back(n);
      const ir::ValueId inv = node(n).outputs[0];
      n = sole_reader(inv);
      if (n < 0 || !onnx_op(node(n), "Mul") || node(n).inputs.size() != 2) return false;
      const ir::ValueId other = node(n).inputs[0] == inv ? node(n).inputs[1] : node(n).inputs[0];
      // The precision pass may have put a Cast on one side only (the Pow
      // kept float32): both sides must be one value up to float Casts.
      if (root(other) != root(a)) return false;
      mt.nodes.push_back(n);
      absorb_casts(other, mt);
      y = node(n).outputs[0];
    }
    // x: a before any float Cast (the kernel computes in float32 anyway);
    // the Casts on the way that only the chain reads are absorbed.
    absorb_casts(a, mt);
    mt.x = root(a);
    // [Cast to a float type] [* weight of D elements].
    if (int c = sole_reader(y); c >= 0 && onnx_op(node(c), "Cast") && is_float_storage(m_.value(node(c).outputs[0]).dtype)) {
      mt.nodes.push_back(c);
      y = node(c).outputs[0];
    }
    if (int w = sole_reader(y); w >= 0 && onnx_op(node(w), "Mul") && node(w).inputs.size() == 2) {
      const ir::ValueId other = node(w).inputs[0] == y ? node(w).inputs[1] : node(w).inputs[0];
      const ir::Value& ov = m_.value(other);
      if (other != y && ov.constant && is_float_storage(ov.dtype) && ov.constant->numel() == mt.d && ov.shape &&
          same_dims(node(w).outputs[0], y)) {
        mt.weight = other;
        mt.nodes.push_back(w);
        y = node(w).outputs[0];
      }
    }
    mt.y = y;
    return is_float_storage(m_.value(y).dtype) && same_dims(y, a);
  }

 private:
  const ir::Node& node(int i) const { return m_.main.nodes[static_cast<size_t>(i)]; }

  /// `v` before the float-to-float Casts that produce it.
  ir::ValueId root(ir::ValueId v) const {
    for (int c = producer_[v]; c >= 0 && onnx_op(node(c), "Cast") && is_float_storage(m_.value(node(c).inputs[0]).dtype) &&
                               is_float_storage(m_.value(v).dtype);
         c = producer_[v])
      v = node(c).inputs[0];
    return v;
  }

  /// Adds to `mt` the float Casts producing `v` (back to root(v)) whose
  /// outputs only nodes already in `mt` read (x's own Cast to float32, read
  /// by the Pow and the normalizing node; a Cast the precision pass put on
  /// one side).
  void absorb_casts(ir::ValueId v, Match& mt) const {
    for (int c = producer_[v]; c >= 0 && v != root(v) && uses_[v] <= 2; c = producer_[v]) {
      if (std::find(mt.nodes.begin(), mt.nodes.end(), c) != mt.nodes.end()) return;
      int readers_in_chain = 0;
      for (int k : mt.nodes)
        for (auto in : node(k).inputs) readers_in_chain += in == v;
      if (readers_in_chain < uses_[v]) return;  // read outside the chain: it stays
      mt.nodes.push_back(c);
      v = node(c).inputs[0];
    }
  }

  /// The producer of `v` when v has one reader and is no graph output; else -1.
  int sole_producer(ir::ValueId v) const {
    if (v == ir::kNoValue || uses_[v] != 1) return -1;
    return producer_[v];
  }

  /// The one node reading `v` (v no graph output, read once); else -1.
  int sole_reader(ir::ValueId v) const {
    if (v == ir::kNoValue || uses_[v] != 1) return -1;
    const auto& nodes = m_.main.nodes;
    for (size_t j = 0; j < nodes.size(); ++j)
      for (auto in : nodes[j].inputs)
        if (in == v) return static_cast<int>(j);
    return -1;  // read by a graph output or a subgraph
  }

  bool same_dims(ir::ValueId a, ir::ValueId b) const {
    const ir::Value &va = m_.value(a), &vb = m_.value(b);
    return va.shape && vb.shape && ir::is_static(*va.shape) && ir::is_static(*vb.shape) &&
           ir::to_sizes(*va.shape) == ir::to_sizes(*vb.shape);
  }

  /// ReduceMean over the last axis only, keeping it (axes input [-1] or [rank-1], keepdims 1).
  bool last_axis_mean(const ir::Node& r) const {
    if (r.i("keepdims", 1) != 1 || r.inputs.size() != 2 || r.inputs[1] == ir::kNoValue) return false;
    const ir::Value& x = m_.value(r.inputs[0]);
    const ir::Value& ax = m_.value(r.inputs[1]);
    if (!x.shape || !ax.constant || ax.constant->numel() != 1 || ax.constant->dtype() != DType::i64) return false;
    const int64_t axis = ax.constant->data<int64_t>()[0], rank = static_cast<int64_t>(x.shape->size());
    return rank >= 1 && (axis == -1 || axis == rank - 1);
  }

  ir::Model& m_;
  std::vector<int> producer_, uses_;
};

}  // namespace

int fuse_rms_norms(ir::Model& m) {
  if (const char* e = std::getenv("KILN_CUDA_RMS_NORM"); e && std::string(e) == "0") return 0;  // measurement aid
  RmsMatcher matcher(m);
  auto& nodes = m.main.nodes;
  std::vector<bool> absorbed(nodes.size(), false);
  std::vector<std::pair<int, ir::Node>> made;  // position (the chain's last node) -> the fused node
  for (size_t i = 0; i < nodes.size(); ++i) {
    RmsMatcher::Match mt;
    if (absorbed[i] || !matcher.match(static_cast<int>(i), mt)) continue;
    bool clash = false;
    for (int k : mt.nodes) clash |= absorbed[static_cast<size_t>(k)];
    if (clash) continue;
    ir::ValueId weight = mt.weight;
    if (weight == ir::kNoValue) {
      ir::Value ones;
      ones.name = m.value(mt.y).name + "_rms_ones";
      ones.dtype = DType::f32;
      ones.shape = ir::static_shape({mt.d});
      Tensor t(DType::f32, {mt.d});
      std::fill(t.data<float>(), t.data<float>() + mt.d, 1.f);
      ones.constant = std::move(t);
      weight = m.add_value(std::move(ones));
    }
    ir::Node rms;
    rms.op_type = "RMSNormalization";
    rms.name = nodes[i].name + "/rmsnorm";
    rms.opset = 23;
    rms.inputs = {mt.x, weight};
    rms.outputs = {mt.y};
    rms.attrs["axis"] = int64_t{-1};
    rms.attrs["epsilon"] = static_cast<float>(mt.eps);
    for (int k : mt.nodes) absorbed[static_cast<size_t>(k)] = true;
    made.emplace_back(*std::max_element(mt.nodes.begin(), mt.nodes.end()), std::move(rms));
  }
  if (made.empty()) return 0;
  std::sort(made.begin(), made.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ir::Node> out;
  out.reserve(nodes.size());
  size_t next = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    // The fused node goes where the chain's last node was: its inputs (x, a
    // constant weight) exist by then, and its readers come after.
    while (next < made.size() && made[next].first == static_cast<int>(i)) out.push_back(std::move(made[next++].second));
    if (!absorbed[i]) out.push_back(std::move(nodes[i]));
  }
  nodes = std::move(out);
  log().debug("cuda: {} RMS normalization chain(s) as one row kernel each", made.size());
  return static_cast<int>(made.size());
}

}  // namespace kiln::targets::cuda

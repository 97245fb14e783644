// Einsum -> MatMul: a two-operand Einsum that contracts (or batches) is a
// batched GEMM once its dims are grouped. Each label falls in one group:
//   batch: in both inputs and the output      (b)
//   M:     only in the first input, kept       (i)
//   N:     only in the second input, kept      (j)
//   K:     in both inputs, summed over         (d)
// and the Einsum becomes
//   Transpose(A -> b M K) -> Reshape [b.., prod M, prod K]
//   Transpose(B -> b K N) -> Reshape [b.., prod K, prod N]
//   MatMul -> Reshape [b.., M.., N..] -> Transpose (to the output's order),
// each Transpose / Reshape emitted only where it moves or merges something.
// Attention blocks written with einsum (MaxViT, many vision and language
// transformers: "bhid,bhjd->bhij", "bhij,bhjd->bhid") then run as the
// targets' MatMul (oneDNN on cpu, which also folds the Transposes into
// strides) instead of the reference kernel's scalar loops.
//
// Left alone: other dtypes than float32, dims not all static, one or three+
// operands, a label repeated within a term (a diagonal), a label of one input
// that is summed away (it would need a ReduceSum first), and a label of both
// inputs whose sizes differ (size-1 broadcasting). Those keep the reference
// kernel.
#include <algorithm>
#include <numeric>

#include "ops/einsum.h"
#include "passes/graph_edit.h"
#include "passes/passes.h"

namespace kiln::passes {

namespace {

int index_of(const std::vector<int>& labels, int id) {
  auto it = std::find(labels.begin(), labels.end(), id);
  return it == labels.end() ? -1 : static_cast<int>(it - labels.begin());
}

bool has_repeat(std::vector<int> labels) {
  std::sort(labels.begin(), labels.end());
  return std::adjacent_find(labels.begin(), labels.end()) != labels.end();
}

/// The label groups of one Einsum, each in the order the GEMM operands use.
struct Groups {
  std::vector<int> batch, m, n, k;
};

/// The groups, or nullopt when the Einsum is not a plain (batched) GEMM.
std::optional<Groups> group_labels(const ops::EinsumLabels& l, const std::vector<int64_t>& ad,
                                   const std::vector<int64_t>& bd) {
  const std::vector<int>& a = l.inputs[0];
  const std::vector<int>& b = l.inputs[1];
  if (has_repeat(a) || has_repeat(b)) return std::nullopt;
  Groups g;
  for (int id : l.output) {
    const int ia = index_of(a, id), ib = index_of(b, id);
    if (ia >= 0 && ib >= 0) {
      if (ad[static_cast<size_t>(ia)] != bd[static_cast<size_t>(ib)]) return std::nullopt;
      g.batch.push_back(id);
    } else {
      (ia >= 0 ? g.m : g.n).push_back(id);
    }
  }
  for (size_t d = 0; d < a.size(); ++d) {
    if (index_of(l.output, a[d]) >= 0) continue;
    const int ib = index_of(b, a[d]);
    if (ib < 0 || ad[d] != bd[static_cast<size_t>(ib)]) return std::nullopt;
    g.k.push_back(a[d]);
  }
  for (int id : b)
    if (index_of(l.output, id) < 0 && index_of(a, id) < 0) return std::nullopt;
  return g;
}

class EinsumRewriter {
 public:
  EinsumRewriter(ir::Model& m, ir::Graph& g) : m_(m), g_(g) {}

  int run() {
    return replace_nodes(g_, [&](const ir::Node& n) { return rewrite(n); });
  }

 private:
  /// The replacement nodes of an Einsum node (empty: keep it).
  std::vector<ir::Node> rewrite(const ir::Node& n) {
    if (!is_onnx_op(n, "Einsum") || n.inputs.size() != 2 || n.outputs.size() != 1) return {};
    auto ad = static_f32_dims(m_, n.inputs[0]);
    auto bd = static_f32_dims(m_, n.inputs[1]);
    auto yd = static_f32_dims(m_, n.outputs[0]);
    if (!ad || !bd || !yd) return {};
    const ops::EinsumLabels l = ops::einsum_labels(n, {static_cast<int64_t>(ad->size()), static_cast<int64_t>(bd->size())});
    const auto g = group_labels(l, *ad, *bd);
    if (!g) return {};
    std::vector<ir::Node> out;
    make_ = NodeMaker(m_, (n.name.empty() ? m_.value(n.outputs[0]).name : n.name) + "/einsum_", n.opset);
    // Operands: A as [batch, M, K], B as [batch, K, N].
    const ir::ValueId a = operand(out, n.inputs[0], l.inputs[0], *ad, g->batch, g->m, g->k, "a");
    const ir::ValueId b = operand(out, n.inputs[1], l.inputs[1], *bd, g->batch, g->k, g->n, "b");
    // Sizes by label, from the inputs.
    auto size_of = [&](int id) {
      int i = index_of(l.inputs[0], id);
      return i >= 0 ? (*ad)[static_cast<size_t>(i)] : (*bd)[static_cast<size_t>(index_of(l.inputs[1], id))];
    };
    std::vector<int64_t> mm_dims;
    for (int id : g->batch) mm_dims.push_back(size_of(id));
    mm_dims.push_back(product(g->m, size_of));
    mm_dims.push_back(product(g->n, size_of));
    // Result labels in [batch, m, n] order; the output may want another.
    std::vector<int> order = g->batch;
    order.insert(order.end(), g->m.begin(), g->m.end());
    order.insert(order.end(), g->n.begin(), g->n.end());
    std::vector<int64_t> ordered_dims;
    for (int id : order) ordered_dims.push_back(size_of(id));
    std::vector<int64_t> perm;
    for (int id : l.output) perm.push_back(index_of(order, id));
    const bool last_reshape = ordered_dims != mm_dims, last_transpose = !identity(perm);
    ir::ValueId mm = (last_reshape || last_transpose) ? make_.temp(mm_dims, "matmul") : n.outputs[0];
    out.push_back(make_.node("MatMul", {a, b}, mm, "matmul"));
    if (last_reshape) {
      const ir::ValueId r = last_transpose ? make_.temp(ordered_dims, "unflat") : n.outputs[0];
      out.push_back(make_.node("Reshape", {mm, make_.ints(ordered_dims, "unflat_shape")}, r, "unflat"));
      mm = r;
    }
    if (last_transpose) {
      ir::Node t = make_.node("Transpose", {mm}, n.outputs[0], "out_transpose");
      t.attrs["perm"] = perm;
      out.push_back(std::move(t));
    }
    return out;
  }

  /// x (labels `labels`, dims `dims`) as [outer.., prod rows, prod cols]:
  /// a Transpose when the labels are not in that order, a Reshape when a
  /// group has other than one label. Appends the nodes to `out`.
  ir::ValueId operand(std::vector<ir::Node>& out, ir::ValueId x, const std::vector<int>& labels,
                      const std::vector<int64_t>& dims, const std::vector<int>& outer, const std::vector<int>& rows,
                      const std::vector<int>& cols, const char* tag) {
    std::vector<int64_t> perm, tdims;
    for (const auto* grp : {&outer, &rows, &cols})
      for (int id : *grp) {
        perm.push_back(index_of(labels, id));
        tdims.push_back(dims[static_cast<size_t>(perm.back())]);
      }
    if (!identity(perm)) {
      const ir::ValueId t = make_.temp(tdims, std::string(tag) + "_transpose");
      ir::Node tn = make_.node("Transpose", {x}, t, std::string(tag) + "_transpose");
      tn.attrs["perm"] = perm;
      out.push_back(std::move(tn));
      x = t;
    }
    std::vector<int64_t> rdims(tdims.begin(), tdims.begin() + static_cast<long>(outer.size()));
    auto span = [&](size_t from, size_t count) {
      int64_t p = 1;
      for (size_t i = from; i < from + count; ++i) p *= tdims[i];
      return p;
    };
    rdims.push_back(span(outer.size(), rows.size()));
    rdims.push_back(span(outer.size() + rows.size(), cols.size()));
    if (rdims != tdims) {
      const ir::ValueId r = make_.temp(rdims, std::string(tag) + "_flat");
      out.push_back(make_.node("Reshape", {x, make_.ints(rdims, std::string(tag) + "_flat_shape")}, r,
                         std::string(tag) + "_flat"));
      x = r;
    }
    return x;
  }

  template <class SizeOf>
  static int64_t product(const std::vector<int>& ids, SizeOf size_of) {
    int64_t p = 1;
    for (int id : ids) p *= size_of(id);
    return p;
  }

  static bool identity(const std::vector<int64_t>& perm) {
    for (size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != static_cast<int64_t>(i)) return false;
    return true;
  }

  ir::Model& m_;
  ir::Graph& g_;
  NodeMaker make_{m_, "", 0};
};

}  // namespace

int einsum_to_matmul(ir::Model& m) {
  return sum_over_graphs(m.main, [&](ir::Graph& g) { return EinsumRewriter(m, g).run(); });
}

}  // namespace kiln::passes

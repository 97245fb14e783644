// One matmul for the Q, K and V projections of an attention (merge_qkv.h:
// merge_qkv_matmuls).
//
// Why: at batch 1 an encoder like BERT-base is bound by its ~100 dependent
// kernels (issue #20's profile: 73 cuBLASLt matmuls, 57% of the time, each a
// few microseconds), and three [S x 768] x [768 x 768] projections run as
// three launches of a small problem. One [768 x 2304] matmul does the same
// work in one launch with better occupancy; the fused attention reads Q, K
// and V as column slices of its result (AttentionView::offset), so the Split
// that names them is folded and moves no data.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "support/log.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/merge_qkv.h"

namespace kiln::targets::cuda {

namespace {

/// One projection: MatMul `mm` of X by constant W [K, N], its bias Add (-1
/// if none), the bias constant, and the value the rest of the graph reads.
struct Projection {
  int mm = -1, add = -1;
  ir::ValueId bias = ir::kNoValue, result = ir::kNoValue;
  int64_t n = 0;
};

bool scalar_constant(const ir::Model& m, ir::ValueId v) {
  const ir::Value& c = m.value(v);
  return c.constant && c.constant->numel() == 1;
}

/// Whether `v` reaches a MatMul of two non-constant operands through
/// single-reader reshapes, Transposes and scalar Mul / Div (an attention's
/// Q K^T or P V, which fuse_attention reads through them).
bool feeds_attention(const ir::Model& m, const std::vector<ir::Node>& nodes, const Uses& uses, ir::ValueId v) {
  static const std::set<std::string> views = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten"};
  for (int depth = 0; depth < 8; ++depth) {
    if (uses.is_output[v] || uses.readers[v].size() != 1) return false;
    const ir::Node& r = nodes[static_cast<size_t>(uses.readers[v][0])];
    if (!r.domain.empty() || r.outputs.size() != 1) return false;
    if (r.op_type == "MatMul")
      return r.inputs.size() == 2 && !m.value(r.inputs[0]).constant && !m.value(r.inputs[1]).constant;
    if (views.count(r.op_type)) {
      if (r.inputs[0] != v) return false;
    } else if (r.op_type == "Mul" || r.op_type == "Div") {
      if (r.inputs.size() != 2 || r.inputs[0] != v || !scalar_constant(m, r.inputs[1])) {
        if (!(r.op_type == "Mul" && r.inputs.size() == 2 && r.inputs[1] == v && scalar_constant(m, r.inputs[0])))
          return false;
      }
    } else {
      return false;
    }
    v = r.outputs[0];
  }
  return false;
}

/// MatMul node i as a projection of X by a constant [K, N] of X's 16-bit
/// dtype, with its bias Add when that is the only reader; nullopt otherwise.
std::optional<Projection> projection(const ir::Model& m, const std::vector<ir::Node>& nodes, const Uses& uses, int i) {
  const ir::Node& n = nodes[static_cast<size_t>(i)];
  if (!n.domain.empty() || n.op_type != "MatMul" || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  const ir::Value &x = m.value(n.inputs[0]), &w = m.value(n.inputs[1]), &y = m.value(n.outputs[0]);
  if (x.constant || !w.constant || !is_half(x.dtype) || w.dtype != x.dtype || y.dtype != x.dtype) return std::nullopt;
  const auto xd = static_dims(m, n.inputs[0]), wd = static_dims(m, n.inputs[1]), yd = static_dims(m, n.outputs[0]);
  if (xd.size() < 2 || wd.size() != 2 || yd.size() != xd.size() || wd[0] != xd.back() || yd.back() != wd[1])
    return std::nullopt;
  Projection p;
  p.mm = i;
  p.n = wd[1];
  p.result = n.outputs[0];
  // The bias Add, either operand order, when it is the MatMul's only reader.
  const ir::ValueId mv = n.outputs[0];
  if (!uses.is_output[mv] && uses.readers[mv].size() == 1) {
    const int a = uses.readers[mv][0];
    const ir::Node& add = nodes[static_cast<size_t>(a)];
    if (add.domain.empty() && add.op_type == "Add" && add.inputs.size() == 2) {
      const ir::ValueId b = add.inputs[0] == mv ? add.inputs[1] : add.inputs[0];
      const ir::Value& bv = m.value(b);
      if (bv.constant && bv.dtype == y.dtype && static_dims(m, b) == std::vector<int64_t>{p.n} &&
          static_dims(m, add.outputs[0]) == yd && m.value(add.outputs[0]).dtype == y.dtype) {
        p.add = a;
        p.bias = b;
        p.result = add.outputs[0];
      }
    }
  }
  return p;
}

/// Constants [K, N_i] (or [N_i]) side by side along their last axis.
Tensor concat_last(const std::vector<const Tensor*>& parts, int64_t rows) {
  const DType dt = parts[0]->dtype();
  const size_t e = dtype_size(dt);
  int64_t total = 0;
  for (auto* t : parts) total += t->numel() / rows;
  Tensor out(dt, rows == 1 && parts[0]->shape().size() == 1 ? std::vector<int64_t>{total} : std::vector<int64_t>{rows, total});
  auto* dst = static_cast<uint8_t*>(out.raw());
  int64_t col = 0;
  for (auto* t : parts) {
    const int64_t n = t->numel() / rows;
    const auto* src = static_cast<const uint8_t*>(t->raw());
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + (r * total + col) * e, src + r * n * e, static_cast<size_t>(n) * e);
    col += n;
  }
  return out;
}

}  // namespace

int merge_qkv_matmuls(ir::Model& m) {
  if (const char* e = std::getenv("KILN_CUDA_MERGE_QKV"); e && std::string(e) == "0") return 0;  // measurement aid
  std::vector<ir::Node>& nodes = m.main.nodes;
  for (auto& n : nodes)  // a subgraph reads values by name: leave such models alone
    for (auto& [k, a] : n.attrs)
      if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a)) return 0;
  const Uses uses = uses_of(m);
  // Projections grouped by (X, W's dtype, K, with or without bias), in node order.
  std::map<std::tuple<ir::ValueId, bool>, std::vector<Projection>> groups;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i)
    if (auto p = projection(m, nodes, uses, i); p && feeds_attention(m, nodes, uses, p->result))
      groups[{nodes[static_cast<size_t>(i)].inputs[0], p->add >= 0}].push_back(*p);

  std::map<int, std::vector<ir::Node>> emit_at;  // first MatMul's index -> the merged nodes
  std::set<int> removed;
  int merged = 0;
  for (auto& [key, ps] : groups) {
    if (ps.size() < 2) continue;
    const ir::Node& first = nodes[static_cast<size_t>(ps[0].mm)];
    const ir::ValueId x = first.inputs[0];
    const DType dt = m.value(x).dtype;
    auto yd = static_dims(m, first.outputs[0]);
    const int64_t k = static_dims(m, first.inputs[1])[0];
    std::vector<const Tensor*> ws, bs;
    std::vector<int64_t> sizes;
    for (auto& p : ps) {
      ws.push_back(&*m.value(nodes[static_cast<size_t>(p.mm)].inputs[1]).constant);
      if (p.add >= 0) bs.push_back(&*m.value(p.bias).constant);
      sizes.push_back(p.n);
    }
    int64_t total = 0;
    for (auto s : sizes) total += s;
    const std::string base = first.name + "_qkv";
    const ir::ValueId w = new_value(m, base + "_w", dt, {k, total}, concat_last(ws, k));
    yd.back() = total;
    ir::ValueId y = new_value(m, base + "_y", dt, yd);
    std::vector<ir::Node> out;
    ir::Node mm;
    mm.op_type = "MatMul";
    mm.name = base;
    mm.opset = first.opset;
    mm.inputs = {x, w};
    mm.outputs = {y};
    out.push_back(std::move(mm));
    if (!bs.empty()) {
      const ir::ValueId b = new_value(m, base + "_b", dt, {total}, concat_last(bs, 1));
      const ir::ValueId z = new_value(m, base + "_biased", dt, yd);
      ir::Node add;
      add.op_type = "Add";
      add.name = base + "_bias";
      add.opset = first.opset;
      add.inputs = {y, b};
      add.outputs = {z};
      out.push_back(std::move(add));
      y = z;
    }
    ir::Node split;
    split.op_type = "Split";
    split.name = base + "_split";
    split.opset = 13;  // sizes as input 1
    split.attrs["axis"] = static_cast<int64_t>(yd.size()) - 1;
    split.inputs = {y, shape_constant(m, base + "_sizes", sizes)};
    for (auto& p : ps) split.outputs.push_back(p.result);
    out.push_back(std::move(split));
    emit_at[ps[0].mm] = std::move(out);
    for (auto& p : ps) {
      removed.insert(p.mm);
      if (p.add >= 0) removed.insert(p.add);
    }
    ++merged;
  }
  if (!merged) return 0;
  std::vector<ir::Node> kept;
  kept.reserve(nodes.size());
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    if (auto it = emit_at.find(i); it != emit_at.end())
      for (auto& n : it->second) kept.push_back(std::move(n));
    if (!removed.count(i)) kept.push_back(std::move(nodes[static_cast<size_t>(i)]));
  }
  nodes = std::move(kept);
  log().debug("cuda: {} group(s) of attention projections merged into one matmul each", merged);
  return merged;
}

}  // namespace kiln::targets::cuda

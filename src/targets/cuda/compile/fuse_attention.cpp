// Attention recognition for the cuda lowering (lowering.h: lower_attention):
// MatMul(Q, K^T) [* or / scalars] [+ mask] -> Softmax(last axis) -> MatMul(., V)
// becomes one fused kernel (gen_attention.cpp), with the head-splitting
// Transposes around it folded into the kernel's strided reads and writes.
//
// Both forms exporters write are matched: transformers' eager attention
// (scores / sqrt(d) + mask) and torch.onnx's scaled_dot_product_attention
// (Q * sqrt(scale), K^T * sqrt(scale), + mask).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "support/half.h"
#include "support/log.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

namespace {

struct Match {
  const ir::Model& m;
  const std::vector<ir::Node>& nodes;
  const Uses& uses;
  const std::vector<bool>& done;
  /// Q, K and V may be traced through a node whose outputs have other
  /// readers (the Split of a fused QKV matmul, the Transpose three Gathers
  /// read): lower_attention then checks that every such reader is absorbed
  /// by the same attention, else traces again without.
  bool shared = false;

  /// `v`'s producer when `reader` is its only reader (v no graph output) and
  /// the producer is a not yet lowered ONNX node; else -1.
  int sole_producer(ir::ValueId v, int reader) const {
    if (v == ir::kNoValue || uses.is_output[v]) return -1;
    const auto& r = uses.readers[v];
    if (r.size() != 1 || r[0] != reader) return -1;
    int p = uses.producer[v];
    if (p < 0 || done[p] || !nodes[p].domain.empty()) return -1;
    return p;
  }

  /// An operand's producer: sole_producer, or with `shared` any not yet
  /// lowered ONNX producer of a value that is no graph output.
  int operand_producer(ir::ValueId v, int reader) const {
    if (!shared) return sole_producer(v, reader);
    if (v == ir::kNoValue || uses.is_output[v]) return -1;
    int p = uses.producer[v];
    if (p < 0 || done[p] || !nodes[p].domain.empty()) return -1;
    return p;
  }

  std::vector<int64_t> dims(ir::ValueId v) const {
    const ir::Value& val = m.value(v);
    return val.shape && ir::is_static(*val.shape) ? ir::to_sizes(*val.shape) : std::vector<int64_t>{};
  }
};

/// The value of a one-element float constant (float32 / float16 / bfloat16).
std::optional<float> scalar_constant(const ir::Model& m, ir::ValueId v) {
  const ir::Value& val = m.value(v);
  if (!val.constant || val.constant->numel() != 1) return std::nullopt;
  const Tensor& t = *val.constant;
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[0];
    case DType::f16: return half_to_float(t.data<uint16_t>()[0]);
    case DType::bf16: return bf16_to_float(t.data<uint16_t>()[0]);
    default: return std::nullopt;
  }
}

/// For node p = Mul(x, c) / Mul(c, x) / Div(x, c) with c a scalar float
/// constant: the index of x among p's inputs and the factor it is scaled by.
std::optional<std::pair<int, float>> scalar_scaling(const ir::Model& m, const ir::Node& p) {
  if (p.inputs.size() != 2 || (p.op_type != "Mul" && p.op_type != "Div")) return std::nullopt;
  if (auto c = scalar_constant(m, p.inputs[1])) {
    if (p.op_type == "Div") return *c == 0.f ? std::nullopt : std::optional<std::pair<int, float>>({0, 1.f / *c});
    return std::pair<int, float>{0, *c};
  }
  if (p.op_type == "Mul")
    if (auto c = scalar_constant(m, p.inputs[0])) return std::pair<int, float>{1, *c};
  return std::nullopt;
}

/// A Cast between float storage dtypes (float32 / float16 / bfloat16).
bool is_float_cast(const ir::Model& m, const ir::Node& n) {
  return n.op_type == "Cast" && n.inputs.size() == 1 && is_float_storage(m.value(n.inputs[0]).dtype) &&
         is_float_storage(m.value(n.outputs[0]).dtype);
}

/// The strides that read a tensor of `to` dims from one of `from` dims laid
/// out with `strides`, without moving data, or nullopt where the reshape
/// mixes dims that are not contiguous with each other (numpy's
/// _attempt_nocopy_reshape: group old and new dims of equal products; each
/// group's old dims must be dense among themselves).
std::optional<std::vector<int64_t>> reshape_strides(const std::vector<int64_t>& from,
                                                    const std::vector<int64_t>& strides,
                                                    const std::vector<int64_t>& to) {
  std::vector<int64_t> od, os;
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1) od.push_back(from[i]), os.push_back(strides[i]);
  std::vector<int64_t> ns(to.size(), 0);
  size_t oi = 0, ni = 0;
  while (oi < od.size() && ni < to.size()) {
    size_t oj = oi + 1, nj = ni + 1;
    int64_t op = od[oi], np = to[ni];
    while (op != np) {
      if (np < op) {
        if (nj >= to.size()) return std::nullopt;
        np *= to[nj++];
      } else {
        if (oj >= od.size()) return std::nullopt;
        op *= od[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k)
      if (os[k] != od[k + 1] * os[k + 1]) return std::nullopt;
    ns[nj - 1] = os[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) ns[k - 1] = ns[k] * to[k];
    oi = oj;
    ni = nj;
  }
  return oi == od.size() ? std::optional<std::vector<int64_t>>(ns) : std::nullopt;  // trailing 1s keep stride 0
}

/// A MatMul operand traced back through scalar scalings, Transposes and
/// reshapes (Reshape / Flatten / Squeeze / Unsqueeze) read only on this
/// path: the value the kernel reads, its strides per logical dim of the
/// operand (rank 3 or 4), the nodes folded and their scale.
struct Operand {
  ir::ValueId value = ir::kNoValue;
  std::vector<int64_t> dims, strides;
  int64_t offset = 0;  // elements from value's start to the operand's first
  std::vector<int> absorbed;
  float scale = 1.f;
  /// A reshape that is no strided view on its own, e.g. [S, B, H*D] ->
  /// [S, B*H, D] of a slice whose rows hold Q, K and V side by side (B*H
  /// mixes two strides), which a Transpose and a second reshape make one
  /// again ([B*H, S, D] -> [B, H, S, D]): then `strides` is empty and the
  /// operand is a view of finer dims (`fine_dims`, `fine_strides`), `groups[j]`
  /// consecutive ones making dim j of `dims`.
  std::vector<int64_t> fine_dims, fine_strides;
  std::vector<int> groups;
  bool refined() const { return !groups.empty(); }
};

/// The coarsest dims that refine both `from` (with `strides`) and `to`: each
/// dim of either is a product of consecutive ones (numpy-style reshape with
/// every dim split at the other's boundaries). Fills `fine_dims`,
/// `fine_strides` and `groups` (per dim of `to`) of `o`; false when a dim
/// boundary of one falls inside a dim of the other that it does not divide.
bool refine(const std::vector<int64_t>& from, const std::vector<int64_t>& strides, const std::vector<int64_t>& to,
            Operand& o) {
  std::vector<int64_t> f, fs;
  std::vector<int> g(to.size(), 0);
  size_t i = 0, j = 0;
  int64_t ra = i < from.size() ? from[0] : 1, rb = j < to.size() ? to[0] : 1;
  while (i < from.size() || j < to.size()) {
    if (i < from.size() && ra == 1) {
      if (++i < from.size()) ra = from[i];
      continue;
    }
    if (j < to.size() && rb == 1) {
      if (g[j] == 0) f.push_back(1), fs.push_back(0), g[j] = 1;  // a unit dim of `to`
      if (++j < to.size()) rb = to[j];
      continue;
    }
    if (i >= from.size() || j >= to.size()) return false;
    const int64_t part = ra % rb == 0 ? rb : rb % ra == 0 ? ra : 0;
    if (part == 0) return false;
    f.push_back(part);
    fs.push_back(strides[i] * (ra / part));  // the outer factor of what is left of dim i
    ++g[j];
    ra /= part;
    rb /= part;
  }
  o.fine_dims = std::move(f);
  o.fine_strides = std::move(fs);
  o.groups = std::move(g);
  o.strides.clear();
  return true;
}

/// `in` reshaped to `to`: a strided view when there is one, else a refined
/// view (see Operand); nullopt when neither exists.
std::optional<Operand> reshaped(Operand in, const std::vector<int64_t>& to) {
  const auto& d = in.refined() ? in.fine_dims : in.dims;
  const auto& st = in.refined() ? in.fine_strides : in.strides;
  if (auto exact = reshape_strides(d, st, to)) {
    in.strides = *exact;
    in.fine_dims.clear(), in.fine_strides.clear(), in.groups.clear();
  } else if (!refine(std::vector<int64_t>(d), std::vector<int64_t>(st), to, in)) {
    return std::nullopt;
  }
  in.dims = to;
  return in;
}

Operand trace_operand(const Match& mt, ir::ValueId v, int reader);

/// Transpose perm `perm` of `in` (dims and strides).
Operand permuted(Operand in, const std::vector<int64_t>& perm) {
  Operand o = in;
  for (size_t j = 0; j < perm.size(); ++j) {
    o.dims[j] = in.dims[static_cast<size_t>(perm[j])];  // output dim j is input dim perm[j]
    o.strides[j] = in.strides[static_cast<size_t>(perm[j])];
  }
  return o;
}

/// The perm of a Transpose node (its default: the dims reversed).
std::vector<int64_t> perm_of(const ir::Node& t, size_t rank) {
  auto p = t.ints("perm");
  if (p.empty()) {
    p.resize(rank);
    std::iota(p.rbegin(), p.rend(), 0);
  }
  return p;
}

/// Reshape r2 of Transpose t of Reshape r1 of x, where r1 merges x's
/// leading dims a0..ak into one, t keeps that dim first and r2 splits it
/// back: as a whole a Transpose of x, although the merged dim alone is no
/// strided view (onnxscript's torchlib writes K^T this way).
std::optional<Operand> merged_round_trip(const Match& mt, int r2) {
  const ir::Node& n2 = mt.nodes[r2];
  const int t = mt.sole_producer(n2.inputs[0], r2);
  if (t < 0 || mt.nodes[t].op_type != "Transpose") return std::nullopt;
  const int r1 = mt.sole_producer(mt.nodes[t].inputs[0], t);
  if (r1 < 0 || mt.nodes[r1].op_type != "Reshape") return std::nullopt;
  const ir::ValueId x = mt.nodes[r1].inputs[0];
  const auto xd = mt.dims(x), md = mt.dims(mt.nodes[r1].outputs[0]), od = mt.dims(n2.outputs[0]);
  if (md.empty() || xd.size() <= md.size()) return std::nullopt;
  const size_t k = xd.size() - md.size();  // x dims 0..k merge into md[0]
  int64_t lead = 1;
  for (size_t i = 0; i <= k; ++i) lead *= xd[i];
  if (lead != md[0] || !std::equal(md.begin() + 1, md.end(), xd.begin() + static_cast<std::ptrdiff_t>(k) + 1))
    return std::nullopt;
  const auto tp = perm_of(mt.nodes[t], md.size());
  if (tp.size() != md.size() || tp[0] != 0) return std::nullopt;
  std::vector<int64_t> full, want(xd.begin(), xd.begin() + static_cast<std::ptrdiff_t>(k) + 1);
  for (size_t i = 0; i <= k; ++i) full.push_back(static_cast<int64_t>(i));
  for (size_t j = 1; j < tp.size(); ++j) {
    full.push_back(tp[j] + static_cast<int64_t>(k));
    want.push_back(md[static_cast<size_t>(tp[j])]);
  }
  if (od != want) return std::nullopt;
  Operand o = permuted(trace_operand(mt, x, r1), full);
  o.absorbed.insert(o.absorbed.end(), {r1, t});
  return o;
}

/// True when inputs [from, to) of `n` are constants (or omitted).
bool constant_inputs(const ir::Model& m, const ir::Node& n, size_t from, size_t to) {
  for (size_t i = from; i < to && i < n.inputs.size(); ++i)
    if (n.inputs[i] != ir::kNoValue && !m.value(n.inputs[i]).constant) return false;
  return true;
}

/// Output `v` of a Split, Gather or Slice node `n` as a strided view of the
/// node's input `in` (already traced): the part's offset along the axis is
/// added to in.offset. nullopt for anything else (non-constant indices,
/// negative steps, a Gather of more than one index).
std::optional<Operand> selected_part(const Match& mt, const ir::Node& n, ir::ValueId v, Operand in) {
  const int64_t rank = static_cast<int64_t>(in.dims.size());
  if (rank == 0 || in.dims.size() != in.strides.size()) return std::nullopt;
  auto axis_of = [&](int64_t a) { return a < 0 ? a + rank : a; };
  if (n.op_type == "Split") {
    const int64_t a = axis_of(n.i("axis", 0));
    if (a < 0 || a >= rank) return std::nullopt;
    int64_t start = 0;
    for (ir::ValueId o : n.outputs) {
      const auto od = mt.dims(o);
      if (od.size() != in.dims.size()) return std::nullopt;
      if (o == v) {
        in.offset += start * in.strides[a];
        in.dims = od;
        return in;
      }
      start += od[a];
    }
    return std::nullopt;
  }
  if (n.op_type == "Gather") {
    if (n.inputs.size() != 2 || !constant_inputs(mt.m, n, 1, 2)) return std::nullopt;
    const Tensor& t = *mt.m.value(n.inputs[1]).constant;
    if (t.numel() != 1 || t.shape().size() > 1 || (t.dtype() != DType::i64 && t.dtype() != DType::i32))
      return std::nullopt;
    const int64_t a = axis_of(n.i("axis", 0));
    if (a < 0 || a >= rank) return std::nullopt;
    int64_t idx = t.dtype() == DType::i64 ? t.data<int64_t>()[0] : t.data<int32_t>()[0];
    if (idx < 0) idx += in.dims[a];
    if (idx < 0 || idx >= in.dims[a]) return std::nullopt;
    in.offset += idx * in.strides[a];
    if (t.shape().empty()) {  // a scalar index drops the axis
      in.dims.erase(in.dims.begin() + a);
      in.strides.erase(in.strides.begin() + a);
    } else {
      in.dims[a] = 1;
    }
    return mt.dims(v) == in.dims ? std::optional<Operand>(in) : std::nullopt;
  }
  if (n.op_type == "Slice") {
    if (n.inputs.size() < 3 || !constant_inputs(mt.m, n, 1, 5)) return std::nullopt;
    auto starts = const_ints(mt.m, n, 1), ends = const_ints(mt.m, n, 2), axes = const_ints(mt.m, n, 3),
         steps = const_ints(mt.m, n, 4);
    if (!starts || !ends || starts->size() != ends->size()) return std::nullopt;
    for (size_t j = 0; j < starts->size(); ++j) {
      const int64_t a = axis_of(axes ? (j < axes->size() ? (*axes)[j] : -1000) : static_cast<int64_t>(j));
      const int64_t step = steps ? (j < steps->size() ? (*steps)[j] : 0) : 1;
      if (a < 0 || a >= rank || step < 1) return std::nullopt;
      const int64_t d = in.dims[a];
      auto clamp = [&](int64_t x) { return std::clamp(x < 0 ? x + d : x, int64_t{0}, d); };
      const int64_t b = clamp((*starts)[j]), e = clamp((*ends)[j]);
      in.offset += b * in.strides[a];
      in.dims[a] = e > b ? (e - b + step - 1) / step : 0;
      in.strides[a] *= step;
    }
    return mt.dims(v) == in.dims ? std::optional<Operand>(in) : std::nullopt;
  }
  return std::nullopt;
}

Operand trace_any(const Match& mt, ir::ValueId v, int reader);

/// trace_any, and the operand itself (no node folded) when what that found
/// is no strided view (a refined one).
Operand trace_operand(const Match& mt, ir::ValueId v, int reader) {
  Operand o = trace_any(mt, v, reader);
  if (!o.refined()) return o;
  Operand base;
  base.value = v;
  base.dims = mt.dims(v);
  base.strides = strides_of(base.dims);
  return base;
}

/// `v` traced back through the nodes fuse_attention folds; the result may be
/// a refined view (Operand), which only a Transpose or a reshape reads on.
Operand trace_any(const Match& mt, ir::ValueId v, int reader) {
  Operand base;
  base.value = v;
  base.dims = mt.dims(v);
  base.strides = strides_of(base.dims);
  const int p = mt.operand_producer(v, reader);
  if (p < 0) return base;
  const ir::Node& n = mt.nodes[p];
  static const std::set<std::string> reshapes = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  static const std::set<std::string> selections = {"Split", "Gather", "Slice"};
  Operand o;
  if (selections.count(n.op_type) && !base.dims.empty()) {
    auto part = selected_part(mt, n, v, trace_operand(mt, n.inputs[0], p));
    if (!part) return base;
    o = *part;
  } else if (auto sc = scalar_scaling(mt.m, n); sc && mt.dims(n.inputs[sc->first]) == base.dims &&
                                         mt.m.value(n.inputs[sc->first]).dtype == mt.m.value(v).dtype) {
    o = trace_any(mt, n.inputs[sc->first], p);
    o.scale *= sc->second;
  } else if (n.op_type == "Transpose" && n.inputs.size() == 1) {
    Operand in = trace_any(mt, n.inputs[0], p);
    auto tp = perm_of(n, in.dims.size());
    if (tp.size() != in.dims.size()) return base;
    if (!in.refined()) {
      o = permuted(in, tp);
    } else {  // permute the groups of fine dims, then try to make it a strided view again
      std::vector<size_t> start(in.groups.size(), 0);
      for (size_t j = 1; j < start.size(); ++j) start[j] = start[j - 1] + static_cast<size_t>(in.groups[j - 1]);
      Operand r = in;
      r.fine_dims.clear(), r.fine_strides.clear(), r.groups.clear();
      for (int64_t t : tp) {
        const size_t a = static_cast<size_t>(t);
        for (int k = 0; k < in.groups[a]; ++k) {
          r.fine_dims.push_back(in.fine_dims[start[a] + static_cast<size_t>(k)]);
          r.fine_strides.push_back(in.fine_strides[start[a] + static_cast<size_t>(k)]);
        }
        r.groups.push_back(in.groups[a]);
      }
      auto back = reshaped(r, base.dims);
      if (!back) return base;
      o = *back;
    }
  } else if (auto rt = n.op_type == "Reshape" ? merged_round_trip(mt, p) : std::nullopt) {
    o = *rt;
  } else if (reshapes.count(n.op_type) && (n.op_type != "Reshape" || n.inputs.size() == 2)) {
    auto r = reshaped(trace_any(mt, n.inputs[0], p), base.dims);
    if (!r) return base;
    o = *r;
  } else {
    return base;
  }
  o.absorbed.push_back(p);
  return o;
}

/// Rank-3 operands [bh, row, col] become [1, bh, row, col].
AttentionView view4(ir::ValueId v, std::vector<int64_t> strides, int64_t offset = 0) {
  if (strides.size() == 3) strides.insert(strides.begin(), 0);
  AttentionView w;
  w.value = v;
  w.offset = offset;
  std::copy(strides.begin(), strides.end(), w.strides.begin());
  return w;
}

/// Strides reading `mask` (shape `md`) broadcast to the scores' dims `sd`
/// (right-aligned, numpy rules); nullopt when it does not broadcast.
std::optional<std::vector<int64_t>> broadcast_strides(const std::vector<int64_t>& md, const std::vector<int64_t>& sd) {
  if (md.size() > sd.size()) return std::nullopt;
  auto st = strides_of(md);
  std::vector<int64_t> out(sd.size(), 0);
  const size_t off = sd.size() - md.size();
  for (size_t i = 0; i < md.size(); ++i) {
    if (md[i] == sd[off + i]) out[off + i] = md[i] == 1 ? 0 : st[i];
    else if (md[i] != 1) return std::nullopt;
  }
  return out;
}

}  // namespace

std::optional<AttentionLowered> lower_attention(Lowering& L, int softmax, const std::vector<ir::Node>& nodes,
                                                const Uses& uses, const std::vector<bool>& done) {
  const ir::Model& m = L.model;
  Match mt{m, nodes, uses, done, false};
  const ir::Node& sm = nodes[softmax];
  if (!sm.domain.empty() || sm.op_type != "Softmax" || done[softmax]) return std::nullopt;
  // Why a Softmax is not fused (KILN_LOG=debug): to see what an exporter wrote.
  auto skip = [&](const std::string& why) -> std::optional<AttentionLowered> {
    log().debug("cuda: {} is not fused into an attention kernel: {}", sm.label(), why);
    return std::nullopt;
  };
  const auto sd = mt.dims(sm.outputs[0]);
  const int64_t rank = static_cast<int64_t>(sd.size());
  if (rank != 3 && rank != 4) return skip("rank is not 3 or 4");
  // Before opset 13 Softmax flattens at `axis` (default 1); for the last
  // axis both definitions agree.
  int64_t axis = sm.i("axis", sm.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return skip("not over the last axis");
  // Softmax may run in float32 between Casts (the precision pass keeps a
  // mask Add in float32 when its constants overflow float16); the kernel's
  // softmax is float32 anyway, so the Casts fold too.
  const DType sdt = m.value(sm.outputs[0]).dtype;
  if (!is_float_storage(sdt)) return skip("not on float values");

  AttentionLowered out;
  out.absorbed.push_back(softmax);
  // Every scalar scaling multiplies the scores; one between the mask Add and
  // the Softmax, (s + mask) * c, multiplies the mask too (mask_scale).
  float scale = 1.f, mask_scale = 1.f;
  std::optional<AttentionView> mask;
  DType mask_dtype = DType::f32;
  // Scores chain: Softmax <- [Add mask] / scalar Mul / Div <- MatMul.
  ir::ValueId cur = sm.inputs[0];
  int reader = softmax, qk = -1;
  while (qk < 0) {
    int p = mt.sole_producer(cur, reader);
    if (p < 0)
      return skip(fmt::format("the scores chain ('{}') has another reader, or is no node this pattern knows",
                              m.value(cur).name));
    const ir::Node& n = nodes[p];
    if (n.op_type == "MatMul") {
      qk = p;
    } else if (is_float_cast(m, n)) {
      cur = n.inputs[0];
    } else if (auto sc = scalar_scaling(m, n); sc && mt.dims(n.inputs[sc->first]) == sd) {
      scale *= sc->second;
      if (!mask) mask_scale *= sc->second;  // after the Add (if any): it scales the mask as well
      cur = n.inputs[sc->first];
    } else if (n.op_type == "Add" && n.inputs.size() == 2 && !mask) {
      // The scores side is the operand whose own chain reaches a MatMul.
      int side = -1;
      for (int i = 0; i < 2 && side < 0; ++i) {
        ir::ValueId x = n.inputs[i];
        if (mt.dims(x) != sd) continue;
        int q = mt.sole_producer(x, p);
        while (q >= 0 && nodes[q].op_type != "MatMul") {
          auto s2 = scalar_scaling(m, nodes[q]);
          int in = s2 ? s2->first : is_float_cast(m, nodes[q]) ? 0 : -1;
          q = in >= 0 ? mt.sole_producer(nodes[q].inputs[static_cast<size_t>(in)], q) : -1;
        }
        if (q >= 0) side = i;
      }
      if (side < 0) return skip("neither side of the mask Add comes from the Q K^T MatMul");
      ir::ValueId mv = n.inputs[1 - side];
      auto ms = broadcast_strides(mt.dims(mv), sd);
      mask_dtype = m.value(mv).dtype;
      const ir::Value& mval = m.value(mv);
      if (!ms || !is_float_storage(mask_dtype) || !mval.shape || !ir::is_static(*mval.shape))
        return skip("the mask does not broadcast to the scores, or is not float");
      mask = view4(mv, *ms);
      cur = n.inputs[side];
    } else {
      return skip(fmt::format(
          "the scores chain meets {} (op_type {}), which is not a MatMul, scalar Mul / Div, mask Add or Cast",
          n.label(), n.op_type));
    }
    out.absorbed.push_back(p);
    reader = p;
  }
  const ir::Node& mm1 = nodes[qk];
  const DType dt = m.value(mm1.outputs[0]).dtype;
  if (!is_half(dt)) return skip("the Q K^T MatMul is not float16 / bfloat16");
  // P V: the probabilities' only reader (through a Cast back to 16 bits), as the left operand.
  ir::ValueId probs = sm.outputs[0];
  auto only_reader = [&](ir::ValueId v) {
    return uses.is_output[v] || uses.readers[v].size() != 1 ? -1 : uses.readers[v][0];
  };
  int pv = only_reader(probs);
  if (pv >= 0 && sdt != dt) {
    if (done[pv] || !is_float_cast(m, nodes[pv]) || m.value(nodes[pv].outputs[0]).dtype != dt)
      return skip("the probabilities go to a node other than a Cast back to 16 bits");
    out.absorbed.push_back(pv);
    probs = nodes[pv].outputs[0];
    pv = only_reader(probs);
  }
  // torch.onnx's scaled_dot_product_attention zeroes the probabilities of
  // fully masked rows: Where(IsNaN(P), 0, P). The kernel writes 0 for a row
  // whose softmax sum is 0 or NaN instead.
  bool nan_to_zero = false;
  if (const auto& rd = uses.readers[probs]; pv < 0 && rd.size() == 2 && !uses.is_output[probs]) {
    for (int k = 0; k < 2 && !nan_to_zero; ++k) {
      const int in = rd[k], w = rd[1 - k];
      const ir::Node &isnan = nodes[in], &where = nodes[w];
      if (done[in] || done[w] || !isnan.domain.empty() || !where.domain.empty() || isnan.op_type != "IsNaN" ||
          where.op_type != "Where" || where.inputs.size() != 3 || where.inputs[0] != isnan.outputs[0] ||
          where.inputs[2] != probs || uses.readers[isnan.outputs[0]].size() != 1 || uses.is_output[isnan.outputs[0]])
        continue;
      auto zero = scalar_constant(m, where.inputs[1]);
      if (!zero || *zero != 0.f || m.value(where.outputs[0]).dtype != m.value(probs).dtype) continue;
      out.absorbed.insert(out.absorbed.end(), {in, w});
      probs = where.outputs[0];
      pv = only_reader(probs);
      nan_to_zero = true;
    }
  }
  // Inference Dropout (torch.onnx writes one when the model has a dropout
  // probability; no training_mode input, its mask unread) and Identity pass
  // the probabilities on unchanged.
  auto passes_on = [&](int i) {
    const ir::Node& n = nodes[i];
    if (done[i] || !n.domain.empty() || n.inputs.empty() || n.inputs[0] != probs) return false;
    if (n.op_type == "Identity") return true;
    if (n.op_type != "Dropout" || (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue)) return false;
    return n.outputs.size() < 2 || n.outputs[1] == ir::kNoValue ||
           (uses.readers[n.outputs[1]].empty() && !uses.is_output[n.outputs[1]]);
  };
  while (pv >= 0 && passes_on(pv)) {
    out.absorbed.push_back(pv);
    probs = nodes[pv].outputs[0];
    pv = only_reader(probs);
  }
  if (pv < 0) return skip("the probabilities are read by more than one node, or are a graph output");
  const ir::Node& mm2 = nodes[pv];
  if (done[pv] || !mm2.domain.empty() || mm2.op_type != "MatMul" || mm2.inputs[0] != probs || mm2.inputs[1] == probs)
    return skip("the probabilities' reader is not a MatMul taking them as its left operand");
  out.absorbed.push_back(pv);

  const auto qd = mt.dims(mm1.inputs[0]), kd = mt.dims(mm1.inputs[1]), vd = mt.dims(mm2.inputs[1]);
  const auto od = mt.dims(mm2.outputs[0]);
  if (qd.size() != sd.size() || kd.size() != sd.size() || vd.size() != sd.size() || od.size() != sd.size())
    return skip("Q, K^T, V or the output have another rank");
  for (int64_t i = 0; i + 2 < rank; ++i)
    if (qd[i] != sd[i] || kd[i] != sd[i] || vd[i] != sd[i])
      return skip("Q, K^T and V batch dims differ from the scores' (broadcast batch dims)");
  AttentionSpec s;
  s.dtype = dt;
  s.sq = sd[rank - 2];
  s.skv = sd[rank - 1];
  s.d = qd[rank - 1];
  s.dv = vd[rank - 1];
  s.b = rank == 4 ? sd[0] : 1;
  s.h = sd[rank - 3];
  if (kd[rank - 2] != s.d || vd[rank - 2] != s.skv || s.d > kMaxAttentionHeadDim || s.dv > kMaxAttentionHeadDim ||
      s.sq < 1 || s.skv < 1 || s.d < 1 || s.dv < 1)
    return skip("head dims above 128, or K / V lengths that do not match");
  for (auto v : {mm1.inputs[0], mm1.inputs[1], mm2.inputs[1], mm2.outputs[0]})
    if (m.value(v).dtype != dt) return skip("Q, K^T, V and the output do not share one 16-bit dtype");

  // Q, K and V traced back to what the kernel reads. First with shared
  // producers allowed (a fused QKV matmul's Split, one Transpose read by
  // three Gathers); a traced node is kept only when every reader of every
  // output it has is absorbed here too, else the tracing stops short of
  // shared nodes (each output of a Split must still be written when another
  // node reads one).
  Operand q, k, v;
  std::vector<int> operand_nodes;
  for (bool shared : {true, false}) {
    mt.shared = shared;
    q = trace_operand(mt, mm1.inputs[0], qk);
    k = trace_operand(mt, mm1.inputs[1], qk);
    v = trace_operand(mt, mm2.inputs[1], pv);
    std::set<int> all(out.absorbed.begin(), out.absorbed.end());
    for (const Operand* o : {&q, &k, &v}) all.insert(o->absorbed.begin(), o->absorbed.end());
    bool closed = true;
    for (const Operand* o : {&q, &k, &v})
      for (int j : o->absorbed)
        for (ir::ValueId w : nodes[j].outputs) {
          if (w == ir::kNoValue) continue;
          if (uses.is_output[w]) closed = false;
          for (int r : uses.readers[w]) closed &= all.count(r) > 0;
        }
    if (closed) {
      std::set<int> seen(out.absorbed.begin(), out.absorbed.end());
      for (const Operand* o : {&q, &k, &v})
        for (int j : o->absorbed)
          if (seen.insert(j).second) operand_nodes.push_back(j);
      break;
    }
    if (!shared) return skip("Q, K or V is read through a node whose other outputs other nodes read");
  }
  std::swap(k.strides[rank - 2], k.strides[rank - 1]);  // K^T [.., d, skv] read as K [.., skv, d]
  s.q = view4(q.value, q.strides, q.offset);
  s.k = view4(k.value, k.strides, k.offset);
  s.v = view4(v.value, v.strides, v.offset);
  s.scale = scale * q.scale * k.scale * v.scale;
  out.absorbed.insert(out.absorbed.end(), operand_nodes.begin(), operand_nodes.end());
  if (v.scale != 1.f) return skip("V is scaled");  // a scaled V is not softmax's scale
  s.mask = mask;
  s.mask_dtype = mask_dtype;
  s.mask_scale = mask ? mask_scale : 1.f;
  s.nan_to_zero = nan_to_zero;

  // The output, written through a following Transpose when it is the only reader.
  ir::ValueId o = mm2.outputs[0];
  std::vector<int64_t> ost = strides_of(od);
  const auto& orr = uses.readers[o];
  if (!uses.is_output[o] && orr.size() == 1 && !done[orr[0]] && nodes[orr[0]].domain.empty() &&
      nodes[orr[0]].op_type == "Transpose" && m.value(nodes[orr[0]].outputs[0]).dtype == dt) {
    const ir::Node& t = nodes[orr[0]];
    auto tp = t.ints("perm");
    if (tp.empty()) {
      tp.resize(static_cast<size_t>(rank));
      std::iota(tp.rbegin(), tp.rend(), 0);
    }
    if (static_cast<int64_t>(tp.size()) == rank) {
      auto yst = strides_of(mt.dims(t.outputs[0]));
      for (int64_t j = 0; j < rank; ++j) ost[static_cast<size_t>(tp[j])] = yst[j];  // Y dim j is O dim tp[j]
      o = t.outputs[0];
      out.absorbed.push_back(orr[0]);
    }
  }
  // What is written is dense (the output, or the Transpose's output), so
  // reshapes of it hold the same bytes: write into the last of them, which
  // saves the copy when it is a graph output.
  static const std::set<std::string> reshapes = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  for (;;) {
    const auto& rr = uses.readers[o];
    if (uses.is_output[o] || rr.size() != 1 || done[rr[0]] || !nodes[rr[0]].domain.empty() ||
        !reshapes.count(nodes[rr[0]].op_type) || nodes[rr[0]].inputs[0] != o)
      break;
    out.absorbed.push_back(rr[0]);
    o = nodes[rr[0]].outputs[0];
  }
  s.out = view4(o, ost);
  out.node = gen_attention(L, mm2, s);
  return out;
}

}  // namespace kiln::targets::cuda

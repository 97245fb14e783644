// NHWC layout assignment for 2-D convolution regions (lowering.h: to_nhwc).
//
// Why: cuDNN's 16-bit tensor-core convolutions work on channels-last data
// (given NCHW tensors they convert inside the call; on the H200 ResNet-50 fp16
// batch 32 went from 2.58 to 1.22 ms with this pass, docs/cuda.md),
// and a 1x1 convolution on NHWC data is a plain matmul whose per-channel bias,
// residual Add and Relu are cuBLASLt epilogues. So a region of convolutions
// and the element-wise / pooling nodes between them is switched to NHWC once,
// with one transpose where data enters the region and one where it leaves.
#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>

#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/cuda/compile/body_reads.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

namespace {

/// NCHW -> NHWC and back, as ONNX Transpose perms.
const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};

std::vector<int64_t> permuted(const std::vector<int64_t>& d, const std::vector<int64_t>& perm) {
  std::vector<int64_t> out;
  for (auto p : perm) out.push_back(d[static_cast<size_t>(p)]);
  return out;
}

ir::Shape shape_of(const std::vector<int64_t>& d) {
  ir::Shape s;
  for (auto v : d) s.push_back(ir::Dim{v, ""});
  return s;
}

/// Static rank-4 dims of v, or empty.
std::vector<int64_t> dims4(const ir::Model& m, ir::ValueId v) {
  const ir::Value& val = m.value(v);
  if (!val.shape || !ir::is_static(*val.shape) || val.shape->size() != 4) return {};
  return ir::to_sizes(*val.shape);
}

}  // namespace

Tensor permute_constant(const Tensor& t, const std::vector<int64_t>& perm) {
  const auto& in = t.shape();
  std::vector<int64_t> out = permuted(in, perm);
  Tensor r(t.dtype(), out);
  const size_t es = dtype_size(t.dtype());
  std::vector<int64_t> ist(in.size(), 1);
  for (int64_t d = static_cast<int64_t>(in.size()) - 2; d >= 0; --d) ist[d] = ist[d + 1] * in[d + 1];
  const auto* src = static_cast<const unsigned char*>(t.raw());
  auto* dst = static_cast<unsigned char*>(r.raw());
  std::vector<int64_t> c(out.size(), 0);
  for (int64_t i = 0; i < r.numel(); ++i) {
    int64_t j = 0;
    for (size_t d = 0; d < out.size(); ++d) j += c[d] * ist[static_cast<size_t>(perm[d])];
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(j) * es, es);
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      if (++c[d] < out[d]) break;
      c[d] = 0;
    }
  }
  return r;
}

namespace {

/// Element-wise operators that may join a region: their data inputs are all
/// of their inputs (Expand's shape, Dropout's ratio and CastLike's target
/// are not, so those stay out).
bool elementwise_candidate(const Lowering& L, const ir::Node& n) {
  if (n.op_type == "Expand" || n.op_type == "Dropout" || n.op_type == "CastLike") return false;
  return is_elementwise(L, n);
}

class NhwcPass {
 public:
  NhwcPass(ir::Model& m, bool pointwise_as_matmul) : m_(m), L_{m}, pointwise_as_matmul_(pointwise_as_matmul) {}

  int run() {
    const auto& nodes = m_.main.nodes;
    std::vector<bool> in_region(nodes.size(), false);
    int moved = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      in_region[i] = joins(nodes[i]);
      if (in_region[i]) {
        for (auto v : nodes[i].outputs) nhwc_.insert(v);
        ++moved;
      }
    }
    if (moved == 0) return 0;
    // Readers outside the region (or graph outputs) of each NHWC value. An
    // If / Loop / Scan body reading one from the outer scope is such a
    // reader too: bodies stay NCHW (they are lowered with NCHW options), and
    // without its exit the value's original id would have no producer.
    std::set<ir::ValueId> needs_exit(m_.main.outputs.begin(), m_.main.outputs.end());
    for (size_t i = 0; i < nodes.size(); ++i)
      if (!in_region[i]) {
        for (auto v : nodes[i].inputs) needs_exit.insert(v);
        for_each_body_read(nodes[i], [&](ir::ValueId v) { needs_exit.insert(v); });
      }
    std::vector<ir::Node> out;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!in_region[i]) {
        out.push_back(nodes[i]);
        continue;
      }
      ir::Node n = rewrite(nodes[i], out);
      const auto orig_outputs = nodes[i].outputs;
      out.push_back(std::move(n));
      for (auto v : orig_outputs)
        if (v != ir::kNoValue && needs_exit.count(v)) out.push_back(exit_node(v));
    }
    m_.main.nodes = std::move(out);
    return moved;
  }

 private:
  ir::Model& m_;
  Lowering L_;
  bool pointwise_as_matmul_;  ///< 1x1 unstrided convolutions become MatMuls (cuBLASLt); else cuDNN NHWC Convs
  std::set<ir::ValueId> nhwc_;                  ///< original ids of values the region produces
  std::map<ir::ValueId, ir::ValueId> renamed_;  ///< original id -> its NHWC value
  std::map<ir::ValueId, ir::ValueId> const_;    ///< constant -> permuted constant
  std::map<ir::ValueId, std::vector<const ir::Node*>> readers_;  ///< main-graph readers (back_to_nchw; made once)

  bool is_nhwc(ir::ValueId v) const { return v != ir::kNoValue && nhwc_.count(v) != 0; }

  bool float_dtype(ir::ValueId v) const {
    DType t = m_.value(v).dtype;
    return t == DType::f32 || t == DType::f16 || t == DType::bf16;
  }

  /// A 2-D convolution cuDNN runs in NHWC (its bias already split off).
  bool conv_ok(const ir::Node& n) const {
    if (n.op_type != "Conv" || n.inputs.size() < 2 || (n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue)) return false;
    if (dims4(m_, n.inputs[0]).empty() || dims4(m_, n.inputs[1]).empty() || dims4(m_, n.outputs[0]).empty()) return false;
    return m_.value(n.inputs[1]).constant && float_dtype(n.inputs[0]);
  }

  /// Whether every data input of element-wise node n can be given in NHWC:
  /// a region value, a constant (permuted here), a one-element value, or any
  /// other rank-4 value (transposed on entry; both sides permuted alike, so
  /// broadcasting keeps its meaning).
  bool inputs_ok(const ir::Node& n) const {
    auto out = dims4(m_, n.outputs[0]);
    if (out.empty()) return false;
    bool any = false;
    for (auto v : n.inputs) {
      if (v == ir::kNoValue) continue;
      if (is_nhwc(v)) {
        any = true;
        continue;
      }
      const ir::Value& val = m_.value(v);
      if (!val.shape || !ir::is_static(*val.shape)) return false;
      auto d = ir::to_sizes(*val.shape);
      if (val.constant && d.size() <= 4) continue;
      if (numel(d) == 1) continue;
      if (d.size() != 4) return false;
    }
    return any;
  }

  /// NCHW axis `a` of a rank-4 value -> its NHWC position.
  static int64_t nhwc_axis(int64_t a) {
    static const int64_t map[4] = {0, 3, 1, 2};
    return map[a];
  }

  /// Concat (every input rank 4, one of them a region value) and Split (its
  /// data input a region value): the same node with its axis moved.
  bool axis_node_ok(const ir::Node& n) const {
    for (auto v : n.outputs)
      if (v == ir::kNoValue || dims4(m_, v).empty()) return false;
    if (n.op_type == "Split") return is_nhwc(n.inputs[0]);
    bool any = false;
    for (auto v : n.inputs) {
      if (v == ir::kNoValue || dims4(m_, v).empty()) return false;
      any |= is_nhwc(v);
    }
    return any;
  }

  bool joins(const ir::Node& n) {
    if (!n.domain.empty()) return false;
    if (n.op_type == "Conv") return conv_ok(n);
    if (n.op_type == "MaxPool" || n.op_type == "AveragePool") {
      if (n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) return false;
      return is_nhwc(n.inputs[0]) && !dims4(m_, n.outputs[0]).empty();
    }
    if (n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool")
      return is_nhwc(n.inputs[0]) && !dims4(m_, n.outputs[0]).empty();
    if (n.op_type == "Concat" || n.op_type == "Split") return axis_node_ok(n);
    if (n.op_type == "Transpose") return back_to_nchw(n);
    if (n.outputs.size() != 1 || !elementwise_candidate(L_, n)) return false;
    return inputs_ok(n);
  }

  /// A model's own Transpose(perm 0,3,1,2) of a rank-4 float value with a
  /// reader that may join the region: its input already holds the NHWC
  /// layout of its output, so it joins as a free Identity (ConvNeXt's block
  /// ends Linear -> Transpose(0,3,1,2) -> layer scale Mul -> residual Add ->
  /// the next depthwise Conv: without this, every block left and re-entered
  /// the region through two transposes).
  bool back_to_nchw(const ir::Node& n) {
    if (n.outputs.size() != 1 || n.inputs.empty() || n.ints("perm") != kToNchw || !float_dtype(n.inputs[0]) ||
        dims4(m_, n.inputs[0]).empty() || dims4(m_, n.outputs[0]).empty())
      return false;
    if (readers_.empty())
      for (const auto& r : m_.main.nodes)
        for (auto v : r.inputs)
          if (v != ir::kNoValue) readers_[v].push_back(&r);
    auto it = readers_.find(n.outputs[0]);
    if (it == readers_.end()) return false;
    for (const ir::Node* r : it->second)
      if (r->domain.empty() && (r->op_type == "Conv" || (r->outputs.size() == 1 && elementwise_candidate(L_, *r))))
        return true;
    return false;
  }

  ir::ValueId add_transpose(ir::ValueId v, const std::vector<int64_t>& perm, ir::ValueId dst, std::vector<ir::Node>& out,
                            const std::string& suffix) {
    ir::Node t;
    t.op_type = "Transpose";
    t.name = m_.value(v).name + suffix;
    t.opset = m_.opset;
    t.attrs["perm"] = perm;
    t.inputs = {v};
    t.outputs = {dst};
    out.push_back(std::move(t));
    return dst;
  }

  ir::ValueId new_value_like(ir::ValueId v, const std::vector<int64_t>& dims, const std::string& suffix) {
    ir::Value nv = m_.value(v);
    nv.name += suffix;
    nv.constant.reset();
    nv.shape = shape_of(dims);
    return m_.add_value(nv);
  }

  /// The NHWC value for input v of a region node, entering it if needed.
  ir::ValueId nhwc_input(ir::ValueId v, std::vector<ir::Node>& out) {
    if (v == ir::kNoValue) return v;
    if (auto it = renamed_.find(v); it != renamed_.end()) return it->second;
    const ir::Value& val = m_.value(v);
    auto d = ir::to_sizes(*val.shape);
    if (val.constant) {
      if (auto it = const_.find(v); it != const_.end()) return it->second;
      std::vector<int64_t> padded(4 - d.size(), 1);
      padded.insert(padded.end(), d.begin(), d.end());
      ir::Value nv = val;
      nv.name += "_nhwc";
      nv.constant = permute_constant(val.constant->reshaped(padded), kToNhwc);
      nv.shape = shape_of(nv.constant->shape());
      return const_[v] = m_.add_value(nv);
    }
    if (numel(d) == 1) return v;
    ir::ValueId t = new_value_like(v, permuted(d, kToNhwc), "_nhwc");
    renamed_[v] = t;
    return add_transpose(v, kToNhwc, t, out, "_to_nhwc");
  }

  /// The node reading NHWC values and writing new NHWC outputs.
  ir::Node rewrite(const ir::Node& orig, std::vector<ir::Node>& out) {
    ir::Node n = orig;
    if (n.op_type == "Conv") return rewrite_conv(n, out);
    if (n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool") return rewrite_global_pool(n, out);
    if (n.op_type == "Transpose") {  // back_to_nchw: the input is the output's NHWC data
      n.op_type = "Identity";
      n.attrs.erase("perm");
      n.outputs = {nhwc_output(n.outputs[0])};
      return n;
    }
    if (n.op_type == "Split") {  // only the data input is a tensor in the layout
      n.inputs[0] = nhwc_input(n.inputs[0], out);
      n.attrs["axis"] = nhwc_axis(norm_axis(n, n.i("axis", 0), 4));
      for (auto& v : n.outputs) v = nhwc_output(v);
      return n;
    }
    if (n.op_type == "Concat") n.attrs["axis"] = nhwc_axis(norm_axis(n, n.i("axis"), 4));
    for (auto& v : n.inputs) v = nhwc_input(v, out);
    if (n.op_type == "MaxPool" || n.op_type == "AveragePool") n.attrs["kiln_nhwc"] = int64_t{1};
    for (auto& v : n.outputs) v = nhwc_output(v);
    return n;
  }

  ir::ValueId nhwc_output(ir::ValueId v) {
    if (v == ir::kNoValue) return v;
    ir::ValueId t = new_value_like(v, permuted(dims4(m_, v), kToNhwc), "_nhwc");
    renamed_[v] = t;
    return t;
  }

  /// GlobalAveragePool / GlobalMaxPool of [N,H,W,C] -> ReduceMean /
  /// ReduceMax over axes 1, 2 with keepdims: [N,1,1,C], still in the region
  /// (a squeeze-and-excitation branch stays channels-last).
  ir::Node rewrite_global_pool(ir::Node n, std::vector<ir::Node>& out) {
    ir::Node r;
    r.op_type = n.op_type == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax";
    r.name = n.name;
    r.opset = n.opset;
    r.attrs["keepdims"] = int64_t{1};
    // axes as an input whatever the opset: the IR's one form (onnx/parsers/reduce.cpp).
    Tensor t(DType::i64, {2});
    t.data<int64_t>()[0] = 1, t.data<int64_t>()[1] = 2;
    ir::Value av;
    av.name = n.name + "_nhwc_axes";
    av.dtype = DType::i64;
    av.shape = shape_of({2});
    av.constant = t;
    r.inputs = {nhwc_input(n.inputs[0], out), m_.add_value(av)};
    r.outputs = {nhwc_output(n.outputs[0])};
    return r;
  }

  /// Conv -> NHWC Conv (filter as [K, R, S, C/group]), or, for a 1x1
  /// unstrided unpadded group-1 one, MatMul(x [N,H,W,C], w^T [C,K]).
  ir::Node rewrite_conv(ir::Node n, std::vector<ir::Node>& out) {
    ir::ValueId x = nhwc_input(n.inputs[0], out);
    const ir::Value& wv = m_.value(n.inputs[1]);
    auto w = ir::to_sizes(*wv.shape);
    bool pointwise = w[2] == 1 && w[3] == 1 && n.i("group", 1) == 1;
    for (auto v : n.ints("strides", {1, 1})) pointwise &= v == 1;
    for (auto v : n.ints("pads", {0, 0, 0, 0})) pointwise &= v == 0;
    pointwise &= n.s("auto_pad", "NOTSET") == "NOTSET";
    pointwise &= pointwise_as_matmul_;
    ir::Value nw = wv;
    nw.name += pointwise ? "_kc_t" : "_krsc";
    if (pointwise) {
      nw.constant = permute_constant(wv.constant->reshaped({w[0], w[1]}), {1, 0});
    } else {
      nw.constant = permute_constant(*wv.constant, kToNhwc);
    }
    nw.shape = shape_of(nw.constant->shape());
    ir::ValueId wid = m_.add_value(nw);
    ir::ValueId y = nhwc_output(n.outputs[0]);
    if (pointwise) {
      ir::Node mm;
      mm.op_type = "MatMul";
      mm.name = n.name;
      mm.opset = n.opset;
      mm.inputs = {x, wid};
      mm.outputs = {y};
      return mm;
    }
    n.inputs = {x, wid};
    n.outputs = {y};
    n.attrs["kiln_nhwc"] = int64_t{1};
    return n;
  }

  /// The NCHW value `v` again, from its NHWC one: a Reshape when the
  /// transpose only moves unit dims (no data moves), else a Transpose.
  ir::Node exit_node(ir::ValueId v) {
    ir::ValueId src = renamed_.at(v);
    auto d = dims4(m_, v);  // NCHW dims
    ir::Node t;
    t.name = m_.value(v).name + "_to_nchw";
    t.opset = m_.opset;
    t.outputs = {v};
    if (d[1] == 1 || (d[2] == 1 && d[3] == 1)) {
      Tensor shape(DType::i64, {4});
      for (int k = 0; k < 4; ++k) shape.data<int64_t>()[k] = d[static_cast<size_t>(k)];
      ir::Value sv;
      sv.name = t.name + "_shape";
      sv.dtype = DType::i64;
      sv.shape = shape_of({4});
      sv.constant = shape;
      t.op_type = "Reshape";
      t.inputs = {src, m_.add_value(sv)};
    } else {
      t.op_type = "Transpose";
      t.attrs["perm"] = kToNchw;
      t.inputs = {src};
    }
    return t;
  }
};

}  // namespace

int to_nhwc(ir::Model& m, bool pointwise_as_matmul) {
  int moved = NhwcPass(m, pointwise_as_matmul).run();
  if (moved) log().debug("cuda: {} node(s) run in NHWC", moved);
  return moved;
}

int merge_layout_transposes(ir::Model& m) {
  // simplify_algebra merges a chain into one Transpose in a round; an
  // identity permutation is removed in the next.
  int merged = 0;
  for (int round = 0, r = 1; r && round < 4; ++round) merged += r = passes::simplify_algebra(m);
  if (merged) log().debug("cuda: {} rewrite(s) after the NHWC layout (transpose chains merged)", merged);
  return merged;
}

}  // namespace kiln::targets::cuda

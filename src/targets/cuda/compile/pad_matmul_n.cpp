// Matmuls whose rows are not 16-byte aligned computed with a padded n and
// compacted by a Slice (issue #20; lowering.h: pad_matmul_n).
//
// Why: cuBLASLt offers its vectorized kernels only when every matrix's
// leading dimension is 16-byte aligned. GPT-2's LM head (fp16, m 4096, k 768,
// n 50257: odd) ran 2.5 ms on the H200 where an aligned matmul of that size
// takes about 0.6 ms. Storing B transposed measured slower (lower_gemm.cpp).
// Padding n to n_pad with zero columns of B makes B's and D's rows aligned;
// the compaction pass moves m * n elements once more, which pays off only
// for matmuls large enough (the kPadN* rules in lowering.h).
//
// A graph rewrite before the lowering, in ONNX terms (padded constants and a
// standard Slice), so the artifact format is unchanged: lower_gemm lowers
// the padded MatMul / Gemm with its bias and Relu / Gelu epilogues as
// before, and the element-wise grouping joins the Slice with a Cast to
// float32 after it (is_gatherable_slice) into one kernel.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "support/log.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::targets::cuda {

namespace {

enum class PadMode { off, sized, all };

/// KILN_CUDA_GEMM_PAD_N: "0" off, "1" every matmul it can, else by size.
PadMode pad_mode() {
  const char* e = std::getenv("KILN_CUDA_GEMM_PAD_N");
  if (e && std::string(e) == "0") return PadMode::off;
  if (e && std::string(e) == "1") return PadMode::all;
  return PadMode::sized;
}

bool of_type(const ir::Model& m, ir::ValueId v, DType t) { return v != ir::kNoValue && m.value(v).dtype == t; }

/// The static dims of `v`, or nullopt.
std::optional<std::vector<int64_t>> dims_of(const ir::Model& m, ir::ValueId v) {
  if (v == ir::kNoValue) return std::nullopt;
  const ir::Value& val = m.value(v);
  if (!val.shape || !ir::is_static(*val.shape)) return std::nullopt;
  return ir::to_sizes(*val.shape);
}

/// A constant of dtype t holding n elements with n last ([n], [1, n], ...):
/// what lower_gemm takes as a bias.
bool bias_vector(const ir::Model& m, ir::ValueId v, int64_t n, DType t) {
  if (v == ir::kNoValue || !m.value(v).constant || m.value(v).dtype != t) return false;
  auto d = dims_of(m, v);
  return d && !d->empty() && d->back() == n && numel(*d) == n;
}

/// `t` with dim `axis` grown to `to`, the new entries zero.
Tensor pad_dim(const Tensor& t, size_t axis, int64_t to) {
  std::vector<int64_t> shape = t.shape();
  const int64_t from = shape[axis];
  shape[axis] = to;
  Tensor out(t.dtype(), shape);
  std::memset(out.raw(), 0, out.nbytes());
  int64_t outer = 1, inner = static_cast<int64_t>(dtype_size(t.dtype()));
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * to * inner, src + o * from * inner, static_cast<size_t>(from * inner));
  return out;
}

/// A copy of value `v` named `name` with dim `axis` (of its shape) `to`:
/// the constant padded with zeros when it has one.
ir::ValueId padded_value(ir::Model& m, ir::ValueId v, size_t axis, int64_t to, const std::string& name) {
  ir::Value pv = m.value(v);
  pv.name = name;
  if (pv.constant) pv.constant = pad_dim(*pv.constant, axis, to);
  (*pv.shape)[axis] = ir::Dim{to, ""};
  return m.add_value(std::move(pv));
}

ir::ValueId i64_constant(ir::Model& m, const std::string& name, int64_t x) {
  ir::Value c;
  c.name = name;
  c.dtype = DType::i64;
  c.shape = ir::Shape{ir::Dim{1, ""}};
  c.constant = Tensor::from_bytes(DType::i64, {1}, &x, sizeof x);
  return m.add_value(std::move(c));
}

/// One matmul to pad: its node, which dim of B is n, the padded n, and the
/// nodes after it that move before the compaction (a bias Add, a Relu /
/// Gelu: those lower_gemm fuses).
struct PadPlan {
  int node = -1;
  size_t b_axis = 0;
  int64_t m = 0, n = 0, k = 0, n_pad = 0;
  bool gemm_bias = false;  ///< the Gemm's C is a bias vector (padded too)
  int bias_add = -1;       ///< a following Add of a bias vector
  std::vector<int> chain;  ///< the matmul then the nodes moved before the compaction, in order
};

/// The plan for main-graph node `i`, or nullopt when it is not padded
/// (the reasons are in lowering.h's pad_matmul_n).
std::optional<PadPlan> plan_for(const ir::Model& m, int i, const Uses& uses, PadMode mode) {
  const ir::Node& nd = m.main.nodes[i];
  if (!nd.domain.empty() || (nd.op_type != "MatMul" && nd.op_type != "Gemm") || nd.inputs.size() < 2 ||
      nd.outputs.size() != 1)
    return std::nullopt;
  const DType dt = m.value(nd.inputs[0]).dtype;
  if ((dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) || !of_type(m, nd.inputs[1], dt) ||
      !of_type(m, nd.outputs[0], dt) || !m.value(nd.inputs[1]).constant)
    return std::nullopt;
  auto a = dims_of(m, nd.inputs[0]), b = dims_of(m, nd.inputs[1]), y = dims_of(m, nd.outputs[0]);
  if (!a || !b || !y || a->empty() || b->size() < 2 || y->empty()) return std::nullopt;
  PadPlan p;
  p.node = i;
  int64_t lda = 0;  // A's row length
  bool trans_b = false;
  if (nd.op_type == "MatMul") {
    // B shared by every batch of A (lower_gemm folds A's batches into m);
    // a B per batch (a constant with batch dims) is rare and left alone.
    if (numel(std::vector<int64_t>(b->begin(), b->end() - 2)) != 1) return std::nullopt;
    p.k = a->back();
    p.n = b->back();
    p.m = p.k > 0 ? numel(*a) / p.k : 0;
    p.b_axis = b->size() - 1;
    lda = p.k;
  } else {
    if (a->size() != 2 || b->size() != 2) return std::nullopt;
    const bool trans_a = nd.i("transA", 0) != 0;
    trans_b = nd.i("transB", 0) != 0;
    p.m = trans_a ? (*a)[1] : (*a)[0];
    p.k = trans_a ? (*a)[0] : (*a)[1];
    p.n = trans_b ? (*b)[0] : (*b)[1];
    p.b_axis = trans_b ? 0 : 1;
    lda = trans_a ? p.m : p.k;
    if (nd.inputs.size() > 2 && nd.inputs[2] != ir::kNoValue) {
      // A bias vector is padded; a full C (has_c), a scalar C or beta 0 are left alone.
      if (nd.f("beta", 1.f) == 0.f || !bias_vector(m, nd.inputs[2], p.n, dt)) return std::nullopt;
      p.gemm_bias = true;
    }
  }
  if (y->back() != p.n || p.m <= 0 || p.k <= 0 || p.n <= 0) return std::nullopt;
  const int64_t e = static_cast<int64_t>(dtype_size(dt)), align = 16 / e;
  if (p.n % align == 0) return std::nullopt;  // aligned already
  // Padding n aligns B's and D's rows; with A's rows (or B's rows of k, transB)
  // misaligned cuBLASLt still has no vectorized kernel.
  if ((lda * e) % 16 != 0 || (trans_b && (p.k * e) % 16 != 0)) return std::nullopt;
  p.n_pad = (p.n + align - 1) / align * align;
  if (mode == PadMode::sized &&
      (p.m * p.n * p.k < kPadNMinMacs || p.k < kPadNMinK || (p.n_pad - p.n) * kPadNMaxWaste > p.n))
    return std::nullopt;
  // The epilogue chain, as lower_gemm takes it (lower_gemm.cpp).
  auto single_reader = [&](ir::ValueId v) {
    return uses.is_output[v] || uses.readers[v].size() != 1 ? -1 : uses.readers[v][0];
  };
  auto add_other = [&](int j, ir::ValueId v) -> ir::ValueId {
    const ir::Node& add = m.main.nodes[j];
    if (!add.domain.empty() || add.op_type != "Add" || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1])
      return ir::kNoValue;
    return add.inputs[0] == v ? add.inputs[1] : add.inputs[0];
  };
  ir::ValueId v = nd.outputs[0];
  p.chain = {i};
  if (!p.gemm_bias)
    if (int j = single_reader(v); j >= 0) {
      ir::ValueId other = add_other(j, v), out = m.main.nodes[j].outputs[0];
      if (other != ir::kNoValue && bias_vector(m, other, p.n, dt) && of_type(m, out, dt) && dims_of(m, out) == y) {
        p.bias_add = j;
        p.chain.push_back(j);
        v = out;
      }
    }
  // A residual Add lower_gemm would fuse as C (D's layout): not padded.
  if (int j = single_reader(v); j >= 0) {
    ir::ValueId other = add_other(j, v), out = m.main.nodes[j].outputs[0];
    if (other != ir::kNoValue && of_type(m, other, dt) && dims_of(m, other) == y && of_type(m, out, dt) &&
        dims_of(m, out) == y)
      return std::nullopt;
  }
  if (int j = single_reader(v); j >= 0) {
    const ir::Node& act = m.main.nodes[j];
    const bool fused = act.domain.empty() && of_type(m, act.outputs[0], dt) &&
                       (act.op_type == "Relu" ||
                        (act.op_type == "Gelu" && (act.s("approximate", "none") == "tanh" || is_half(dt))));
    if (fused) p.chain.push_back(j);
  }
  return p;
}

/// Padded copies of constants already made: (constant, its dim padded, n_pad) -> copy.
using PaddedConstants = std::map<std::tuple<ir::ValueId, size_t, int64_t>, ir::ValueId>;

/// Applies `p`: padded B (and bias; one copy per constant however many
/// matmuls read it, `made`), the chain's outputs padded, and the Slice
/// writing the chain's last original value (returned, to be emitted right
/// after the chain's last node).
ir::Node apply(ir::Model& m, const PadPlan& p, PaddedConstants& made) {
  ir::Node& nd = m.main.nodes[p.node];
  const std::string tag = fmt::format("_pad_n{}", p.n_pad);
  auto pad_constant = [&](ir::ValueId& c, size_t axis) {
    auto [it, fresh] = made.try_emplace({c, axis, p.n_pad}, ir::kNoValue);
    if (fresh) it->second = padded_value(m, c, axis, p.n_pad, m.value(c).name + tag);
    c = it->second;
  };
  pad_constant(nd.inputs[1], p.b_axis);
  auto pad_bias = [&](ir::ValueId& bias) { pad_constant(bias, m.value(bias).shape->size() - 1); };
  if (p.gemm_bias) pad_bias(nd.inputs[2]);
  if (p.bias_add >= 0) {
    ir::Node& add = m.main.nodes[p.bias_add];
    const ir::ValueId into = m.main.nodes[p.chain[0]].outputs[0];
    pad_bias(add.inputs[add.inputs[0] == into ? 1 : 0]);
  }
  ir::ValueId prev = ir::kNoValue, padded = ir::kNoValue;  // the chain's value before and after padding
  for (int c : p.chain) {
    ir::Node& cn = m.main.nodes[c];
    for (auto& in : cn.inputs)
      if (in == prev) in = padded;
    prev = cn.outputs[0];
    padded = padded_value(m, prev, m.value(prev).shape->size() - 1, p.n_pad, m.value(prev).name + tag);
    cn.outputs[0] = padded;
  }
  ir::Node slice;
  slice.op_type = "Slice";
  slice.name = nd.name + "_compact";
  slice.opset = nd.opset;
  const std::string base = m.value(prev).name + "_compact";
  slice.inputs = {padded, i64_constant(m, base + "_starts", 0), i64_constant(m, base + "_ends", p.n),
                  i64_constant(m, base + "_axes", -1)};
  slice.outputs = {prev};
  return slice;
}

}  // namespace

int pad_matmul_n(ir::Model& m) {
  const PadMode mode = pad_mode();
  if (mode == PadMode::off) return 0;
  const Uses uses = uses_of(m);
  std::vector<PadPlan> plans;
  for (int i = 0; i < static_cast<int>(m.main.nodes.size()); ++i)
    if (auto p = plan_for(m, i, uses, mode)) plans.push_back(std::move(*p));
  if (plans.empty()) return 0;
  std::map<int, ir::Node> after;  // node index -> the Slice emitted after it
  PaddedConstants made;
  for (const PadPlan& p : plans) {
    after.emplace(p.chain.back(), apply(m, p, made));
    const ir::Node& nd = m.main.nodes[p.node];
    log().debug("cuda: {} (m {}, n {}, k {}, {}) computes n {} with B padded, then a compaction Slice{}", nd.label(),
                p.m, p.n, p.k, dtype_name(m.value(nd.inputs[0]).dtype), p.n_pad,
                p.chain.size() > 1 ? fmt::format(" after its {} fused epilogue node(s)", p.chain.size() - 1) : "");
  }
  std::vector<ir::Node> out;
  out.reserve(m.main.nodes.size() + after.size());
  for (int i = 0; i < static_cast<int>(m.main.nodes.size()); ++i) {
    out.push_back(std::move(m.main.nodes[i]));
    if (auto it = after.find(i); it != after.end()) out.push_back(std::move(it->second));
  }
  m.main.nodes = std::move(out);
  return static_cast<int>(plans.size());
}

}  // namespace kiln::targets::cuda

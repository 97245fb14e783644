#include "runtime/sequence_prover.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "ops/util.h"
#include "runtime/batch_prover.h"
#include "runtime/pad_region.h"
#include "support/error.h"
#include "support/log.h"

namespace kiln {

namespace {

using namespace pad_region;

/// Why the proof stops (caught in sequence_padding_safe).
struct Refused {
  std::string why;
};
template <class... A>
[[noreturn]] void refuse(fmt::format_string<A...> f, A&&... a) {
  throw Refused{fmt::format(f, std::forward<A>(a)...)};
}

/// The abstract value of one tensor.
struct State {
  std::vector<int> axes;  ///< axes carrying the dim, ascending
  std::vector<Kind> pad;  ///< per carried axis: the elements whose index there is padding
  Kind real = kFinite;    ///< the elements whose index on every carried axis is real
  bool clean = true;      ///< the real region equals the unpadded run's
  bool sized = false;     ///< a constant computed from the dim's size that does not carry it
  std::string unclean_at; ///< when !clean: the node that first made it so, and why

  int slot(int axis) const {
    for (size_t i = 0; i < axes.size(); ++i)
      if (axes[i] == axis) return static_cast<int>(i);
    return -1;
  }
  Kind all() const {
    Kind k = real;
    for (auto p : pad) k = join(k, p);
    return k;
  }
};

int64_t product(const std::vector<int64_t>& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) p *= s[i];
  return p;
}

/// Interprets the bound pair's nodes in order (a: the dim at kProbeSmall).
class Prover {
 public:
  explicit Prover(const BoundPair& p) : a_(p.a), b_(p.b) {
    for (auto id : a_.main.inputs) inputs_.insert(id);
  }

  /// The largest size the dim may be padded to (an index bounded by it stays
  /// within its table up to there); INT64_MAX when nothing bounds it.
  int64_t cap() const { return cap_; }

  void run(const std::vector<int>& output_axes) {
    for (const ir::Node& n : a_.main.nodes) node(n);
    for (size_t i = 0; i < a_.main.outputs.size(); ++i) {
      const ir::ValueId id = a_.main.outputs[i];
      const State& s = get(id);
      const int want = i < output_axes.size() ? output_axes[i] : -1;
      const std::vector<int> expect = want < 0 ? std::vector<int>{} : std::vector<int>{want};
      if (s.axes != expect)
        refuse("graph output '{}' carries the dim at axes [{}], its interface at [{}] (the runtime slices by the "
               "interface)", a_.value(id).name, fmt::join(s.axes, ","), fmt::join(expect, ","));
      if (!s.clean)
        refuse("graph output '{}' depends on padded positions: {}", a_.value(id).name, s.unclean_at);
    }
  }

 private:
  const ir::Model& a_;
  const ir::Model& b_;
  std::set<ir::ValueId> inputs_;
  std::map<ir::ValueId, State> st_;
  int64_t cap_ = std::numeric_limits<int64_t>::max();

  std::vector<int64_t> sizes(ir::ValueId v) const {
    const ir::Value& val = a_.value(v);
    if (!val.shape || !ir::is_static(*val.shape)) refuse("value '{}' has no static shape once bound", val.name);
    return ir::to_sizes(*val.shape);
  }

  /// The axes whose size differs between the two programs; any other
  /// difference (a multiple or a part of the dim) stops the proof.
  std::vector<int> carried(ir::ValueId v) const {
    const ir::Value& va = a_.value(v);
    const ir::Value& vb = b_.value(v);
    if (!va.shape || !vb.shape || !ir::is_static(*va.shape) || !ir::is_static(*vb.shape) ||
        va.shape->size() != vb.shape->size())
      refuse("value '{}' has no static shape once bound (a data-dependent size)", va.name);
    std::vector<int> axes;
    for (size_t i = 0; i < va.shape->size(); ++i) {
      const int64_t x = (*va.shape)[i].value, y = (*vb.shape)[i].value;
      if (x == y) continue;
      if (x != kProbeSmall || y != kProbeLarge)
        refuse("value '{}' axis {} is {} / {} for the dim at {} / {}: it merges the dim with another axis",
               va.name, i, x, y, kProbeSmall, kProbeLarge);
      axes.push_back(static_cast<int>(i));
    }
    return axes;
  }

  /// What a constant holds: one value, or finite values within their min and max.
  static Kind tensor_kind(const Tensor& t) {
    if (t.numel() == 0) return kFinite;
    if (dtype_size(t.dtype()) == 0 || dtype_is_float8(t.dtype())) return kAny;
    const bool f32 = t.dtype() == DType::f32;
    auto at = [&](int64_t i) { return f32 ? static_cast<double>(t.data<float>()[i]) : ops::element_as_double(t, i); };
    double lo = at(0), hi = lo;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = at(i);
      if (!std::isfinite(v)) return kAny;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    return finite_in({lo, 0, hi, 0});
  }

  /// A constant that differs between the programs and carries the dim: its
  /// smaller copy must be a prefix of the larger (a position table sliced to
  /// the length); what lies beyond is the padded region.
  State prefix_constant(ir::ValueId v, std::vector<int> axes) const {
    const Tensor& ta = *a_.value(v).constant;
    const Tensor& tb = *b_.value(v).constant;
    if (ta.dtype() != tb.dtype() || dtype_size(ta.dtype()) == 0)
      refuse("constant '{}' changes dtype with the dim's size", a_.value(v).name);
    const std::vector<int64_t>& sb = tb.shape();
    const std::vector<int64_t> strides_a = ops::strides_of(ta.shape());
    State s;
    s.axes = axes;
    s.pad.assign(axes.size(), Kind{Tag::konst, std::nan("")});
    std::vector<bool> started(axes.size(), false);
    std::vector<int64_t> idx(sb.size(), 0);
    for (int64_t i = 0; i < tb.numel(); ++i) {
      int64_t r = i, off_a = 0;
      bool real = true;
      for (size_t d = sb.size(); d-- > 0;) {
        idx[d] = r % sb[d];
        r /= sb[d];
      }
      for (size_t d = 0; d < sb.size(); ++d) {
        if (idx[d] >= ta.shape()[d]) real = false;
        off_a += std::min(idx[d], ta.shape()[d] - 1) * strides_a[d];
      }
      const double vb = ops::element_as_double(tb, i);
      if (real) {
        if (ops::element_as_double(ta, off_a) != vb && !(std::isnan(vb) && std::isnan(ops::element_as_double(ta, off_a))))
          refuse("constant '{}' for the dim at {} is not a prefix of the one at {} (it depends on the size, not "
                 "just on the position)", a_.value(v).name, kProbeSmall, kProbeLarge);
        continue;
      }
      const Kind k = std::isfinite(vb) ? konst(vb) : kAny;
      for (size_t j = 0; j < axes.size(); ++j)
        if (idx[static_cast<size_t>(axes[j])] >= kProbeSmall) {
          s.pad[j] = started[j] ? join(s.pad[j], k) : k;
          started[j] = true;
        }
    }
    s.real = tensor_kind(ta);
    return s;
  }

  const State& get(ir::ValueId v) {
    auto it = st_.find(v);
    if (it != st_.end()) return it->second;
    const ir::Value& val = a_.value(v);
    State s;
    if (val.constant) {
      if (constants_differ(a_, b_, v)) {
        std::vector<int> axes = carried(v);
        if (!axes.empty()) {
          s = prefix_constant(v, axes);
        } else {
          s.sized = true;
          s.clean = false;
          s.unclean_at = fmt::format("constant '{}' is computed from the dim's size", val.name);
        }
      } else {
        s.axes = carried(v);
        if (!s.axes.empty()) refuse("constant '{}' has the dim's size but the same bytes", val.name);
        s.real = tensor_kind(*val.constant);
      }
    } else if (inputs_.count(v)) {
      s.axes = carried(v);
      s.pad.assign(s.axes.size(), konst(0));  // the runtime pads every input with zeros
    } else {
      refuse("value '{}' is read before any node writes it", val.name);
    }
    return st_.emplace(v, std::move(s)).first->second;
  }

  State& put(ir::ValueId v, State s) {
    const std::vector<int> want = carried(v);
    if (s.axes != want)
      refuse("value '{}': the prover placed the dim at axes [{}], the bound shapes at [{}]", a_.value(v).name,
             fmt::join(s.axes, ","), fmt::join(want, ","));
    return st_[v] = std::move(s);
  }

  /// Clean-ness of a result from its inputs (the first unclean one's reason).
  static void inherit(State& out, const std::vector<const State*>& in) {
    for (auto* s : in)
      if (s && !s->clean && out.clean) {
        out.clean = false;
        out.unclean_at = s->unclean_at;
      }
  }
  static void taint(State& out, const ir::Node& n, const std::string& why) {
    if (!out.clean) return;
    out.clean = false;
    out.unclean_at = fmt::format("{}: {}", n.label(), why);
  }

  void node(const ir::Node& n) {
    std::vector<const State*> in;
    bool carries = false, unclean = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] == ir::kNoValue) {
        in.push_back(nullptr);
        continue;
      }
      const State& s = get(n.inputs[i]);
      in.push_back(&s);
      carries |= !s.axes.empty();
      unclean |= !s.clean;
      if (s.sized && !size_slot(n, i))
        refuse("{} reads constant '{}' (computed from the dim's size) as input {}: padding would change it",
               n.label(), a_.value(n.inputs[i]).name, i);
    }
    for (auto& [k, a] : n.attrs)
      if (std::holds_alternative<std::shared_ptr<ir::Graph>>(a) && (carries || unclean))
        refuse("{} has a subgraph reading padded values", n.label());
    if (!(n.domain.empty() || n.domain == "ai.onnx") && carries) refuse("{} ({}) is not known to the prover", n.label(), n.domain);
    if (!carries && sized_free(n, in)) {
      // Nothing padded comes in: the result is the unpadded run's (or as unclean as its inputs).
      for (auto o : n.outputs)
        if (o != ir::kNoValue) {
          State s;
          inherit(s, in);
          put(o, std::move(s));
        }
      return;
    }
    const std::string& op = n.op_type;
    if (elementwise_op(op)) return elementwise(n, in);
    if (op == "MatMul") return matmul(n, *in.at(0), *in.at(1));
    if (op == "Gemm") return gemm(n, in);
    if (op == "Softmax") return softmax(n, *in.at(0));
    if (op == "LayerNormalization") return layer_norm(n, in);
    if (op.rfind("Reduce", 0) == 0) return reduce(n, in);
    if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" || op == "Flatten") return regroup(n, *in.at(0));
    if (op == "Transpose") return transpose(n, *in.at(0));
    if (op == "Expand") return expand(n, *in.at(0));
    if (op == "Concat") return concat(n, in);
    if (op == "Split") return split(n, *in.at(0));
    if (op == "Slice") return slice(n, in);
    if (op == "Gather") return gather(n, *in.at(0), *in.at(1));
    if (op == "GatherElements") return gather_elements(n, *in.at(0), *in.at(1));
    if (op == "CumSum") return cumsum(n, in);
    if (op == "Range") return range(n);
    if (op == "ConstantOfShape") return constant_of_shape(n);
    refuse("{} is not known to keep padded positions from the real ones (it may mix positions along the dim)",
           n.label());
  }

  /// Inputs through which a constant computed from the dim's size may come (the rules check their use).
  static bool size_slot(const ir::Node& n, size_t i) {
    const std::string& op = n.op_type;
    return ((op == "Reshape" || op == "Expand") && i == 1) || (op == "Slice" && i == 2) ||
           (op == "Range" && i == 1) || (op == "ConstantOfShape" && i == 0);
  }
  static bool sized_free(const ir::Node&, const std::vector<const State*>& in) {
    for (auto* s : in)
      if (s && s->sized) return false;
    return true;
  }

  std::vector<int64_t> const_ints(const ir::Node& n, size_t i, const ir::Model& m) const {
    if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue) return {};
    const ir::Value& v = m.value(n.inputs[i]);
    if (!v.constant) refuse("{} input {} is not a constant once bound", n.label(), i);
    return ops::to_int64s(*v.constant);
  }

  /// Broadcasting element-wise operators: each output region from the inputs'
  /// regions that produce it (a broadcast input contributes all it holds).
  void elementwise(const ir::Node& n, const std::vector<const State*>& in) {
    const size_t r = sizes(n.outputs[0]).size();
    const DType out = a_.value(n.outputs[0]).dtype;
    // CastLike's second input gives only a dtype; Clip's bounds are constants.
    const size_t used = n.op_type == "CastLike" ? 1 : in.size();
    State s;
    s.axes = carried(n.outputs[0]);
    std::vector<Kind> reals;
    for (size_t i = 0; i < used; ++i) reals.push_back(in[i] ? in[i]->real : kFinite);
    s.real = ew_kind(n.op_type, reals, out);
    for (int ax : s.axes) {
      std::vector<Kind> k;
      for (size_t i = 0; i < used; ++i) {
        if (!in[i]) {
          k.push_back(kFinite);
          continue;
        }
        const int ai = ax - static_cast<int>(r - sizes(n.inputs[i]).size());
        const int sl = ai >= 0 ? in[i]->slot(ai) : -1;
        k.push_back(sl >= 0 ? in[i]->pad[static_cast<size_t>(sl)] : in[i]->all());
      }
      s.pad.push_back(ew_kind(n.op_type, k, out));
    }
    inherit(s, in);
    put(n.outputs[0], std::move(s));
    for (size_t o = 1; o < n.outputs.size(); ++o)  // Dropout's mask: ones in inference
      if (n.outputs[o] != ir::kNoValue) {
        State m;
        m.axes = carried(n.outputs[o]);
        m.pad.assign(m.axes.size(), konst(1));
        put(n.outputs[o], std::move(m));
      }
  }

  /// Y = A @ B with A's rows at axis ra-2, its columns (the contraction) at
  /// ra-1, B's contraction at rb-2, its columns at rb-1.
  State contract(const ir::Node& n, const State& A, size_t ra, const State& B, size_t rb, ir::ValueId out) {
    if ((!A.axes.empty() && ra < 2) || (!B.axes.empty() && rb < 2))
      refuse("{}: a vector operand carries the dim", n.label());
    State s;
    s.axes = carried(out);
    const size_t r = sizes(out).size();
    const int ka = A.slot(static_cast<int>(ra) - 1), kb = B.slot(static_cast<int>(rb) - 2);
    if ((ka >= 0) != (kb >= 0)) refuse("{}: only one operand's contraction axis carries the dim", n.label());
    if (ka >= 0) {
      const Kind pa = A.pad[static_cast<size_t>(ka)], pb = B.pad[static_cast<size_t>(kb)];
      if (!is_zero(product_sum(pa, pb)))
        refuse("{} contracts the dim and neither operand is exactly 0 at the padded positions with the other finite "
               "(a mask must zero one side first, e.g. a Softmax over a masked score)", n.label());
    }
    for (int ax : s.axes) {
      Kind ca = A.all(), cb = B.all();
      if (ax == static_cast<int>(r) - 2) {
        ca = A.pad.at(static_cast<size_t>(A.slot(static_cast<int>(ra) - 2)));
      } else if (ax == static_cast<int>(r) - 1) {
        cb = B.pad.at(static_cast<size_t>(B.slot(static_cast<int>(rb) - 1)));
      } else {
        const int aa = ax - static_cast<int>(r - ra), ab = ax - static_cast<int>(r - rb);
        if (aa >= 0 && A.slot(aa) >= 0) ca = A.pad[static_cast<size_t>(A.slot(aa))];
        if (ab >= 0 && B.slot(ab) >= 0) cb = B.pad[static_cast<size_t>(B.slot(ab))];
      }
      s.pad.push_back(product_sum(ca, cb));
    }
    inherit(s, {&A, &B});
    return s;
  }

  void matmul(const ir::Node& n, const State& A, const State& B) {
    put(n.outputs[0], contract(n, A, sizes(n.inputs[0]).size(), B, sizes(n.inputs[1]).size(), n.outputs[0]));
  }

  static State transposed2d(State s) {
    for (auto& a : s.axes) a = 1 - a;
    if (s.axes.size() == 2) {
      std::swap(s.axes[0], s.axes[1]);
      std::swap(s.pad[0], s.pad[1]);
    }
    return s;
  }

  void gemm(const ir::Node& n, const std::vector<const State*>& in) {
    State A = n.i("transA", 0) ? transposed2d(*in[0]) : *in[0];
    State B = n.i("transB", 0) ? transposed2d(*in[1]) : *in[1];
    State s = contract(n, A, 2, B, 2, n.outputs[0]);
    if (in.size() > 2 && in[2]) {
      // + beta * C, broadcast: C's regions join the product's.
      const State& C = *in[2];
      const size_t rc = sizes(n.inputs[2]).size();
      for (size_t j = 0; j < s.axes.size(); ++j) {
        const int ac = s.axes[j] - static_cast<int>(2 - rc);
        s.pad[j] = ew_kind("Add", {s.pad[j], ac >= 0 && C.slot(ac) >= 0 ? C.pad[static_cast<size_t>(C.slot(ac))] : C.all()},
                           DType::f32);
      }
      inherit(s, {&C});
    }
    put(n.outputs[0], std::move(s));
  }

  void softmax(const ir::Node& n, const State& x) {
    const int64_t r = static_cast<int64_t>(sizes(n.inputs[0]).size());
    const int axis = static_cast<int>(ops::normalize_axis(n, n.i("axis", n.opset < 13 ? 1 : -1), r));
    // Before opset 13 the axes from `axis` on are one flattened row.
    for (int a : x.axes)
      if (a > axis && n.opset < 13) refuse("{} (opset < 13) flattens the dim into its rows", n.label());
    State s = x;
    s.real = kFinite;
    for (size_t j = 0; j < s.axes.size(); ++j) {
      if (s.axes[j] != axis) {
        s.pad[j] = rowwise(x.pad[j]);
        continue;
      }
      if (!is_neg(x.pad[j]))
        refuse("{} normalizes over the dim and the padded entries are not masked out (they hold {}, not a bias <= "
               "{}): they would take part of every row's weight", n.label(), describe(x.pad[j]), kMaskBias);
      // exp(masked - max) underflows to exactly 0, in every row whose
      // entries are finite: a row padded along another axis must be too.
      for (size_t o = 0; o < x.axes.size(); ++o)
        if (o != j && x.pad[o].tag == Tag::any)
          refuse("{}: rows padded along axis {} may hold NaN or infinity", n.label(), x.axes[o]);
      s.pad[j] = konst(0);
    }
    put(n.outputs[0], std::move(s));
  }

  void layer_norm(const ir::Node& n, const std::vector<const State*>& in) {
    const int64_t r = static_cast<int64_t>(sizes(n.inputs[0]).size());
    const int axis = static_cast<int>(ops::normalize_axis(n, n.i("axis", -1), r));
    for (size_t i = 1; i < in.size(); ++i)
      if (in[i] && !in[i]->axes.empty()) refuse("{}: scale or bias carries the dim", n.label());
    for (int a : in[0]->axes)
      if (a >= axis) refuse("{} normalizes over the dim (axis {})", n.label(), a);
    for (auto o : n.outputs) {
      if (o == ir::kNoValue) continue;
      State s;
      s.axes = carried(o);
      if (s.axes != in[0]->axes) refuse("{}: an output moves the dim", n.label());
      for (auto p : in[0]->pad) s.pad.push_back(rowwise(p));
      inherit(s, in);
      put(o, std::move(s));
    }
  }

  void reduce(const ir::Node& n, const std::vector<const State*>& in) {
    const State& x = *in[0];
    const int64_t r = static_cast<int64_t>(sizes(n.inputs[0]).size());
    std::vector<int64_t> axes = n.has("axes") ? n.ints("axes") : const_ints(n, 1, a_);
    if (axes.empty() && !n.i("noop_with_empty_axes", 0))
      for (int64_t a = 0; a < r; ++a) axes.push_back(a);
    for (auto& a : axes) a = ops::normalize_axis(n, a, r, "axes");
    const bool sums = n.op_type == "ReduceSum" || n.op_type == "ReduceSumSquare" || n.op_type == "ReduceL1";
    State s;
    s.axes = carried(n.outputs[0]);
    std::vector<Kind> kept;
    for (size_t j = 0; j < x.axes.size(); ++j) {
      const bool over = std::find(axes.begin(), axes.end(), x.axes[j]) != axes.end();
      if (!over) {
        kept.push_back(is_zero(x.pad[j]) ? konst(0) : reduced(x.pad[j], n.op_type));
        continue;
      }
      if (!sums || !is_zero(x.pad[j]))
        refuse("{} reduces over the dim and the padded entries are not exactly 0 under a sum ({} counts or takes "
               "them)", n.label(), n.op_type);
    }
    if (kept.size() != s.axes.size()) refuse("{}: the kept axes do not line up", n.label());
    s.pad = kept;
    s.real = reduced(x.real, n.op_type);
    inherit(s, in);
    put(n.outputs[0], std::move(s));
  }

  /// Reshape / Squeeze / Unsqueeze / Flatten: allowed where every element
  /// keeps its position along the dim, i.e. the sizes before, between and
  /// after the carried axes multiply to the same on both sides.
  void regroup(const ir::Node& n, const State& x) {
    const std::vector<int64_t> si = sizes(n.inputs[0]), so = sizes(n.outputs[0]);
    State s = x;
    s.axes = carried(n.outputs[0]);
    if (s.axes.size() != x.axes.size()) refuse("{} merges or splits the dim", n.label());
    size_t pi = 0, po = 0;
    for (size_t j = 0; j <= x.axes.size(); ++j) {
      const size_t ei = j < x.axes.size() ? static_cast<size_t>(x.axes[j]) : si.size();
      const size_t eo = j < s.axes.size() ? static_cast<size_t>(s.axes[j]) : so.size();
      if (product(si, pi, ei) != product(so, po, eo))
        refuse("{} moves elements across the dim (a merge with a neighbouring axis)", n.label());
      pi = ei + 1, po = eo + 1;
    }
    inherit(s, {&x});
    put(n.outputs[0], std::move(s));
  }

  void transpose(const ir::Node& n, const State& x) {
    const size_t r = sizes(n.inputs[0]).size();
    std::vector<int64_t> perm = n.ints("perm", {});
    if (perm.empty())
      for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
    State s;
    s.axes = carried(n.outputs[0]);
    s.real = x.real;
    for (int ax : s.axes) {
      const int sl = x.slot(static_cast<int>(perm.at(static_cast<size_t>(ax))));
      if (sl < 0) refuse("{}: the permutation does not follow the dim", n.label());
      s.pad.push_back(x.pad[static_cast<size_t>(sl)]);
    }
    inherit(s, {&x});
    put(n.outputs[0], std::move(s));
  }

  void expand(const ir::Node& n, const State& x) {
    const size_t r = sizes(n.outputs[0]).size(), rx = sizes(n.inputs[0]).size();
    State s;
    s.axes = carried(n.outputs[0]);
    s.real = x.real;
    for (int ax : s.axes) {
      const int ai = ax - static_cast<int>(r - rx);
      const int sl = ai >= 0 ? x.slot(ai) : -1;
      s.pad.push_back(sl >= 0 ? x.pad[static_cast<size_t>(sl)] : x.all());
    }
    inherit(s, {&x});
    put(n.outputs[0], std::move(s));
  }

  void concat(const ir::Node& n, const std::vector<const State*>& in) {
    const int64_t r = static_cast<int64_t>(sizes(n.outputs[0]).size());
    const int axis = static_cast<int>(ops::normalize_axis(n, n.i("axis"), r));
    State s;
    s.axes = carried(n.outputs[0]);
    if (std::find(s.axes.begin(), s.axes.end(), axis) != s.axes.end() ||
        std::any_of(in.begin(), in.end(), [&](const State* x) { return x && x->slot(axis) >= 0; }))
      refuse("{} concatenates along the dim (padding would land inside the result)", n.label());
    bool first = true;
    for (auto* x : in) {
      if (!x) continue;
      s.real = first ? x->real : join(s.real, x->real);
      for (size_t j = 0; j < s.axes.size(); ++j) {
        const int sl = x->slot(s.axes[j]);
        const Kind k = sl >= 0 ? x->pad[static_cast<size_t>(sl)] : x->all();
        if (first) s.pad.push_back(k);
        else s.pad[j] = join(s.pad[j], k);
      }
      first = false;
    }
    inherit(s, in);
    put(n.outputs[0], std::move(s));
  }

  void split(const ir::Node& n, const State& x) {
    const int64_t r = static_cast<int64_t>(sizes(n.inputs[0]).size());
    const int axis = static_cast<int>(ops::normalize_axis(n, n.i("axis", 0), r));
    if (x.slot(axis) >= 0) refuse("{} splits along the dim", n.label());
    for (auto o : n.outputs)
      if (o != ir::kNoValue) put(o, x);
  }

  void slice(const ir::Node& n, const std::vector<const State*>& in) {
    const State& x = *in[0];
    const std::vector<int64_t> si = sizes(n.inputs[0]);
    const int64_t r = static_cast<int64_t>(si.size());
    for (size_t i : {size_t{1}, size_t{3}, size_t{4}})
      if (i < in.size() && in[i] && (in[i]->sized || !in[i]->axes.empty()))
        refuse("{}: starts / axes / steps depend on the dim", n.label());
    const std::vector<int64_t> starts = const_ints(n, 1, a_), ends_a = const_ints(n, 2, a_), ends_b = const_ints(n, 2, b_);
    std::vector<int64_t> axes = const_ints(n, 3, a_), steps = const_ints(n, 4, a_);
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    State s;
    s.axes = carried(n.outputs[0]);
    s.real = x.real;
    std::map<int, Kind> from_prefix;  // output axes that a prefix slice of a longer axis makes carry the dim
    for (size_t i = 0; i < axes.size(); ++i) {
      const int ax = static_cast<int>(ops::normalize_axis(n, axes[i], r, "axes"));
      const int64_t step = i < steps.size() ? steps[i] : 1;
      const bool in_carries = x.slot(ax) >= 0;
      const bool out_carries = std::find(s.axes.begin(), s.axes.end(), ax) != s.axes.end();
      if (!in_carries && !out_carries) continue;
      if (starts.at(i) != 0 || step != 1)
        refuse("{} slices the dim from {} with step {} (only a prefix keeps positions)", n.label(), starts[i], step);
      if (in_carries && out_carries) continue;  // the whole axis: ends at or past its size in both programs
      if (in_carries) {
        // A prefix of the dim that every request has: position 0 (a length of 1 at least).
        if (ends_a.at(i) != ends_b.at(i) || ends_a[i] > 1)
          refuse("{} takes {} positions of the dim (more than a request may have)", n.label(), ends_a[i]);
        continue;
      }
      from_prefix[ax] = x.all();  // the dim's positions are a prefix of this longer axis
    }
    for (int ax : s.axes) {
      auto it = from_prefix.find(ax);
      s.pad.push_back(it != from_prefix.end() ? it->second : x.pad.at(static_cast<size_t>(x.slot(ax))));
    }
    inherit(s, {&x});
    put(n.outputs[0], std::move(s));
  }

  void gather(const ir::Node& n, const State& data, const State& idx) {
    const int64_t r = static_cast<int64_t>(sizes(n.inputs[0]).size());
    const int axis = static_cast<int>(ops::normalize_axis(n, n.i("axis", 0), r));
    const int ri = static_cast<int>(sizes(n.inputs[1]).size());
    if (!idx.axes.empty() && !data.axes.empty()) refuse("{}: both data and indices carry the dim", n.label());
    State s;
    s.axes = carried(n.outputs[0]);
    if (!idx.axes.empty()) {
      // A lookup (embeddings): padded positions read the row of the padded index.
      for (auto k : idx.pad) bound_index(n, k, sizes(n.inputs[0]).at(static_cast<size_t>(axis)));
      for (size_t j = 0; j < s.axes.size(); ++j) s.pad.push_back(rowwise(data.all()));
      inherit(s, {&data, &idx});
      return void(put(n.outputs[0], std::move(s)));
    }
    if (data.slot(axis) >= 0) {
      // Reading fixed positions of the dim: only position 0 is real in every request.
      const Tensor* t = a_.value(n.inputs[1]).constant ? &*a_.value(n.inputs[1]).constant : nullptr;
      if (!t || idx.sized) refuse("{} reads positions of the dim that depend on data", n.label());
      for (auto v : ops::to_int64s(*t))
        if (v != 0) refuse("{} reads position {} of the dim (a request may be shorter)", n.label(), v);
    }
    for (int a : data.axes) {
      if (a == axis) continue;
      const int oa = a < axis ? a : a + ri - 1;
      if (std::find(s.axes.begin(), s.axes.end(), oa) == s.axes.end()) refuse("{}: the dim moves", n.label());
      s.pad.push_back(data.pad[static_cast<size_t>(data.slot(a))]);
    }
    s.real = data.real;
    inherit(s, {&data, &idx});
    put(n.outputs[0], std::move(s));
  }

  /// Padded positions' indices into an axis of size `rows` must stay within
  /// it (else the padded run fails or reads out of bounds): a known constant
  /// in range, or bounds that hold up to some padded size (which caps it).
  void bound_index(const ir::Node& n, Kind k, int64_t rows) {
    if (k.tag == Tag::konst) {
      if (k.c < -static_cast<double>(rows) || k.c > static_cast<double>(rows) - 1)
        refuse("{}: the padded positions' index {} is outside the {} rows read", n.label(), k.c, rows);
      return;
    }
    const int64_t c = k.tag == Tag::finite ? index_cap(k.r, rows) : 0;
    if (c < kProbeLarge)
      refuse("{}: the padded positions' indices are not a known constant nor bounded within the {} rows read ({})",
             n.label(), rows, describe(k));
    cap_ = std::min(cap_, c);
  }

  /// CumSum along `axis`: position i sums positions 0..i (exclusive: 0..i-1),
  /// so the real positions (a prefix of the dim) sum real positions only and
  /// keep the unpadded run's values; reverse sums i..end and takes the padded
  /// positions in.
  void cumsum(const ir::Node& n, const std::vector<const State*>& in) {
    const State& x = *in.at(0);
    if (in.size() < 2 || !in[1] || in[1]->sized || !in[1]->axes.empty() || !a_.value(n.inputs[1]).constant)
      refuse("{}: the axis is not a constant", n.label());
    const std::vector<int64_t> sx = sizes(n.inputs[0]);
    const int axis = static_cast<int>(ops::normalize_axis(n, const_ints(n, 1, a_).at(0), static_cast<int64_t>(sx.size())));
    const int along = x.slot(axis);
    if (n.i("reverse", 0) && along >= 0)
      refuse("{} (reverse) sums each position of the dim with the ones after it: the padded positions reach the real "
             "ones", n.label());
    // Each output element sums elements of the input that share its index on every other axis.
    auto sum_kind = [&](Kind k, bool over_dim) {
      if (is_zero(k)) return konst(0);
      if (!finite(k)) return kAny;
      return finite_in(summed(is_neg(k) ? Range{} : range_of(k), over_dim, sx[static_cast<size_t>(axis)]),
                       sign_of(k) == Sign::unknown ? Sign::unknown : Sign::nonneg);
    };
    State s;
    s.axes = carried(n.outputs[0]);
    if (s.axes != x.axes) refuse("{}: the output moves the dim", n.label());
    for (size_t j = 0; j < x.axes.size(); ++j)
      s.pad.push_back(static_cast<int>(j) == along ? sum_kind(x.all(), true) : sum_kind(x.pad[j], along >= 0));
    s.real = sum_kind(x.real, along >= 0);
    inherit(s, {&x});
    put(n.outputs[0], std::move(s));
  }

  /// GatherElements: out[.., i, ..] = data[.., index[.., i, ..], ..] along
  /// `axis`, every other axis read at the output's own coordinates. The
  /// gathered axis of data must not carry the dim (an index would reach
  /// padded positions); each other axis carries it in data and index alike.
  void gather_elements(const ir::Node& n, const State& data, const State& idx) {
    const std::vector<int64_t> sd = sizes(n.inputs[0]);
    const int axis = static_cast<int>(ops::normalize_axis(n, n.i("axis", 0), static_cast<int64_t>(sd.size())));
    if (data.slot(axis) >= 0)
      refuse("{} gathers along the dim (an index may select a padded position)", n.label());
    for (int a : data.axes)
      if (idx.slot(a) < 0) refuse("{}: data carries the dim at axis {} and the indices do not", n.label(), a);
    const int64_t rows = sd.at(static_cast<size_t>(axis));
    for (auto k : idx.pad) bound_index(n, k, rows);
    // The real region's indices are the unpadded run's: in range there, or that run fails too.
    State s;
    s.axes = carried(n.outputs[0]);
    if (s.axes != idx.axes) refuse("{}: the output moves the dim", n.label());
    for (int a : s.axes) {
      const int sl = data.slot(a);
      s.pad.push_back(sl >= 0 ? data.pad[static_cast<size_t>(sl)] : data.all());
    }
    s.real = data.real;
    inherit(s, {&data, &idx});
    put(n.outputs[0], std::move(s));
  }

  void range(const ir::Node& n) {
    // Range(start, limit, delta) with the limit from the dim's size: start +
    // i * delta does not depend on the limit, so the real positions match.
    for (size_t i : {size_t{0}, size_t{2}})
      if (get(n.inputs[i]).sized || !a_.value(n.inputs[i]).constant) refuse("{}: start / delta not constant", n.label());
    State s;
    s.axes = carried(n.outputs[0]);
    if (s.axes.empty()) refuse("{}: a limit computed from the dim's size gives a result that does not follow it", n.label());
    s.pad.assign(s.axes.size(), kFinite);
    put(n.outputs[0], std::move(s));
  }

  void constant_of_shape(const ir::Node& n) {
    const double v = n.has("value") ? ops::element_as_double(n.tensor("value"), 0) : 0.0;
    State s;
    s.axes = carried(n.outputs[0]);
    s.real = konst(v);
    s.pad.assign(s.axes.size(), konst(v));
    put(n.outputs[0], std::move(s));
  }
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::vector<std::string> keep_mask_inputs(const ir::Model& m, const std::string& sym) {
  std::vector<std::string> out;
  for (auto id : m.main.inputs) {
    const ir::Value& v = m.value(id);
    if (!integer_dtype(v.dtype) || lower(v.name).find("mask") == std::string::npos || !v.shape) continue;
    for (auto& d : *v.shape)
      if (!d.is_static() && d.symbol == sym) {
        out.push_back(v.name);
        break;
      }
  }
  return out;
}

bool sequence_padding_safe(const ir::Model& m, const std::string& sym, const std::set<std::string>& others,
                           const std::vector<int>& output_axes, std::string* why, int64_t* max_size) {
  std::string reason;
  std::optional<BoundPair> pair = bound_pair(m, sym, others);
  if (!pair) {
    reason = "the model does not compile to the same nodes for two sizes of the dim";
  } else {
    try {
      Prover prover(*pair);
      prover.run(output_axes);
      if (max_size) *max_size = prover.cap();
      log().debug("sequence prover: padding '{}' keeps the real positions' results{}", sym,
                  prover.cap() < std::numeric_limits<int64_t>::max() ? fmt::format(" up to {}", prover.cap()) : "");
      return true;
    } catch (const Refused& r) {
      reason = r.why;
    } catch (const Error& e) {
      reason = e.what();
    }
  }
  log().debug("sequence prover: padding '{}' is not shown safe: {}", sym, reason);
  if (why) *why = reason;
  return false;
}

}  // namespace kiln

// Element-wise kernels with numpy broadcasting, fused along single-consumer
// chains (codegen.h: is_elementwise, gen_elementwise).
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "support/error.h"
#include "targets/cuda/compile/codegen.h"

namespace kiln::targets::cuda {

namespace {

bool is_float(DType t) { return t == DType::f32 || t == DType::f64 || is_half(t); }

/// Type a value is computed in: float16 / bfloat16 in float, rounded back at
/// each node's output (so a fused chain rounds where the unfused one would).
std::optional<std::string> compute(DType t) { return is_half(t) ? std::optional<std::string>("float") : c_type(t); }

/// Indices of the inputs a node reads element-wise (Expand's shape and
/// Dropout's ratio / training_mode inputs are not).
std::vector<size_t> data_inputs(const ir::Node& n) {
  std::vector<size_t> out;
  size_t count = n.op_type == "Expand" || n.op_type == "Dropout" || n.op_type == "CastLike" ? 1 : n.inputs.size();
  for (size_t i = 0; i < count && i < n.inputs.size(); ++i)
    if (n.inputs[i] != ir::kNoValue) out.push_back(i);
  return out;
}

/// The C++ expression of node `n` over its input variables `a` (indexed by
/// input position, "" for absent ones). `tin`: C type of input 0, `in`:
/// its dtype, `tout`: C type of the output. nullopt when unsupported.
std::optional<std::string> expr(const ir::Node& n, const std::vector<std::string>& a, DType in, const std::string& tin,
                                const std::string& tout) {
  const std::string& op = n.op_type;
  const bool F = is_float(in);
  auto lit = [&](float f) { return fmt::format("(({}){})", tin, float_literal(f)); };
  auto x = a.empty() ? std::string() : a[0];
  auto need = [&](size_t k) { return a.size() >= k; };
  // n-ary folds
  if (op == "Add" && need(2)) return fmt::format("({} + {})", a[0], a[1]);
  if (op == "Sub" && need(2)) return fmt::format("({} - {})", a[0], a[1]);
  if (op == "Mul" && need(2)) return fmt::format("({} * {})", a[0], a[1]);
  if (op == "Div" && need(2)) return fmt::format("({} / {})", a[0], a[1]);
  if (op == "Sum" || op == "Mean" || op == "Max" || op == "Min") {
    if (a.empty()) return std::nullopt;
    std::string e = a[0];
    for (size_t i = 1; i < a.size(); ++i)
      e = op == "Max" ? fmt::format("kl_max({}, {})", e, a[i])
          : op == "Min" ? fmt::format("kl_min({}, {})", e, a[i])
                        : fmt::format("({} + {})", e, a[i]);
    if (op == "Mean") return F ? std::optional(fmt::format("({} / ({}){})", e, tin, a.size())) : std::nullopt;
    return e;
  }
  if (op == "Pow" && need(2)) return F ? std::optional(fmt::format("kl_pow({}, ({}){})", a[0], tin, a[1])) : std::nullopt;
  if (op == "PRelu" && need(2)) return fmt::format("({0} < ({2})0 ? {0} * {1} : {0})", a[0], a[1], tin);
  if (op == "Equal" && need(2)) return fmt::format("({} == {})", a[0], a[1]);
  if (op == "Less" && need(2)) return fmt::format("({} < {})", a[0], a[1]);
  if (op == "LessOrEqual" && need(2)) return fmt::format("({} <= {})", a[0], a[1]);
  if (op == "Greater" && need(2)) return fmt::format("({} > {})", a[0], a[1]);
  if (op == "GreaterOrEqual" && need(2)) return fmt::format("({} >= {})", a[0], a[1]);
  if (op == "And" && need(2)) return fmt::format("({} && {})", a[0], a[1]);
  if (op == "Or" && need(2)) return fmt::format("({} || {})", a[0], a[1]);
  if (op == "Xor" && need(2)) return fmt::format("({} != {})", a[0], a[1]);
  if (!F) {  // integer-only bit operations
    if (op == "BitwiseAnd" && need(2)) return fmt::format("({} & {})", a[0], a[1]);
    if (op == "BitwiseOr" && need(2)) return fmt::format("({} | {})", a[0], a[1]);
    if (op == "BitwiseXor" && need(2)) return fmt::format("({} ^ {})", a[0], a[1]);
    if (op == "BitwiseNot") return fmt::format("(({})~{})", tin, x);
    if (op == "BitShift" && need(2)) {
      std::string dir = n.s("direction", "");
      if (dir == "LEFT") return fmt::format("(({0})({1} << {2}))", tin, a[0], a[1]);
      if (dir == "RIGHT") return fmt::format("(({0})({1} >> {2}))", tin, a[0], a[1]);
      return std::nullopt;
    }
  }
  if (op == "Mod" && need(2)) {
    if (n.i("fmod", 0) != 0) return F ? std::optional(fmt::format("kl_fmod({}, {})", a[0], a[1])) : fmt::format("({} % {})", a[0], a[1]);
    if (F) return std::nullopt;  // fmod=0 is defined for integers only
    // Python's sign rule: the result has the divisor's sign.
    return fmt::format("([&]() {{ {0} r = {1} % {2}; return (r != 0 && ((r < 0) != ({2} < 0))) ? ({0})(r + {2}) : r; }}())", tin, a[0], a[1]);
  }
  if (op == "Where" && need(3)) return fmt::format("({} ? {} : {})", a[0], a[1], a[2]);
  if (op == "Not") return fmt::format("(!{})", x);
  if (op == "Cast" || op == "CastLike") return fmt::format("(({}){})", tout, x);
  if (op == "Identity" || op == "Expand" || op == "Dropout") return x;
  if (op == "Abs") return fmt::format("kl_abs({})", x);
  if (op == "Neg") return fmt::format("(-{})", x);
  if (op == "Relu") return fmt::format("kl_relu({})", x);
  if (op == "Sign") return fmt::format("kl_sign({})", x);
  if (op == "Clip") {
    std::string e = x;
    if (a.size() > 1 && !a[1].empty()) e = fmt::format("({0} < {1} ? {1} : {0})", e, a[1]);
    if (a.size() > 2 && !a[2].empty()) e = fmt::format("({0} > {1} ? {1} : {0})", e, a[2]);
    return e;
  }
  if (!F) return std::nullopt;
  // float-only
  static const std::map<std::string, std::string> unary = {
      {"Exp", "kl_exp"},     {"Log", "kl_log"},   {"Sqrt", "kl_sqrt"},   {"Tanh", "kl_tanh"},
      {"Erf", "kl_erf"},     {"Floor", "kl_floor"}, {"Ceil", "kl_ceil"}, {"Round", "kl_round"},
      {"Sin", "kl_sin"},     {"Cos", "kl_cos"},   {"Sigmoid", "kl_sigmoid"}, {"Softplus", "kl_softplus"},
      {"IsNaN", "kl_isnan"}, {"Tan", "kl_tan"}, {"Asin", "kl_asin"}, {"Acos", "kl_acos"}, {"Atan", "kl_atan"},
      {"Sinh", "kl_sinh"},  {"Cosh", "kl_cosh"}, {"Asinh", "kl_asinh"}, {"Acosh", "kl_acosh"}, {"Atanh", "kl_atanh"},
  };
  if (auto it = unary.find(op); it != unary.end()) return fmt::format("{}({})", it->second, x);
  if (op == "IsInf") {
    bool pos = n.i("detect_positive", 1) != 0, neg = n.i("detect_negative", 1) != 0;
    return fmt::format("(({0} == ({1})__int_as_float(0x7f800000) && {2}) || ({0} == -({1})__int_as_float(0x7f800000) && {3}))",
                       x, tin, pos ? "true" : "false", neg ? "true" : "false");
  }
  if (op == "Reciprocal") return fmt::format("(({})1 / {})", tin, x);
  if (op == "Softsign") return fmt::format("({0} / (({1})1 + kl_abs({0})))", x, tin);
  if (op == "LeakyRelu") return fmt::format("({0} < ({1})0 ? {0} * {2} : {0})", x, tin, lit(n.f("alpha", 0.01f)));
  if (op == "Elu") return fmt::format("({0} < ({1})0 ? {2} * (kl_exp({0}) - ({1})1) : {0})", x, tin, lit(n.f("alpha", 1.f)));
  if (op == "Celu") {
    std::string al = lit(n.f("alpha", 1.f));
    return fmt::format("(kl_max(({1})0, {0}) + kl_min(({1})0, {2} * (kl_exp({0} / {2}) - ({1})1)))", x, tin, al);
  }
  if (op == "Selu")
    return fmt::format("({0} > ({1})0 ? {3} * {0} : {3} * ({2} * kl_exp({0}) - {2}))", x, tin,
                       lit(n.f("alpha", 1.67326319217681884765625f)), lit(n.f("gamma", 1.05070102214813232421875f)));
  if (op == "HardSigmoid")
    return fmt::format("kl_max(({1})0, kl_min(({1})1, {2} * {0} + {3}))", x, tin, lit(n.f("alpha", 0.2f)), lit(n.f("beta", 0.5f)));
  if (op == "HardSwish") return fmt::format("({0} * kl_max(({1})0, kl_min(({1})1, {0} / ({1})6 + ({1})0.5)))", x, tin);
  if (op == "Shrink")
    return fmt::format("({0} < -{2} ? {0} + {3} : ({0} > {2} ? {0} - {3} : ({1})0))", x, tin, lit(n.f("lambd", 0.5f)),
                       lit(n.f("bias", 0.f)));
  if (op == "ThresholdedRelu") return fmt::format("({0} > {2} ? {0} : ({1})0)", x, tin, lit(n.f("alpha", 1.f)));
  if (op == "Mish") return fmt::format("({0} * kl_tanh(kl_softplus({0})))", x);
  if (op == "Gelu") {
    std::string approx = n.s("approximate", "none");
    if (approx == "tanh")
      return fmt::format("(({1})0.5 * {0} * (({1})1 + kl_tanh(({1})0.7978845608028654 * ({0} + ({1})0.044715 * {0} * {0} * {0}))))", x, tin);
    if (approx == "none") return fmt::format("(({1})0.5 * {0} * (({1})1 + kl_erf({0} * ({1})0.7071067811865476)))", x, tin);
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

bool is_elementwise(const Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.outputs.empty() || n.outputs[0] == ir::kNoValue) return false;
  if (n.op_type == "Dropout" && n.outputs.size() > 1 && n.outputs[1] != ir::kNoValue) return false;
  if (n.op_type == "Dropout" && n.inputs.size() > 2 && n.inputs[2] != ir::kNoValue) {
    const ir::Value& t = L.model.value(n.inputs[2]);
    if (!t.constant || t.constant->numel() != 1 || t.constant->data<bool>()[0]) return false;  // training mode
  }
  if (n.outputs.size() > 1)
    for (size_t k = 1; k < n.outputs.size(); ++k)
      if (n.outputs[k] != ir::kNoValue && n.op_type != "Dropout") return false;
  auto is_static = [&](ir::ValueId v) {
    const ir::Value& val = L.model.value(v);
    return val.shape && ir::is_static(*val.shape) && storage_type(val.dtype);
  };
  if (!is_static(n.outputs[0])) return false;
  auto ins = data_inputs(n);
  if (ins.empty()) return false;
  for (size_t i : ins)
    if (!is_static(n.inputs[i])) return false;
  DType in = L.model.value(n.inputs[ins[0]]).dtype;
  std::vector<std::string> a(n.inputs.size());
  for (size_t i : ins) a[i] = "x";
  return expr(n, a, in, *compute(in), *compute(L.model.value(n.outputs[0]).dtype)).has_value();
}

bool is_gatherable_concat(const Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Concat" || n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue) return false;
  const ir::Value& y = L.model.value(n.outputs[0]);
  if (!y.shape || !ir::is_static(*y.shape) || y.shape->empty() || !is_float_storage(y.dtype)) return false;
  bool any = false;
  for (auto v : n.inputs) {
    if (v == ir::kNoValue) continue;
    const ir::Value& x = L.model.value(v);
    if (!x.shape || !ir::is_static(*x.shape) || x.shape->size() != y.shape->size() || x.dtype != y.dtype) return false;
    any = true;
  }
  return any;
}

namespace {

/// A Slice that cuts one contiguous window out of every row: input seen as
/// [outer, in_row], output as [outer, row], output element r of a row is
/// input element off + r of it (in_row / row: the dims from the cut axis on).
struct SliceWindow {
  int64_t in_row = 0, row = 0, off = 0;
};

/// The window of Slice `n` (constant int starts / ends / axes, steps 1, at
/// most one axis cut, static shapes of one rank, a non-empty output), or
/// nullopt.
std::optional<SliceWindow> slice_window(const ir::Model& m, const ir::Node& n) {
  if (n.inputs.size() < 3 || n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue) return std::nullopt;
  for (size_t i = 1; i < n.inputs.size() && i < 5; ++i) {
    if (n.inputs[i] == ir::kNoValue) {
      if (i < 3) return std::nullopt;
      continue;
    }
    const ir::Value& c = m.value(n.inputs[i]);
    if (!c.constant || (c.constant->dtype() != DType::i64 && c.constant->dtype() != DType::i32)) return std::nullopt;
  }
  const ir::Value &x = m.value(n.inputs[0]), &y = m.value(n.outputs[0]);
  if (!x.shape || !y.shape || !ir::is_static(*x.shape) || !ir::is_static(*y.shape) || x.shape->size() != y.shape->size() ||
      x.shape->empty())
    return std::nullopt;
  auto in = ir::to_sizes(*x.shape), out = ir::to_sizes(*y.shape);
  if (numel(out) == 0) return std::nullopt;  // nothing to gather (and no row to divide by)
  auto ints = [&](size_t i) {
    std::vector<int64_t> v;
    if (i >= n.inputs.size() || n.inputs[i] == ir::kNoValue) return v;
    const Tensor& t = *m.value(n.inputs[i]).constant;
    for (int64_t k = 0; k < t.numel(); ++k) v.push_back(t.dtype() == DType::i64 ? t.data<int64_t>()[k] : t.data<int32_t>()[k]);
    return v;
  };
  const auto starts = ints(1), axes = ints(3), steps = ints(4);
  const int64_t r = static_cast<int64_t>(in.size());
  std::vector<int64_t> start(in.size(), 0);
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t a = axes.empty() ? static_cast<int64_t>(k) : (k < axes.size() ? axes[k] : r);
    if (a < 0) a += r;
    if (a < 0 || a >= r || (!steps.empty() && (k >= steps.size() || steps[k] != 1))) return std::nullopt;
    int64_t s = starts[k] < 0 ? starts[k] + in[a] : starts[k];
    start[a] = std::clamp<int64_t>(s, 0, in[a]);
  }
  int64_t cut = -1;
  for (int64_t d = 0; d < r; ++d) {
    if (start[d] + out[d] > in[d]) return std::nullopt;
    if (start[d] == 0 && out[d] == in[d]) continue;
    if (cut >= 0) return std::nullopt;  // a second axis cut: not one window per row
    cut = d;
  }
  SliceWindow w;
  if (cut < 0) cut = 0;
  int64_t inner = 1;
  for (int64_t d = cut + 1; d < r; ++d) inner *= in[d];
  w.in_row = in[cut] * inner;
  w.row = out[cut] * inner;
  w.off = start[cut] * inner;
  return w;
}

/// A Concat or Slice member of a chain: the output seen as [outer, row]
/// (Concat: row = its length on the axis times the dims after it), each
/// Concat input as [outer, rows[j]]; the Slice's one input as [outer,
/// in_row], read from `off` on (SliceWindow).
struct Gather {
  const ir::Node* node = nullptr;
  std::vector<size_t> ext;    ///< index into the kernel's external inputs, per non-empty input
  std::vector<int64_t> rows;  ///< each input's share of a row
  int64_t row = 0;
  std::optional<SliceWindow> slice;  ///< set for a Slice
  std::optional<SliceWindow> pad;    ///< set for a Pad: output row element r is input r - off, or 0 outside
  /// A Pad reading through a Transpose member: the Transpose's output dims,
  /// and for each the stride of the input dim it takes (flat index map).
  std::vector<int64_t> t_dims, t_strides;
};

/// The window of a Pad `n` (constant mode, no value input or axes input,
/// constant non-negative pads on at most one axis, static shapes of one
/// rank): output seen as [outer, row], input as [outer, in_row], off the
/// padding before the input in a row; or nullopt.
std::optional<SliceWindow> pad_window(const ir::Model& m, const ir::Node& n) {
  if (n.s("mode", "constant") != "constant" || n.inputs.size() < 2 || n.inputs[1] == ir::kNoValue) return std::nullopt;
  if (n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue) return std::nullopt;
  for (size_t i = 2; i < n.inputs.size(); ++i)
    if (n.inputs[i] != ir::kNoValue) return std::nullopt;  // a fill value or axes: gen_data's Pad
  const ir::Value &x = m.value(n.inputs[0]), &y = m.value(n.outputs[0]), &p = m.value(n.inputs[1]);
  if (!p.constant || p.constant->dtype() != DType::i64 || !x.shape || !y.shape || !ir::is_static(*x.shape) ||
      !ir::is_static(*y.shape) || x.shape->size() != y.shape->size() || x.shape->empty())
    return std::nullopt;
  const auto in = ir::to_sizes(*x.shape), out = ir::to_sizes(*y.shape);
  const int64_t r = static_cast<int64_t>(in.size());
  if (p.constant->numel() != 2 * r || numel(in) == 0) return std::nullopt;
  const int64_t* pads = p.constant->data<int64_t>();
  int64_t cut = -1;
  for (int64_t d = 0; d < r; ++d) {
    if (pads[d] < 0 || pads[d + r] < 0 || in[d] + pads[d] + pads[d + r] != out[d]) return std::nullopt;
    if (pads[d] == 0 && pads[d + r] == 0) continue;
    if (cut >= 0) return std::nullopt;  // a second padded axis: not one window per row
    cut = d;
  }
  if (cut < 0) cut = 0;
  int64_t inner = 1;
  for (int64_t d = cut + 1; d < r; ++d) inner *= in[d];
  return SliceWindow{in[cut] * inner, out[cut] * inner, pads[cut] * inner};
}

Gather gather_of(Lowering& L, const ir::Node& n, const std::vector<ir::ValueId>& ext,
                 const std::vector<const ir::Node*>& members) {
  Gather g;
  g.node = &n;
  if (n.op_type == "Pad") {
    g.pad = pad_window(L.model, n);
    if (!g.pad) refuse(n, "a Pad in an element-wise chain must add zeros on one axis");
    ir::ValueId src = n.inputs[0];
    for (const ir::Node* t : members)
      if (t->op_type == "Transpose" && t->outputs[0] == src) {
        // Read through the Transpose: output coordinate d is input dim perm[d].
        const auto tin = L.dims(*t, t->inputs[0]);
        const auto perm = t->ints("perm");
        const auto st = strides_of(tin);
        for (auto d : perm) g.t_dims.push_back(tin[static_cast<size_t>(d)]), g.t_strides.push_back(st[static_cast<size_t>(d)]);
        src = t->inputs[0];
      }
    g.ext.push_back(static_cast<size_t>(std::find(ext.begin(), ext.end(), src) - ext.begin()));
    g.rows = {g.pad->row};
    g.row = g.pad->row;
    return g;
  }
  if (n.op_type == "Slice") {
    g.slice = slice_window(L.model, n);
    if (!g.slice) refuse(n, "a Slice in an element-wise chain must cut one window per row");
    g.ext.push_back(static_cast<size_t>(std::find(ext.begin(), ext.end(), n.inputs[0]) - ext.begin()));
    g.rows = {g.slice->row};
    g.row = g.slice->row;
    return g;
  }
  auto out = L.dims(n, n.outputs[0]);
  int64_t axis = norm_axis(n, n.i("axis"), static_cast<int64_t>(out.size()));
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < out.size(); ++d) inner *= out[d];
  for (auto v : n.inputs) {
    if (v == ir::kNoValue || L.dims(n, v)[static_cast<size_t>(axis)] == 0) continue;
    g.ext.push_back(static_cast<size_t>(std::find(ext.begin(), ext.end(), v) - ext.begin()));
    g.rows.push_back(L.dims(n, v)[static_cast<size_t>(axis)] * inner);
    g.row += g.rows.back();
  }
  return g;
}

/// Code running `load(k, offset)` for the input of `g` that holds element
/// `idx` of the concatenation (`offset`: the element's index in input k).
std::string gather_select(const Gather& g, const std::string& idx,
                          const std::function<std::string(size_t, const std::string&)>& load, const std::string& zero = "") {
  std::string s = fmt::format("{{ const I o = {0} / {1}u, r = {0} % {1}u;", idx, g.row);
  if (g.pad) {
    // The input has no more elements than the output: index type I holds
    // every input index (32-bit divisions where the output allows).
    const SliceWindow& w = *g.pad;
    std::string at = w.off ? fmt::format("o * {}u + (r - {}u)", w.in_row, w.off) : fmt::format("o * {}u + r", w.in_row);
    std::string inside = w.off ? fmt::format("r >= {}u && r < {}u", w.off, w.off + w.in_row) : fmt::format("r < {}u", w.in_row);
    if (!g.t_dims.empty()) {  // the Transpose's output index -> its input's
      std::string map = fmt::format(" I t = {}, j = 0;", at);
      for (size_t d = g.t_dims.size(); d-- > 0;)
        map += d > 0 ? fmt::format(" j += (t % {0}u) * {1}u; t /= {0}u;", g.t_dims[d], g.t_strides[d])
                     : fmt::format(" j += t * {}u;", g.t_strides[d]);
      return s + fmt::format(" if ({}) {{{} {} }} else {{ {} }} }}", inside, map, load(g.ext[0], "j"), zero);
    }
    return s + fmt::format(" if ({}) {{ {} }} else {{ {} }} }}", inside, load(g.ext[0], at), zero);
  }
  if (g.slice)
    return s + fmt::format(" {} }}", load(g.ext[0], fmt::format("(unsigned long long)o * {} + {} + r", g.slice->in_row, g.slice->off)));
  int64_t off = 0;
  for (size_t j = 0; j < g.rows.size(); ++j) {
    std::string at = fmt::format("(unsigned long long)o * {} + (r - {}u)", g.rows[j], off);
    off += g.rows[j];
    if (j + 1 == g.rows.size()) s += fmt::format(" {}{}", j ? "else " : "", load(g.ext[j], at));
    else s += fmt::format(" {}if (r < {}u) {}", j ? "else " : "", off, load(g.ext[j], at));
  }
  return s + " }";
}

}  // namespace

bool is_gatherable_slice(const Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Slice" || n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue) return false;
  if (n.inputs.empty() || n.inputs[0] == ir::kNoValue) return false;
  const DType t = L.model.value(n.outputs[0]).dtype;
  return is_float_storage(t) && L.model.value(n.inputs[0]).dtype == t && slice_window(L.model, n).has_value();
}

bool is_gatherable_pad(const Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Pad" || n.inputs.empty() || n.inputs[0] == ir::kNoValue) return false;
  if (n.outputs.size() != 1 || n.outputs[0] == ir::kNoValue) return false;
  const DType t = L.model.value(n.outputs[0]).dtype;
  return is_float_storage(t) && L.model.value(n.inputs[0]).dtype == t && pad_window(L.model, n).has_value();
}

bool is_gatherable_transpose(const Lowering& L, const ir::Node& n) {
  if (!n.domain.empty() || n.op_type != "Transpose" || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const ir::Value &x = L.model.value(n.inputs[0]), &y = L.model.value(n.outputs[0]);
  if (!x.shape || !y.shape || !ir::is_static(*x.shape) || !ir::is_static(*y.shape) || x.dtype != y.dtype ||
      !is_float_storage(x.dtype))
    return false;
  const auto perm = n.ints("perm");
  if (perm.size() != x.shape->size()) return false;  // an absent perm (reverse) is left to gen_data
  std::vector<bool> seen(perm.size(), false);
  for (auto d : perm) {
    if (d < 0 || d >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

ir::Node gen_elementwise(Lowering& L, const std::vector<const ir::Node*>& members) {
  const ir::Node& root = *members.back();
  const ir::Model& m = L.model;
  std::vector<int64_t> out = L.dims(root, root.outputs[0]);
  const int64_t N = numel(out);
  std::set<ir::ValueId> inside;
  for (auto* n : members) inside.insert(n->outputs[0]);
  // Data-movement members: each output element is read from an input
  // element (or is a Pad's 0); a Transpose only as what a Pad reads through.
  auto is_gather = [](const ir::Node* n) {
    return n->op_type == "Concat" || n->op_type == "Slice" || n->op_type == "Pad" || n->op_type == "Transpose";
  };
  // External inputs, in first-use order; `direct`: read at the element's own
  // (broadcast) index by an element-wise member, not only through a Concat.
  std::vector<ir::ValueId> ext;
  std::vector<bool> direct;
  for (auto* n : members) {
    std::vector<size_t> ins = is_gather(n) ? std::vector<size_t>{} : data_inputs(*n);
    if (is_gather(n))
      for (size_t i = 0; i < (n->op_type == "Concat" ? n->inputs.size() : 1); ++i)
        if (n->inputs[i] != ir::kNoValue) ins.push_back(i);
    for (size_t i : ins) {
      ir::ValueId v = n->inputs[i];
      if (inside.count(v)) continue;
      auto it = std::find(ext.begin(), ext.end(), v);
      size_t k = static_cast<size_t>(it - ext.begin());
      if (it == ext.end()) ext.push_back(v), direct.push_back(false);
      if (!is_gather(n)) direct[k] = true;
    }
  }
  std::vector<Gather> gathers;
  for (auto* n : members)
    if (is_gather(n) && n->op_type != "Transpose") gathers.push_back(gather_of(L, *n, ext, members));
  DType rd = m.value(root.outputs[0]).dtype;
  // Inputs read at the output's own index (same element count and shape, right-aligned)
  // are loaded as vectors of V elements, like the output is stored; broadcast inputs
  // (a scalar, a per-channel constant) keep the per-element index (served by the cache).
  std::vector<bool> full(ext.size(), false);
  size_t widest = dtype_size(rd);
  for (size_t k = 0; k < ext.size(); ++k) {
    if (!direct[k]) continue;
    auto d = L.dims(root, ext[k]);
    std::vector<int64_t> padded(out.size(), 1);
    if (d.size() <= out.size()) {
      std::copy(d.begin(), d.end(), padded.end() - static_cast<std::ptrdiff_t>(d.size()));
      full[k] = numel(d) == N && padded == out;
    }
    if (full[k]) widest = std::max(widest, dtype_size(m.value(ext[k]).dtype));
  }
  // (A Pad's input is read element by element: its dtype sets no vector width.)
  for (auto& g : gathers)
    if (!g.pad) widest = std::max(widest, dtype_size(m.value(g.node->outputs[0]).dtype));
  // V elements per thread: 16 bytes of the widest vectorized dtype, at most 8.
  const int64_t V = std::min<int64_t>(8, 16 / static_cast<int64_t>(std::max<size_t>(widest, 1)));
  const int64_t NV = V > 1 ? N / V : 0;  // whole vectors; the N % V tail is scalar
  // A Concat whose every input's row is a multiple of V is read as one vector
  // per item (the V elements lie in one input); else element by element. A
  // Slice likewise when its input's row and offset are multiples of V too.
  std::vector<bool> packed(gathers.size(), false);
  for (size_t c = 0; c < gathers.size(); ++c) {
    packed[c] = V > 1;
    for (auto r : gathers[c].rows) packed[c] = packed[c] && r % V == 0;
    if (const auto& w = gathers[c].slice) packed[c] = packed[c] && w->in_row % V == 0 && w->off % V == 0;
    if (gathers[c].pad) packed[c] = false;  // element by element: a vector may straddle the input and the zeros
  }
  std::string name = L.kernel_name(root.op_type);
  std::string params;
  for (size_t k = 0; k < ext.size(); ++k)
    params += fmt::format("const {}* __restrict__ in{}, ", *storage_type(m.value(ext[k]).dtype), k);
  params += fmt::format("{}* __restrict__ out0", *storage_type(rd));
  // The chain for element i: `vector` true reads full inputs from the loaded packs p<k>.v[e]
  // and packed Concats from g<c>.v[e].
  auto chain = [&](bool vector) {
    std::string body;
    for (size_t k = 0; k < ext.size(); ++k) {
      if (!direct[k]) continue;
      const ir::Value& v = m.value(ext[k]);
      if (vector && full[k]) {
        body += fmt::format("    const {} v{} = {};\n", *compute(v.dtype), ext[k], load_float(v.dtype, fmt::format("p{}.v[e]", k)));
        continue;
      }
      body += fmt::format("    {}\n", broadcast_index(fmt::format("j{}", k), "i", L.dims(root, ext[k]), out));
      body += fmt::format("    const {} v{} = {};\n", *compute(v.dtype), ext[k],
                          load_float(v.dtype, fmt::format("in{}[j{}]", k, k)));
    }
    size_t c = 0;
    for (auto* n : members) {
      if (n->op_type == "Transpose") continue;  // read through by its Pad's gather
      if (is_gather(n)) {
        DType gd = m.value(n->outputs[0]).dtype;
        std::string v = fmt::format("v{}", n->outputs[0]);
        if (vector && packed[c]) {
          body += fmt::format("    const {} {} = {};  // {}\n", *compute(gd), v, load_float(gd, fmt::format("g{}.v[e]", c)),
                              n->op_type);
        } else {
          body += fmt::format("    {} {};  // {}\n    {}\n", *compute(gd), v, n->op_type,
                              gather_select(
                                  gathers[c], "i",
                                  [&](size_t k, const std::string& at) {
                                    return fmt::format("{} = {};", v, load_float(gd, fmt::format("in{}[{}]", k, at)));
                                  },
                                  fmt::format("{} = ({})0;", v, *compute(gd))));
        }
        ++c;
        continue;
      }
      std::vector<std::string> a(n->inputs.size());
      for (size_t i : data_inputs(*n)) a[i] = fmt::format("v{}", n->inputs[i]);
      DType in = m.value(n->inputs[data_inputs(*n)[0]]).dtype;
      DType od = m.value(n->outputs[0]).dtype;
      std::string tout = *compute(od);
      auto e = expr(*n, a, in, *compute(in), tout);
      if (!e) refuse(*n, "element-wise operator on this dtype is not generated");
      std::string v = fmt::format("({}){}", tout, *e);
      if (is_half(od) && n != members.back()) v = load_float(od, store_float(od, v));
      body += fmt::format("    const {} v{} = {};  // {}\n", tout, n->outputs[0], v, n->op_type);
    }
    body += fmt::format("    {} = {};\n", vector ? "po.v[e]" : "out0[i]", store_float(rd, fmt::format("v{}", root.outputs[0])));
    return body;
  };
  std::string ops;
  for (auto* n : members) ops += (ops.empty() ? "" : ", ") + n->op_type;
  std::string code = fmt::format(
      "\n// {}: {} -> [{}]\n"
      "extern \"C\" __global__ void __launch_bounds__(256) {}({}) {{\n"
      "  typedef {} I;\n"
      "  const I tid = (I)blockIdx.x * 256u + threadIdx.x, stride = (I)gridDim.x * 256u;\n",
      root.label(), ops, fmt::join(out, ","), name, params, index_type(N));
  const std::string scalar_body = chain(false);
  auto scalar_loop = [&](const std::string& start) {
    return fmt::format("  for (I i = {}; i < (I){}ull; i += stride) {{\n{}  }}\n", start, N, scalar_body);
  };
  if (NV > 0) {
    // Vector path: V consecutive elements per item, 16-byte (or narrower) accesses,
    // taken only when every vectorized pointer is aligned to its access size.
    std::vector<std::pair<std::string, size_t>> ptrs;
    std::string loads;
    for (size_t k = 0; k < ext.size(); ++k) {
      if (!full[k]) continue;
      size_t bytes = dtype_size(m.value(ext[k]).dtype) * static_cast<size_t>(V);
      ptrs.emplace_back(fmt::format("in{}", k), bytes);
      loads += fmt::format("    union {{ {0} u; {1} v[{2}]; }} p{3}; p{3}.u = *reinterpret_cast<const {0}*>(in{3} + i0);\n",
                           vector_type(bytes), *storage_type(m.value(ext[k]).dtype), V, k);
    }
    for (size_t c = 0; c < gathers.size(); ++c) {
      if (!packed[c]) continue;
      DType gd = m.value(gathers[c].node->outputs[0]).dtype;
      size_t bytes = dtype_size(gd) * static_cast<size_t>(V);
      for (size_t k : gathers[c].ext) ptrs.emplace_back(fmt::format("in{}", k), bytes);
      loads += fmt::format("    union {{ {0} u; {1} v[{2}]; }} g{3};\n    {4}\n", vector_type(bytes), *storage_type(gd), V, c,
                           gather_select(gathers[c], "i0", [&](size_t k, const std::string& at) {
                             return fmt::format("g{}.u = *reinterpret_cast<const {}*>(in{} + {});", c, vector_type(bytes), k, at);
                           }));
    }
    size_t obytes = dtype_size(rd) * static_cast<size_t>(V);
    ptrs.emplace_back("out0", obytes);
    code += fmt::format(
        "  if ({0}) {{\n"
        "  for (I q = tid; q < (I){1}ull; q += stride) {{\n"
        "    const I i0 = q * {2}u;\n{3}"
        "    union {{ {4} u; {5} v[{2}]; }} po;\n"
        "    #pragma unroll\n"
        "    for (int e = 0; e < {2}; ++e) {{\n"
        "    const I i = i0 + (I)e;\n{6}"
        "    }}\n"
        "    kl_stv(reinterpret_cast<{4}*>(out0 + i0), po.u);\n"
        "  }}\n",
        aligned_condition(ptrs), NV, V, loads, vector_type(obytes), *storage_type(rd), chain(true));
    if (NV * V < N) code += scalar_loop(fmt::format("(I){}u + tid", NV * V));
    code += "  } else {\n" + scalar_loop("tid") + "  }\n";
  } else {
    code += scalar_loop("tid");
  }
  L.source += code + "}\n";
  ir::Node k = L.kernel_node(root, name, ext, {root.outputs[0]}, L.grid_for(NV > 0 ? NV : N, 256), 256);
  k.attrs["grid_stride"] = int64_t{1};  // any grid computes the same: tune_kernel_grids may change it
  return k;
}

}  // namespace kiln::targets::cuda

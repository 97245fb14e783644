#include "runtime/pad_region.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <optional>
#include <set>

namespace kiln::pad_region {

bool is_neg(Kind k) { return k.tag == Tag::neg || (k.tag == Tag::konst && k.c <= kMaskBias); }
bool finite(Kind k) { return k.tag == Tag::konst ? std::isfinite(k.c) : k.tag != Tag::any; }

Sign sign_of(Kind k) {
  if (k.tag == Tag::konst) return k.c > 0 ? Sign::positive : k.c >= 0 ? Sign::nonneg : Sign::unknown;
  return k.tag == Tag::finite ? k.sign : Sign::unknown;
}

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The hull of two ranges (for every L >= 1: min(a + b L, c + d L) >= min(a, c) + min(b, d) L).
Range hull(Range a, Range b) {
  return {std::min(a.lo, b.lo), std::min(a.lo_len, b.lo_len), std::max(a.hi, b.hi), std::max(a.hi_len, b.hi_len)};
}
/// Both bounds at once (the tighter of each where both have no term in L, else `a`'s).
Range meet(Range a, Range b) {
  Range r = a;
  if (b.lo_len == 0 && (a.lo_len == 0 || a.lo == -kInf)) r.lo = std::max(a.lo, b.lo), r.lo_len = a.lo == -kInf ? 0 : a.lo_len;
  if (b.hi_len == 0 && (a.hi_len == 0 || a.hi == kInf)) r.hi = std::min(a.hi, b.hi), r.hi_len = a.hi == kInf ? 0 : a.hi_len;
  return r;
}
}  // namespace

Range range_of(Kind k) {
  if (k.tag == Tag::konst) return std::isfinite(k.c) ? exactly(k.c) : Range{};
  return k.tag == Tag::finite ? k.r : Range{};
}

Kind finite_in(Range r, Sign s) {
  if (r.lo == r.hi && r.lo_len == 0 && r.hi_len == 0 && std::isfinite(r.lo)) return konst(r.lo);
  if (r.lo > -kInf && r.lo_len >= 0) s = std::max(s, r.lo > 0 ? Sign::positive : r.lo >= 0 ? Sign::nonneg : Sign::unknown);
  Kind k = finite_with(s);
  k.r = r;
  return k;
}

Range summed(Range r, bool over_dim, int64_t n) {
  if (!r.bounded()) return {};
  if (over_dim) {
    // At most L terms, each a fixed bound: m * lo >= min(lo, 0) * L for 0 <= m <= L.
    if (r.lo_len != 0 || r.hi_len != 0) return {};  // a sum of L terms growing with L: quadratic
    return {0, std::min(r.lo, 0.0), 0, std::max(r.hi, 0.0)};
  }
  const double m = static_cast<double>(n);
  return {std::min(r.lo * m, 0.0), std::min(r.lo_len * m, 0.0), std::max(r.hi * m, 0.0), std::max(r.hi_len * m, 0.0)};
}

int64_t index_cap(Range r, int64_t rows) {
  if (!r.bounded()) return 0;
  const double top = static_cast<double>(rows) - 1, bottom = -static_cast<double>(rows);
  double cap = static_cast<double>(std::numeric_limits<int64_t>::max());
  // hi + hi_len L <= rows - 1 and lo + lo_len L >= -rows, for 1 <= L <= cap.
  if (r.hi + r.hi_len > top || r.lo + r.lo_len < bottom) return 0;
  if (r.hi_len > 0) cap = std::min(cap, std::floor((top - r.hi) / r.hi_len));
  if (r.lo_len < 0) cap = std::min(cap, std::floor((bottom - r.lo) / r.lo_len));
  return cap >= static_cast<double>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                          : static_cast<int64_t>(cap);
}

Kind join(Kind a, Kind b) {
  if (a.tag == Tag::konst && b.tag == Tag::konst && a.c == b.c) return a;
  if (is_neg(a) && is_neg(b)) return kNeg;
  if (!finite(a) || !finite(b)) return kAny;
  Kind k = finite_with(std::min(sign_of(a), sign_of(b)));
  if (!is_neg(a) && !is_neg(b)) k.r = hull(range_of(a), range_of(b));
  return k;
}

Kind reduced(Kind k, const std::string& op) {
  if (!finite(k) || is_neg(k)) return finite(k) ? kFinite : kAny;
  if (op == "ReduceSumSquare" || op == "ReduceL1" || op == "ReduceL2") return finite_with(Sign::nonneg);
  const bool keeps = op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin";
  return finite_with(keeps ? sign_of(k) : Sign::unknown);
}

std::string describe(Kind k) {
  switch (k.tag) {
    case Tag::konst: return "exactly " + std::to_string(k.c);
    case Tag::neg: return "a bias <= -1e4";
    case Tag::finite:
      if (k.r.bounded())
        return fmt::format("finite values in [{} + {}*L, {} + {}*L] (L: the padded size)", k.r.lo, k.r.lo_len, k.r.hi,
                           k.r.hi_len);
      return "finite values";
    case Tag::any: break;
  }
  return "anything (NaN or infinity possible)";
}

Kind product_sum(Kind x, Kind y) {
  if ((is_zero(x) && finite(y)) || (is_zero(y) && finite(x))) return konst(0);
  return finite(x) && finite(y) ? kFinite : kAny;
}

namespace {

/// A value cast to dtype `t` (the element-wise results' dtype).
Kind as_dtype(double v, DType t) {
  if (t == DType::boolean) return konst(v != 0);
  if (integer_dtype(t)) return std::isfinite(v) ? konst(std::trunc(v)) : kAny;
  if (t == DType::f32) return konst(static_cast<double>(static_cast<float>(v)));
  return konst(v);
}

/// Element-wise operators: their result from constant inputs (nullopt: not evaluated here).
std::optional<double> evaluate(const std::string& op, const std::vector<double>& c) {
  auto x = c.empty() ? 0.0 : c[0];
  auto y = c.size() > 1 ? c[1] : 0.0;
  if (op == "Add" || op == "Sum") {
    double s = 0;
    for (auto v : c) s += v;
    return s;
  }
  if (op == "Sub") return x - y;
  if (op == "Mul") return x * y;
  if (op == "Div") return y != 0 ? std::optional<double>(x / y) : std::nullopt;
  if (op == "Neg") return -x;
  if (op == "Abs") return std::fabs(x);
  if (op == "Relu") return std::max(x, 0.0);
  if (op == "Identity" || op == "Cast" || op == "CastLike" || op == "Dropout") return x;
  if (op == "Not") return x == 0;
  if (op == "Equal") return x == y;
  if (op == "Less") return x < y;
  if (op == "Greater") return x > y;
  if (op == "LessOrEqual") return x <= y;
  if (op == "GreaterOrEqual") return x >= y;
  if (op == "And") return x != 0 && y != 0;
  if (op == "Or") return x != 0 || y != 0;
  if (op == "Where") return c[0] != 0 ? c[1] : c[2];
  if (op == "Max") return *std::max_element(c.begin(), c.end());
  if (op == "Min") return *std::min_element(c.begin(), c.end());
  if (op == "Sqrt") return x >= 0 ? std::optional<double>(std::sqrt(x)) : std::nullopt;
  if (op == "Exp") return std::exp(x);
  if (op == "Erf") return std::erf(x);
  if (op == "Tanh") return std::tanh(x);
  if (op == "Sigmoid") return 1 / (1 + std::exp(-x));
  return std::nullopt;
}

}  // namespace

bool integer_dtype(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8 ||
         t == DType::u16 || t == DType::u32 || t == DType::u64 || t == DType::boolean;
}

/// Element-wise operators this prover knows (the rest of ONNX's element-wise
/// set maps finite to finite: see ew_kind's default).
bool elementwise_op(const std::string& op) {
  static const std::set<std::string> ops = {
      "Abs", "Add", "And", "Cast", "CastLike", "Ceil", "Clip", "Cos", "Div", "Dropout", "Elu", "Equal", "Erf", "Exp",
      "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN",
      "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow",
      "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus", "Softsign", "Sqrt", "Sub",
      "Sum", "Tanh", "Where", "Xor"};
  return ops.count(op) > 0;
}

namespace {

/// ew_kind without bounds (the tag, the constant, the sign).
Kind ew_tag(const std::string& op, const std::vector<Kind>& k, DType out) {
  bool all_const = true;
  std::vector<double> c;
  for (auto x : k) all_const &= x.tag == Tag::konst, c.push_back(x.c);
  if (all_const)
    if (auto v = evaluate(op, c)) return as_dtype(*v, out);
  if (op == "Where") return k[0].tag == Tag::konst ? (k[0].c != 0 ? k[1] : k[2]) : join(k[1], k[2]);
  for (auto x : k)
    if (x.tag == Tag::any) return kAny;
  const Kind x = k[0];
  const Kind y = k.size() > 1 ? k[1] : kAny;
  if (op == "Add" || op == "Sum") {
    // A large negative bias plus finite values stays one (the header's assumption).
    Sign s = Sign::nonneg;
    bool positive = false;
    for (auto v : k) {
      if (is_neg(v)) return kNeg;
      s = std::min(s, sign_of(v));
      positive |= sign_of(v) == Sign::positive;
    }
    return finite_with(s == Sign::nonneg && positive ? Sign::positive : s);
  }
  if (op == "Sub") return is_neg(x) && !is_neg(y) ? kNeg : kFinite;
  if (op == "Mul") {
    if (is_zero(x) || is_zero(y)) return konst(0);
    if ((is_neg(x) && y.tag == Tag::konst && y.c >= 1) || (is_neg(y) && x.tag == Tag::konst && x.c >= 1)) return kNeg;
    return kFinite;
  }
  if (op == "Div") {
    if (y.tag != Tag::konst) return sign_of(y) == Sign::positive ? finite_with(std::min(sign_of(x), Sign::nonneg)) : kAny;
    if (y.c == 0) return kAny;
    if (is_zero(x)) return konst(0);
    return is_neg(x) && y.c > 0 && y.c <= 1 ? kNeg : kFinite;
  }
  if (op == "Mod") return y.tag == Tag::konst && y.c != 0 ? kFinite : kAny;
  if (op == "Max") return std::all_of(k.begin(), k.end(), is_neg) ? kNeg : kFinite;
  if (op == "Min") return std::any_of(k.begin(), k.end(), is_neg) ? kNeg : kFinite;
  if (op == "Relu") return is_neg(x) ? konst(0) : kFinite;
  if (op == "Identity" || op == "Dropout" || ((op == "Cast" || op == "CastLike") && !integer_dtype(out))) return x;
  if (op == "Cast" || op == "CastLike") return is_neg(x) ? kAny : kFinite;  // -3.4e38 as an integer is undefined
  if (op == "Exp") return is_neg(x) ? konst(0) : kAny;                      // finite garbage may overflow
  if (op == "Pow") {
    if (y.tag != Tag::konst || y.c < 0 || y.c != std::trunc(y.c)) return kAny;
    return finite_with(std::fmod(y.c, 2) == 0 ? Sign::nonneg : Sign::unknown);
  }
  // A pole or NaN for garbage of unknown sign.
  if (op == "Sqrt") return sign_of(x) != Sign::unknown ? finite_with(sign_of(x)) : kAny;
  if (op == "Reciprocal") return sign_of(x) == Sign::positive ? finite_with(Sign::positive) : kAny;
  if (op == "Log") return kAny;
  if (op == "Relu" || op == "Abs") return finite_with(Sign::nonneg);
  return kFinite;
}


/// Bounds of an element-wise result from its inputs' bounds (unbounded where no rule applies).
Range ew_range(const std::string& op, const std::vector<Kind>& k, DType out) {
  std::vector<Range> r;
  for (auto x : k) r.push_back(range_of(x));
  const Range x = r.empty() ? Range{} : r[0];
  const Range y = r.size() > 1 ? r[1] : Range{};
  static const std::set<std::string> predicates = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                                   "Not",   "And",  "Or",      "Xor",         "IsNaN", "IsInf"};
  if (predicates.count(op) || out == DType::boolean) return {0, 0, 1, 0};
  if (op == "Add" || op == "Sum") {
    Range s = exactly(0);
    for (auto v : r) s = {s.lo + v.lo, s.lo_len + v.lo_len, s.hi + v.hi, s.hi_len + v.hi_len};
    return s.bounded() ? s : Range{};
  }
  if (op == "Sub") {
    Range s{x.lo - y.hi, x.lo_len - y.hi_len, x.hi - y.lo, x.hi_len - y.lo_len};
    return s.bounded() ? s : Range{};
  }
  if (op == "Neg") return x.bounded() ? Range{-x.hi, -x.hi_len, -x.lo, -x.lo_len} : Range{};
  if (op == "Mul") {
    // Non-negative factors, at most one growing with L (else the bound is quadratic in L).
    const bool nonneg = x.lo >= 0 && x.lo_len >= 0 && y.lo >= 0 && y.lo_len >= 0;
    if (!nonneg || !x.bounded() || !y.bounded() || (x.hi_len != 0 && y.hi_len != 0)) return {};
    return {x.lo_len == 0 && y.lo_len == 0 ? x.lo * y.lo : 0, 0, x.hi * y.hi, x.hi_len * y.hi + y.hi_len * x.hi};
  }
  if (op == "Identity" || op == "Dropout" || op == "Cast" || op == "CastLike" || op == "Floor" || op == "Ceil" ||
      op == "Round") {
    if (!x.bounded()) return {};
    const bool rounds = op == "Floor" || op == "Ceil" || op == "Round" || ((op == "Cast" || op == "CastLike") && integer_dtype(out));
    if (!rounds) return x;
    // Truncation or rounding stays within [floor(lo), ceil(hi)] (a whole term in L keeps floor(a + kL) = floor(a) + kL).
    const double lo_slack = x.lo_len == std::trunc(x.lo_len) ? 0 : 1, hi_slack = x.hi_len == std::trunc(x.hi_len) ? 0 : 1;
    return {std::floor(x.lo) - lo_slack, x.lo_len, std::ceil(x.hi) + hi_slack, x.hi_len};
  }
  if (op == "Relu") return x.bounded() ? Range{0, 0, std::max(x.hi, 0.0), std::max(x.hi_len, 0.0)} : Range{0, 0, kInf, 0};
  if (op == "Where") return r.size() == 3 ? hull(r[1], r[2]) : Range{};
  if (op == "Clip") {
    Range b{};
    if (r.size() > 1 && k[1].tag == Tag::konst) b.lo = k[1].c;
    if (r.size() > 2 && k[2].tag == Tag::konst) b.hi = k[2].c;
    return meet(x, b);
  }
  return {};
}

}  // namespace

/// What an element-wise operator makes of one region whose inputs hold `k`
/// (Cast's and comparisons' results are of dtype `out`), with bounds where known.
Kind ew_kind(const std::string& op, const std::vector<Kind>& k, DType out) {
  Kind t = ew_tag(op, k, out);
  if (t.tag != Tag::finite) return t;
  const Range r = ew_range(op, k, out);
  if (!r.bounded() && !(r.lo > -kInf) && !(r.hi < kInf)) return t;
  return finite_in(r, t.sign);
}

}  // namespace kiln::pad_region

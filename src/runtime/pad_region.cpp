#include "runtime/pad_region.h"

#include <algorithm>
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

Kind join(Kind a, Kind b) {
  if (a.tag == Tag::konst && b.tag == Tag::konst && a.c == b.c) return a;
  if (is_neg(a) && is_neg(b)) return kNeg;
  return finite(a) && finite(b) ? finite_with(std::min(sign_of(a), sign_of(b))) : kAny;
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
    case Tag::finite: return "finite values";
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

/// What an element-wise operator makes of one region whose inputs hold `k`
/// (Cast's and comparisons' results are of dtype `out`).
Kind ew_kind(const std::string& op, const std::vector<Kind>& k, DType out) {
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

}  // namespace kiln::pad_region

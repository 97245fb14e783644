// The abstract domain of the sequence prover (runtime/sequence_prover.h):
// what one region of a tensor holds once its padded positions are filled
// with zeros, and what element-wise operators make of it.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::pad_region {

/// An additive mask at or below this makes a Softmax entry exactly 0 (see
/// sequence_prover.h's assumptions).
inline constexpr double kMaskBias = -1e4;

/// What a region of a tensor holds, from most to least known: one known
/// value everywhere; a large negative additive bias (<= kMaskBias, plus
/// finite values); finite values; anything (NaN or infinity possible).
enum class Tag { konst, neg, finite, any };

/// Signs a finite region is known to have (what a divisor or a Sqrt needs).
enum class Sign { unknown, nonneg, positive };

/// Bounds on a finite region's values as functions of L, the size the dim
/// is padded to (L >= 1): lo + lo_len * L <= v <= hi + hi_len * L. What an
/// index computed from a mask needs (a CumSum of a 0/1 mask lies in [0, L]):
/// a Gather reading a table with it stays in range while L is small enough.
struct Range {
  double lo = -std::numeric_limits<double>::infinity(), lo_len = 0;
  double hi = std::numeric_limits<double>::infinity(), hi_len = 0;
  bool bounded() const { return lo > -std::numeric_limits<double>::infinity() && hi < std::numeric_limits<double>::infinity(); }
};
/// [c, c] (no term in L).
inline Range exactly(double c) { return {c, 0, c, 0}; }

struct Kind {
  Tag tag = Tag::any;
  double c = 0;                ///< the value, for Tag::konst
  Sign sign = Sign::unknown;   ///< for Tag::finite (a constant's sign is its value's)
  Range r{};                   ///< for Tag::finite: bounds known on the values (unbounded by default)
};
inline Kind konst(double c) { return {Tag::konst, c}; }
inline constexpr Kind kNeg{Tag::neg, 0}, kFinite{Tag::finite, 0}, kAny{Tag::any, 0};

/// The bounds a region's values are known to lie in ([c, c] for a constant;
/// unbounded unless finite values were given bounds).
Range range_of(Kind k);
/// Finite values within `r` (a constant when r is one point without terms in L).
Kind finite_in(Range r, Sign s = Sign::unknown);
/// The bounds of a sum of at most L terms (over: the dim, of size L) or of
/// at most n terms (a fixed axis of size n), each within `r`, the empty sum
/// (0) included: the range of a CumSum or ReduceSum over that axis.
Range summed(Range r, bool over_dim, int64_t n);
/// The largest L (>= 1) for which every value within `r` indexes an axis of
/// size `rows` ([-rows, rows - 1], ONNX's Gather range); 0 when not even
/// L = 1 does; INT64_MAX when r does not depend on L.
int64_t index_cap(Range r, int64_t rows);

inline bool is_zero(Kind k) { return k.tag == Tag::konst && k.c == 0; }
/// A large negative additive bias (or below it): masked out by a Softmax.
bool is_neg(Kind k);
/// Finite values (a large negative bias included).
bool finite(Kind k);
/// The sign a region is known to have (Sign::positive: at least a positive
/// constant, as a variance plus epsilon).
Sign sign_of(Kind k);
/// Finite values of sign `s`.
inline Kind finite_with(Sign s) { return {Tag::finite, 0, s}; }
/// What a reduction over other axes (Sum, Mean, Max, Min, L1, L2, SumSquare
/// named by `op`) makes of a region: finite stays finite, a sign is kept.
Kind reduced(Kind k, const std::string& op);
/// The least kind holding both.
Kind join(Kind a, Kind b);
/// What a row-wise operator (normalization, Softmax over another axis) makes of a region: finite stays finite.
inline Kind rowwise(Kind k) { return k.tag == Tag::any ? kAny : kFinite; }
/// A sum of products of regions holding x and y (a contraction): exactly 0
/// when one side is exactly 0 and the other finite.
Kind product_sum(Kind x, Kind y);

/// "exactly 0", "a bias <= -1e4", "finite values", "finite values in [0, 1 + 1*L]", "anything (NaN or
/// infinity possible)", for messages.
std::string describe(Kind k);

/// Integer or bool dtypes.
bool integer_dtype(DType t);

/// The ONNX element-wise operators this domain has rules for.
bool elementwise_op(const std::string& op);

/// What element-wise operator `op` makes of one region whose inputs hold `k`
/// (in input order; results of dtype `out`): constants are evaluated, a
/// large negative bias survives additions of finite values, Exp turns it
/// into exactly 0, multiplication by exactly 0 gives 0, and a division by
/// anything but a nonzero constant or a positive region, Log, or Sqrt /
/// Reciprocal of a region of unknown sign may give anything (an RMS
/// normalization x / Sqrt(ReduceMean(Pow(x, 2)) + eps) stays finite).
Kind ew_kind(const std::string& op, const std::vector<Kind>& k, DType out);

}  // namespace kiln::pad_region

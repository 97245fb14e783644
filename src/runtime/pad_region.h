// The abstract domain of the sequence prover (runtime/sequence_prover.h):
// what one region of a tensor holds once its padded positions are filled
// with zeros, and what element-wise operators make of it.
#pragma once
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

struct Kind {
  Tag tag = Tag::any;
  double c = 0;                ///< the value, for Tag::konst
  Sign sign = Sign::unknown;   ///< for Tag::finite (a constant's sign is its value's)
};
inline Kind konst(double c) { return {Tag::konst, c}; }
inline constexpr Kind kNeg{Tag::neg, 0}, kFinite{Tag::finite, 0}, kAny{Tag::any, 0};

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

/// "exactly 0", "a bias <= -1e4", "finite values", "anything (NaN or infinity possible)", for messages.
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

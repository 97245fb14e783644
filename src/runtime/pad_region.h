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

struct Kind {
  Tag tag = Tag::any;
  double c = 0;  ///< the value, for Tag::konst
};
inline Kind konst(double c) { return {Tag::konst, c}; }
inline constexpr Kind kNeg{Tag::neg, 0}, kFinite{Tag::finite, 0}, kAny{Tag::any, 0};

inline bool is_zero(Kind k) { return k.tag == Tag::konst && k.c == 0; }
/// A large negative additive bias (or below it): masked out by a Softmax.
bool is_neg(Kind k);
/// Finite values (a large negative bias included).
bool finite(Kind k);
/// The least kind holding both.
Kind join(Kind a, Kind b);
/// What a row-wise operator (normalization, Softmax over another axis) makes of a region: finite stays finite.
inline Kind rowwise(Kind k) { return k.tag == Tag::any ? kAny : kFinite; }
/// A sum of products of regions holding x and y (a contraction): exactly 0
/// when one side is exactly 0 and the other finite.
Kind product_sum(Kind x, Kind y);

/// Integer or bool dtypes.
bool integer_dtype(DType t);

/// The ONNX element-wise operators this domain has rules for.
bool elementwise_op(const std::string& op);

/// What element-wise operator `op` makes of one region whose inputs hold `k`
/// (in input order; results of dtype `out`): constants are evaluated, a
/// large negative bias survives additions of finite values, Exp turns it
/// into exactly 0, multiplication by exactly 0 gives 0, and a division by
/// anything but a nonzero constant, Log, Sqrt or Reciprocal of garbage may
/// give anything.
Kind ew_kind(const std::string& op, const std::vector<Kind>& k, DType out);

}  // namespace kiln::pad_region

// Whether padding the rows of a batch dim can change the real rows' results
// (compile side of shape buckets and specialization; runtime/bucket_plan.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "ir/graph.h"

namespace kiln {

/// The sizes a padding prover binds the dim under test to (two primes that
/// no other probe size or product of them equals).
inline constexpr int64_t kProbeSmall = 13, kProbeLarge = 17;

/// One model compiled twice for a padding proof: `a` with the dim under test
/// bound to kProbeSmall, `b` to kProbeLarge.
struct BoundPair {
  ir::Model a, b;
};

/// `m` (inputs not yet bound) compiled twice with `sym` bound to kProbeSmall
/// and kProbeLarge and every other input symbol in `others` to the same
/// distinct primes, each folded completely (shape arithmetic included);
/// nullopt when either compile fails or the two programs do not have the same
/// nodes reading and writing the same values.
std::optional<BoundPair> bound_pair(const ir::Model& m, const std::string& sym, const std::set<std::string>& others);

/// Whether the constant value `v` differs between the two programs (it was
/// computed from the dim's size, or is a constant in one only).
bool constants_differ(const ir::Model& a, const ir::Model& b, ir::ValueId v);

/// Symbolic proof on a model whose values were inferred with the dims left
/// symbolic: every tensor having dim `sym` has it once, at axis 0 (a Reshape
/// that merges it away, a transpose that moves it, or a reduction over it
/// breaks this), every node touching it is a row-wise operator whose axis /
/// axes / perm attributes and axes inputs leave axis 0 alone, no subgraph or
/// Shape reads it, and every graph output has it at axis 0. nullopt (inference
/// failed) proves nothing.
bool batch_rows_independent(const std::optional<ir::Model>& inferred, const std::string& sym);

/// The same rules decided after the shape arithmetic is folded, which is how
/// exporters write a batch-preserving Reshape (Shape -> Gather -> Concat ->
/// Reshape): `m` (inputs not yet bound) is compiled twice with `sym` bound to
/// 13 and to 17 and every other input symbol in `others` to the same distinct
/// primes, each folded completely; the two programs must have the same nodes,
/// the axis carrying the batch is the one whose size differs (13 vs 17), and
/// a constant that differs between them (a folded Reshape target holding the
/// batch size) may only feed a Reshape's shape input. Any other use of the
/// batch's value (a Shape output, arithmetic on it, a Range over it) makes
/// the answer false. False when either compile fails.
bool batch_rows_independent_bound(const ir::Model& m, const std::string& sym, const std::set<std::string>& others);

}  // namespace kiln

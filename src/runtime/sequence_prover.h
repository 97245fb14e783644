// Whether padding a sequence dim (a keep-mask input extended with zeros,
// every other input with zeros) can change the real positions' results
// (compile side of shape specialization; runtime/bucket_plan.cpp).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

/// Abstract interpretation of `m` (inputs not yet bound) compiled for two
/// sizes of `sym` (bound_pair: the axes whose size differs carry the dim;
/// the exporters' Shape -> Gather -> Concat -> Reshape and position-id
/// Range / Slice chains are folded to constants). Every input having the dim
/// is padded with zeros; for each value and each axis carrying the dim the
/// prover tracks what the padded region holds (exactly a constant, zero
/// included; a value <= -1e4, as an additive mask (1 - mask) * large_negative
/// makes it; finite garbage; anything) and whether the real region equals the
/// unpadded run's. Element-wise operators combine these; an operator that
/// mixes positions along the dim is accepted only where the padded operands
/// are exactly neutral: a Softmax over it whose padded entries are <= -1e4
/// (they become exactly 0), a MatMul contracting it with one side exactly 0
/// there and the other finite, a ReduceSum over it of exact zeros. A constant
/// computed from the dim's size may only set a Reshape / Expand target, the end
/// of a prefix Slice or Range along the dim, or be a constant along the dim
/// whose smaller copy is a prefix of the larger (position embeddings). Graph
/// outputs must carry the dim at `output_axes[i]` (-1: not at all) with their
/// real region exact. A CumSum along the dim (not reverse) keeps the real
/// positions exact (each sums its prefix); a product with exactly 0 in the
/// padded region makes it exactly 0 there. Integer values carry bounds that
/// may grow with the padded size L (a CumSum of a 0/1 mask lies in [0, L]): a
/// Gather or GatherElements whose padded indices are not a known constant is
/// accepted when those bounds keep them within the rows read, and
/// `max_size` (may be null) receives the largest L for which they do
/// (INT64_MAX when nothing bounds it; RoBERTa's position ids
/// cumsum(ids != pad) * (ids != pad) + pad index a table of 514 rows: 512).
/// Anything else (Conv, a reverse CumSum, pooling, a mean over the
/// dim, a Gather with unknown indices, a subgraph, an unknown operator) proves
/// nothing: false, and `why` (may be null) says which node and why.
///
/// Assumptions, stated: the unpadded run's values are finite and arithmetic
/// on finite garbage does not overflow; a Softmax row's real entries include
/// one not masked out (the runtime checks that every row of a keep-mask
/// attends to its first position, else it runs the request unpadded:
/// buckets::masks_attend),
/// and a masked entry is at least ~104 below it (exp underflows to exactly 0;
/// any finite score with HF's finfo.min bias, scores within ~9900 of each
/// other with a -1e4 bias).
bool sequence_padding_safe(const ir::Model& m, const std::string& sym, const std::set<std::string>& others,
                           const std::vector<int>& output_axes, std::string* why = nullptr,
                           int64_t* max_size = nullptr);

/// Names of the graph inputs that can serve as a keep-mask for `sym`: integer
/// or bool dtype, a name containing "mask" (any case), the dim among their
/// axes. Empty when there is none (sequence padding then is never tried).
std::vector<std::string> keep_mask_inputs(const ir::Model& m, const std::string& sym);

}  // namespace kiln

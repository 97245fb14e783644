// Einsum's equation as label lists, shared by the reference kernel
// (src/ops/einsum.cpp) and the passes that rewrite Einsum into other
// operators (src/passes/einsum_to_matmul.cpp), so the equation has one parser.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace kiln::ops {

/// Einsum-12's equation resolved for given input ranks: one label id per dim
/// of each input and of the output. Ids 0..51 are the letters ('a'..'z' then
/// 'A'..'Z'); 52 + j is the j-th dim that "..." stands for (right aligned
/// across inputs). A letter repeated within one input's list takes that
/// input's diagonal; a label absent from `output` is summed over. Without
/// "->" the output is the ellipsis dims, then the letters occurring exactly
/// once, in ASCII order (numpy's rule).
struct EinsumLabels {
  std::vector<std::vector<int>> inputs;  ///< per input, one id per dim
  std::vector<int> output;               ///< one id per output dim
};

/// Parses n's "equation" for inputs of the given ranks. Throws
/// Error(invalid_model) naming the node when the attribute is missing, a
/// term is malformed (a bad ellipsis, a character that is not a letter), the
/// number of terms is not the number of inputs, a term does not fit its
/// input's rank, or an output label is repeated or in no input.
EinsumLabels einsum_labels(const ir::Node& n, const std::vector<int64_t>& ranks);

}  // namespace kiln::ops

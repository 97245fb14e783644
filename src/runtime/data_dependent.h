// Dims whose size comes from tensor values (NonZero, NonMaxSuppression,
// TopK with a tensor K, ...), and the bound the model puts on them: what
// `kiln inspect` lists (issue 16, "data-dependent dims"). Compile side.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

/// One output axis of a node whose size is known only once the node has run.
struct DataDependentDim {
  std::string node;   ///< the node's name ("NonMaxSuppression #12" when it has none)
  std::string op;     ///< its operator
  std::string value;  ///< the output
  int axis = 0;       ///< the axis of that output
  std::string bound;  ///< "<= 300 = 1 batch x 3 classes x 100 (max_output_boxes_per_class)", or "" when unbounded
  int64_t max = -1;   ///< the bound as a number where every factor is a known size, else -1
};

/// The data-dependent dims of `m` (an imported main graph, inputs bound or
/// not): the outputs of NonZero, NonMaxSuppression, TopK whose K does not
/// fold to a constant, Unique, Compress and Loop's scan outputs whose size
/// shape inference leaves open, each with the bound the operator implies
/// (NonMaxSuppression: batches x classes x min(max_output_boxes_per_class,
/// boxes); NonZero: the input's element count; TopK, Compress: the axis's
/// size; Unique: the element count; Loop: none). Infers shapes on a copy;
/// empty when inference fails (the compile reports why).
std::vector<DataDependentDim> data_dependent_dims(const ir::Model& m);

}  // namespace kiln

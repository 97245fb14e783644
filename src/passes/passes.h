// Graph passes, one per file. Each takes the model in place.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/memory_plan.h"

namespace kiln::passes {

/// Fixes the dims of main-graph inputs from user-given shapes. Each given
/// shape must have the input's rank and agree with its static dims. A symbol
/// fixed in one input is fixed to the same size in every other input using it.
/// Throws Error(invalid_option) naming the input (and listing the model's
/// inputs for an unknown name).
void bind_input_shapes(ir::Model& m, const std::map<std::string, std::vector<int64_t>>& shapes);

struct FoldStats {
  int folded_nodes = 0;   ///< nodes evaluated at compile time and removed
  int inferred = 0;       ///< values whose type was inferred
};

/// Shape inference with constant propagation, in topological order: every
/// node's output dtype/shape from src/ops inference (merged with value_info
/// hints), and every node whose inputs are all constants (or a Shape/Size of a
/// static shape) evaluated by its reference kernel and replaced by constants,
/// as long as each folded output is at most `max_fold_bytes`. Subgraphs are
/// inferred too (not folded). Throws the inference error of the first node
/// that fails (invalid_model / unsupported, naming the node).
FoldStats infer_and_fold(ir::Model& m, uint64_t max_fold_bytes = 64ull << 20);

/// Removes nodes none of whose outputs reach a graph output (main graph and
/// subgraphs), and drops constants nobody uses. Returns the number of nodes removed.
int eliminate_dead_code(ir::Model& m);

/// Static memory plan for the main graph: every node output with a static
/// shape that is not a graph output gets an arena slot; slots are reused
/// between values whose lifetimes (producer .. last consumer, in node order)
/// do not overlap. Placement is greedy by size (largest first, lowest offset
/// that fits), the offset-calculation heuristic of Pisarchyk & Lee,
/// "Efficient Memory Management for Deep Neural Net Inference" (2020).
/// Offsets are 64-byte aligned.
ir::MemoryPlan plan_memory(const ir::Model& m);

}  // namespace kiln::passes

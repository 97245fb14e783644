// Discrete selection in the precision check (precision_check.h; docs/cuda.md,
// "Precision check"): which values of a graph depend on an integer choice
// made from float data, and which float values decide those choices.
//
// A detector ends in selection: TopK / NonMaxSuppression / NonZero / ArgMax
// pick indices from scores, Gather takes the rows they name, an If runs a
// branch chosen by a comparison of float data. Where two candidates are
// nearly tied (random weights make scores tie everywhere), one 16-bit
// rounding flips the choice, and everything after it differs wholesale from
// the float32 reference: that is no node amplifying rounding error, and the
// check must not blame (and keep in float32) the nodes before it. So:
//
//  - *Tainted* values are those whose content can differ between the float32
//    run and the emulated 16-bit one: float activations and float model
//    inputs, and every value computed from a tainted one (Shape and Size
//    excepted: shapes are static in the check). *Discrete* tainted values are
//    the tainted integer / bool ones (a comparison of float data, a Cast of
//    it, their sums and reshapes).
//  - A *selecting node* makes a choice from tainted data: TopK (its indices
//    output), ArgMax, ArgMin, NonMaxSuppression, NonZero, a Cast of float
//    data to an integer type, and any node reading a discrete tainted value
//    as an index, a shape, a count or a condition (Gather's indices, Slice's
//    starts / ends, Reshape's shape, an If's condition, a Loop's trip count
//    or condition, ...: every input that is not element-wise data, see
//    kDiscreteData in the .cpp). A Loop whose body computes its continue
//    condition from tainted data, and an If / Loop / Scan with a selecting
//    node in a body, select too.
//  - *Selection-dependent* values are the selecting nodes' discrete outputs
//    (all outputs of a selecting If / Loop / Scan / Gather-by-index ...) and
//    every value computed from one. They are not compared: no node is blamed
//    for their error, and they do not count toward the output error.
//  - The selecting node's *boundary values* are the float values that decide
//    its choice, found by walking back from its tainted inputs through
//    discrete values (NonZero(Greater(scores, t)): scores); for a selection
//    inside a body, the float values the control-flow node reads. They are
//    the check's outputs for the accumulation rule, with the model outputs
//    that are not selection-dependent: the check keeps their error within
//    the bound, which is what keeps the choice as close to float32 as 16-bit
//    rounding allows.
//
// Element-wise use of a discrete value is not a selection: Where(x > t, a, b)
// and x * Cast(x > 0) differ from float32 only at the elements whose
// comparison flipped, and are compared as before.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

/// A selecting node and the float values that decide its choice.
struct SelectionBoundary {
  std::string node;                 ///< precision_node_key of the main-graph node (a control-flow node for a selection in its body)
  std::string op;                   ///< its ONNX op_type
  std::vector<ir::ValueId> values;  ///< main-graph float values deciding it, not selection-dependent (may be empty: constants)
};

/// What analyse_selection found.
struct SelectionAnalysis {
  std::vector<bool> dependent;  ///< per value id of the model (every graph): selection-dependent
  int dependent_floats = 0;     ///< main-graph float node outputs among them (the values the check no longer compares)
  std::vector<SelectionBoundary> boundaries;  ///< selecting main-graph nodes, graph order
  bool any() const { return !boundaries.empty(); }
};

/// Analyses `m` (main graph in topological order; bodies read outer values by
/// id). Pure: never throws for a well-formed model.
SelectionAnalysis analyse_selection(const ir::Model& m);

}  // namespace kiln

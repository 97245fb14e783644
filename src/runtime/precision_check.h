// The precision check of 16-bit cuda compiles (compile side; docs/cuda.md,
// "Precision check"): which nodes to keep in float32.
//
// The graph the cuda precision pass is about to convert (shapes static) is
// run on the ref kernels with the same sample inputs: once as written, in
// float32 (the reference, kept for every round), and once per round as the
// 16-bit program emulated in float32 (targets/cuda/compile/precision.h:
// convert_precision, then emulate_16bit: every 16-bit value rounded to the
// 16-bit type where it is made; the check's executor, precision_check_run.h,
// rounds each such value in place right after its node, bit for bit what a
// Cast pair would give, and multiplies through oneDNN's sgemm). The
// emulation is used with and without a GPU, so a cross-compiled artifact
// keeps the same nodes in float32 as one compiled on the GPU, and the cache
// key covers the check through its settings alone.
//
// Every value is compared with its reference by name: its error is
// max|emulated - reference| / max|reference| (the scale of `kiln verify`'s
// tolerance). A node amplifies when its output's error is above the bound
// (the precision's verify tolerance: fp16 1e-2, bf16 4e-2) and more than
// kGrowth times the error its float inputs bring (at least one 16-bit
// rounding: 2^-11 for fp16, 2^-8 for bf16): cancellation (a - b of nearly
// equal 16-bit values), a steep Sigmoid / Exp / Pow of a rounded argument, an
// overflow to infinity. Such a node is kept in float32 together with the
// nearest 16-bit computing nodes that feed it (through data movement and
// nodes already float32): their rounding is what it amplifies. The check
// then runs again with those nodes in float32, up to kMaxRounds times, until
// no node amplifies.
//
// If / Loop / Scan run with their bodies as written (float32, as on cuda;
// precision_check_run.h); their outputs are compared, their bodies' values
// are not, and a control-flow node whose outputs amplify what it reads (its
// inputs and the outer values its bodies read) keeps the 16-bit nodes
// feeding it in float32 (it is float32 already).
//
// Discrete selection (precision_selection.h: TopK / ArgMax / NMS / NonZero
// indices, a Gather by them, an If on a comparison of float data) is a
// boundary, not an amplifier: selection-dependent values are not compared,
// and the output error that drives the accumulation rule is taken over the
// model outputs that are not selection-dependent and the float values
// deciding each selection (PrecisionCheckResult::boundaries). A model
// without selecting nodes is checked exactly as before.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln {

/// A node the precision check keeps in float32, and why.
struct PrecisionCheckNode {
  std::string node;    ///< precision_node_key: the ONNX node name, else its first output's name
  std::string op;      ///< ONNX op_type
  std::string reason;  ///< "amplifies ..." or "feeds 'X', which amplifies its rounding"
  double error = 0;        ///< max relative error of its output in the 16-bit emulation (the round it was flagged)
  double input_error = 0;  ///< the error its inputs brought (at least one rounding)
  int round = 0;           ///< 1-based round of the check that kept it
};

/// A selecting node that bounds the check (precision_selection.h): what
/// follows its choice is not compared; the float values deciding it are
/// among the check's outputs.
struct PrecisionCheckBoundary {
  std::string node;                 ///< precision_node_key of the selecting node
  std::string op;                   ///< its ONNX op_type
  std::vector<std::string> values;  ///< the float values deciding its choice (names; may be empty)
  double error = 0;                 ///< their max relative error in the check's last round
};

/// What the precision check did; stored in the artifact's metadata JSON
/// ("precision_check") and shown by `kiln inspect`.
struct PrecisionCheckResult {
  std::string state = "off";  ///< "checked", "off" (SessionOptions::precision_check), "skipped" (see reason)
  std::string precision;      ///< "fp16" or "bf16"
  std::string method;         ///< how the 16-bit program was run
  std::string inputs;         ///< where the sample inputs came from
  std::string reason;         ///< why it was skipped
  double bound = 0;           ///< error bound of an amplifying node
  double growth = 0;          ///< growth factor over the input error
  int nodes = 0;              ///< main-graph nodes checked (before lowering)
  int rounds = 0;             ///< emulated runs
  double output_error_before = 0;  ///< max relative error over the model's outputs, nothing kept
  double output_error_after = 0;   ///< the same with the kept nodes in float32
  std::vector<PrecisionCheckNode> kept;
  int control_flow = 0;         ///< If / Loop / Scan nodes run with their (float32) bodies
  int selection_dependent = 0;  ///< float values not compared: they depend on a selection (see boundaries)
  std::vector<PrecisionCheckBoundary> boundaries;  ///< the selecting nodes, graph order (empty: none)
  double ms = 0;
  /// The precision_node_key of every kept node.
  std::set<std::string> keep_set() const;
  /// One line for notes: what was kept and why, or that nothing was.
  std::string note() const;
  /// "; N selection-dependent values not compared, bounded by ...", or "" without boundaries.
  std::string selection_note() const;
  nlohmann::json to_json() const;
};

/// Runs the check on `m` (the cuda graph just before the precision pass:
/// main graph static-shaped and float32, bodies as written) for `to` (DType::f16 or
/// DType::bf16). `given`: sample inputs by name (SessionOptions::
/// precision_check_inputs; one whose dtype or shape differs from the
/// model's input is replaced by a random one, and `inputs` says so).
/// Random inputs: floats uniform in [0, 1), integers in [0, 9] and below the
/// axis size of any Gather they index (token ids), all ones for an integer
/// input whose name contains "mask"; seed 0.
/// If / Loop / Scan run with their bodies as written (float32, as on cuda);
/// their outputs are compared, their bodies' values are not.
/// Never throws for a model the ref kernels cannot run (an operator without
/// a reference kernel, in a body too, an input it cannot make): the
/// result is "skipped" with the reason; throws Error(internal) for `to`
/// another dtype. `threads` > 0 limits the ref runs' threads.
PrecisionCheckResult check_precision(const ir::Model& m, DType to, const std::map<std::string, Tensor>& given,
                                     int threads = 0);

}  // namespace kiln

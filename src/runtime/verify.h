// kiln verify (compile side): a model compiled for a target against the same
// model on the ref target, value by value, on the same inputs
// (docs/cli.md, "kiln verify").
//
// Both programs come from one ONNX import, so most intermediate values keep
// their ONNX names. Every value a node of the compiled program writes is
// matched by name to a value of the ref program, through the renamings the
// targets make (cpu: "X/blocked", a channel-blocked copy of X; cuda:
// "X_nhwc", X channels-last, and "X_f16" / "X_bf16" / "X_f32", X cast to
// another float type), then read back in the ref value's layout and dtype and
// compared. A fused node is compared at its boundary: its output is the value
// the last node of the fused group made in the ref program; the values inside
// the group exist only in the ref program and are not compared. What cannot be
// compared is counted with its reason (a value the lowering made with no ref
// counterpart, another shape, another dtype kind).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/options.h"
#include "kiln/session.h"
#include "kiln/tensor.h"

namespace kiln::verify {

/// When a compared value passes: max|got - ref| <= atol + rtol * max|ref|
/// (elementwise errors, max|ref| over the whole value: the error relative to
/// the value's scale, so that values near zero do not dominate).
struct Tolerance {
  double rtol = 1e-4;
  double atol = 1e-5;
  /// The defaults for a precision: fp32 1e-4 / 1e-5; fp32 with TF32 (10-bit
  /// mantissas in matmuls and convolutions) 1e-2 / 1e-4; fp16 1e-2 / 1e-3;
  /// bf16 (8-bit mantissa) 4e-2 / 4e-3 (rtol / atol).
  static Tolerance defaults(Precision p, bool tf32);
};

/// How a compiled value is turned into the layout of its ref counterpart.
enum class Readback {
  same,     ///< the ref value's shape already (a 16-bit one is widened)
  blocked,  ///< cpu channel-blocked (flat [bytes/4]), reordered to the plain layout
  nhwc,     ///< cuda channels-last [N,H,W,C], transposed back to [N,C,H,W]
};
/// "same", "blocked", "nhwc".
const char* readback_name(Readback r);

/// A main-graph node output of the compiled program and the ref value it is
/// compared with, found from the two programs' IR alone (match_values).
struct Match {
  size_t node = 0;                    ///< index of the producing node in the compiled main graph
  ir::ValueId value = ir::kNoValue;   ///< the compiled program's value
  std::string ref_name;               ///< the ref value's name; empty when skipped
  Readback readback = Readback::same;
  std::string skip;                   ///< why it is not compared; empty when it is
};

/// Matches every output of every main-graph node of `compiled` (in node
/// order) with a value of `ref` (a node output, graph input or constant of
/// its main graph): the same name, else the name without the targets'
/// renaming suffixes ("/blocked", "_nhwc", "_f16", "_bf16", "_f32", which
/// may stack, e.g. "x_f16_nhwc"); then the shape (for nhwc: the ref shape
/// permuted [0,2,3,1]; for blocked: a flat float32 value at least as large)
/// and the dtype kind (float with float, else the same dtype) must agree.
/// A value that does not is returned with `skip` set. Never throws for a
/// valid model.
std::vector<Match> match_values(const ir::Model& compiled, const ir::Model& ref);

/// Statistics of one compared value (errors are float64; dims are elements).
struct ValueResult {
  size_t node = 0;           ///< index of the node in the compiled main graph (0 in an output row)
  std::string node_name;     ///< the node's name, or "op #index"
  std::string op;            ///< "domain::op_type" for target operators, else the ONNX op_type
  std::string value;         ///< the compiled value's name
  std::string ref_value;     ///< the ref value it was compared with
  std::string ref_node;      ///< the ref node that produced it ("" for a graph input or constant)
  std::string ref_op;        ///< that node's op_type
  std::string dtype;         ///< the compiled value's dtype ("float16", ...)
  std::vector<int64_t> shape;  ///< the ref value's shape
  Readback readback = Readback::same;
  double max_abs = 0;        ///< max |got - ref| (inf where exactly one side is NaN or an inf differs)
  double ref_max_abs = 0;    ///< max |ref| over the finite elements
  double max_rel = 0;        ///< max_abs / ref_max_abs (0 when both are 0, inf when only ref_max_abs is)
  int64_t bad = 0;           ///< elements whose error exceeds the tolerance
  int64_t saturated = 0;     ///< 16-bit values: elements held saturated (beyond the range in ref), not counted as errors
  int64_t elements = 0;
  bool exact = false;        ///< integers and bools: compared for equality
  bool pass = true;
};

/// Compares `got` with `ref`, element by element, both of `ref`'s element
/// count: float values with `tol` (NaN equals NaN, +-inf equals itself),
/// integer and bool values exactly. Fills the statistics of `r` (not its names).
/// `held`: the dtype the compiled program holds the value in. For float16 /
/// bfloat16, an element beyond the type's range in ref that the program
/// holds saturated (support/half.h: held_saturated, e.g. a mask's -3.4e38 as
/// -65504) is counted in `saturated`, not as an error, and left out of
/// ref_max_abs: the values read from it are compared after it, and the
/// model's outputs (float32 as declared) count it as any error.
/// Throws Error(internal) when the counts differ.
void compare_values(const std::vector<double>& got, const std::vector<double>& ref, bool exact, const Tolerance& tol,
                    ValueResult& r, DType held = DType::f32);

/// Every element of `t` (any numeric dtype, float16 / bfloat16 widened) as a double.
/// Throws Error(unsupported) for a dtype that is not numeric (strings).
std::vector<double> as_doubles(const Tensor& t);

/// `got` (a compiled value as it ran) as doubles in the layout of the ref
/// value of shape `ref_shape`, per `readback`; std::nullopt with `why` set
/// when it cannot be read back. `producer` is the node that wrote it (its
/// layout attributes describe a cpu blocked value).
std::optional<std::vector<double>> read_back(Readback readback, const ir::Node& producer, const Tensor& got,
                                             const std::vector<int64_t>& ref_shape, std::string& why);

/// A value that was not compared, and why.
struct Skipped {
  std::string node, op, value, reason;
};

/// The result of one verification.
struct Report {
  std::string target;                 ///< "cpu", "cuda", "ref"
  std::string precision;              ///< precision_text ("fp32", "fp32+tf32", "fp16", "bf16")
  Tolerance tol;
  int nodes = 0;                      ///< main-graph nodes of the compiled program
  std::vector<ValueResult> values;    ///< compared values, in execution order
  std::vector<ValueResult> outputs;   ///< the model's outputs (the two runs' results), in output order
  std::vector<Skipped> skipped;       ///< values not compared, in execution order
  std::map<std::string, int> skip_counts;  ///< reason kind -> count (see Report::skip_kind)
  int first_failure = -1;             ///< index into `values` of the first failing value; -1 when none
  std::vector<ReferenceNode> reference_nodes;  ///< compiled nodes on reference kernels (Session::reference_nodes)
  std::vector<std::string> notes;
  double compile_ms = 0;              ///< both compiles (wall clock)
  double run_ms = 0;                  ///< both observed runs (wall clock, comparisons included)
  /// True when every compared value and every output passes.
  bool ok() const;
};

/// What follows the first failure: how the error grows from there.
struct Downstream {
  int compared = 0;     ///< values compared after the first failing one
  int failing = 0;      ///< of which fail
  int worst = -1;       ///< index into Report::values of the largest max_rel after the first failure; -1 when none
  double worst_rel = 0;
};
/// Downstream of r.first_failure (all zero / -1 when nothing fails).
Downstream downstream(const Report& r);

/// Compiles `onnx_path` in memory (never through the cache) for opt.target
/// with opt.precision / allow_tf32 / tuning / arch, and for the ref target,
/// both for the shapes of `inputs` (opt.input_shapes may fix more) and the
/// values of any value-guard input, runs each once on `inputs` with every
/// intermediate value read as its node finishes (host targets: without the
/// arena; cuda: node by node, outside the CUDA graph), compares each matched
/// value and each output, and returns the report. `inputs` must name every
/// model input. `threads` > 0 limits the host runs' threads.
/// Throws Error: invalid_option (a precision the target lacks, ...),
/// invalid_model, unsupported, invalid_input (inputs that do not fit the
/// model), io, and the device errors of loading a cuda program.
Report verify_model(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                    const std::map<std::string, Tensor>& inputs, const Tolerance& tol, int threads = 0);

}  // namespace kiln::verify

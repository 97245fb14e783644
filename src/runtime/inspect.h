// What `kiln inspect --json` and `kiln check --json` print, as JSON values, so
// that the command line (tools/kiln) and the Python module (kiln.inspect,
// kiln.check) give one answer. Run side (kiln_runtime): reads artifacts only;
// inspecting an ONNX model needs the importer and lives on the compile side
// (runtime/inspect_model.h).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "artifact/artifact.h"
#include "ir/graph.h"
#include "kiln/options.h"
#include "kiln/session.h"
#include "targets/host.h"

namespace kiln {

/// True when `path` is named *.kiln or starts with the .kiln magic ("KILN"):
/// a damaged artifact must still be reported as one, so the name counts too.
bool is_artifact(const std::string& path);

/// TensorInfo -> {"name", "dtype", "shape"}; a symbolic dim is its symbol's
/// name, or "?" when unnamed.
nlohmann::ordered_json info_json(const TensorInfo& t);

/// Operator histogram of `main` and its subgraphs (op -> count, "domain.op"
/// outside the default domain, sorted by name) and their node count.
std::pair<nlohmann::ordered_json, size_t> operator_histogram(ir::Graph& main);

/// Number and total bytes of the constants (weights) of `m`'s values.
std::pair<int, uint64_t> constant_totals(const ir::Model& m);

/// The device partition of a program (ir::Model::segments) as a JSON array,
/// one entry per segment: {"device" ("cuda" | "host"), "first_node",
/// "node_count"}, host segments also {"nodes": [{"name", "op"}],
/// "copies_to_host" / "copies_to_device": [{"value", "dtype", "shape",
/// "bytes"}]}. Empty: every node on the program's target.
nlohmann::ordered_json segments_json(const ir::Model& m);

/// The conditional nodes of a cuda program as a JSON array. kiln.cuda.If (an
/// If run inside its CUDA graph): {"node", "index" (main-graph node), "type"
/// ("IF/else"), "condition" (value name), "then_branch" / "else_branch":
/// {"nodes", "operators" (op -> count), "float_dtypes" (the float dtypes its
/// nodes store, e.g. ["float32"]: bodies stay float32 in 16-bit programs)}}.
/// kiln.cuda.Loop (an ONNX Loop or Scan): {"node", "index", "type"
/// ("WHILE"), "source_op" ("Loop" / "Scan"), "trip_count" (-1: decided at
/// run time), "max_trip" / "condition" (the Loop's M / cond value names, ""
/// when absent), "carried" (count), "body": {"nodes", "operators",
/// "float_dtypes"}}. Empty: none.
nlohmann::ordered_json conditionals_json(const ir::Model& m);

/// Reference-kernel nodes as a JSON array of {"node", "op", "reason"}.
nlohmann::ordered_json reference_json(const std::vector<ReferenceNode>& nodes);

/// `kiln inspect --json ART.kiln`: {"artifact", "file_bytes", "compat" (every
/// compatibility field), "inputs", "outputs", "nodes", "operators" (op ->
/// count, "domain.op" outside the default domain, subgraphs included),
/// "constants", "constant_bytes", "constants_stored_bytes" (distinct buffers
/// over every program, as stored), "arena_bytes", "buckets" {"dims",
/// "programs" (each with its "segments")}, "reference_nodes", "segments"
/// (segments_json: host fallback of a cuda program), "conditional_nodes"
/// (conditionals_json), "library_algorithms" (cuda: cuBLASLt /
/// cuDNN decisions stored vs chosen at load, and "depthwise_convolutions":
/// {"kiln_kernel", "cudnn"}, how many run on kiln's generated kernel and how
/// many on cuDNN), "kernels" (cuda: cubins checked
/// against every Kernel node's digest; null elsewhere or without CUDA),
/// "metadata"}. Reads the whole file and validates every checksum. Throws
/// Error: io, corrupt_artifact (a damaged section or cubin).
nlohmann::ordered_json inspect_artifact(const std::string& path);

/// `kiln check ART.kiln [--target T]`: the compatibility block against this
/// machine, from the header and block only.
struct CheckReport {
  std::string path;
  artifact::CompatInfo compat;              ///< the artifact's block
  Target target;                            ///< the target it was checked for
  std::vector<targets::Mismatch> mismatches;  ///< empty: runnable here
  std::vector<std::string> notes;           ///< when runnable (e.g. "runs through its PTX")
};

/// Reads `path`'s compatibility block and compares it with this machine for
/// `target_text` (empty: the artifact's own target). Throws Error: io,
/// corrupt_artifact (damaged header or block), invalid_option (a bad target).
CheckReport check_artifact(const std::string& path, const std::string& target_text);

/// {"artifact", "runnable", "target", "mismatches": [{"field", "artifact",
/// "here"}], "notes", "reason"} ("reason": the mismatches as one sentence,
/// "" when runnable).
nlohmann::ordered_json check_json(const CheckReport& r);

}  // namespace kiln

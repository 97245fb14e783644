// kiln.inspect / kiln.check for the Python module (JSON text; the Python
// layer turns it into dicts).
#pragma once
#include <string>

namespace kiln::py {

/// True when `path` is named *.kiln or starts with the .kiln magic ("KILN").
bool is_artifact(const std::string& path);

/// `kiln inspect --json PATH`: for an artifact (.kiln) its compatibility block,
/// inputs/outputs, operators, constants, buckets and metadata (every checksum
/// validated); for an ONNX model its inputs/outputs (symbolic dims by name),
/// opset, operators and weights. Throws kiln::Error: io, corrupt_artifact,
/// invalid_model, unsupported.
std::string inspect_json(const std::string& path);

/// `kiln check --json PATH [--target T]`: {"runnable", "target", "mismatches":
/// [{"field","artifact","here"}], "notes", "reason"} from the header and
/// compatibility block only. `target` empty: the artifact's own. Throws
/// kiln::Error: io, corrupt_artifact, invalid_option (a bad target).
std::string check_json(const std::string& path, const std::string& target);

}  // namespace kiln::py

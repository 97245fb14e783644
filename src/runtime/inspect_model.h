// `kiln inspect --json MODEL.onnx` as a JSON value. Compile side
// (kiln_compiler): it imports the model; artifacts are runtime/inspect.h.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace kiln {

/// `kiln inspect --json MODEL.onnx`: what a user needs before compiling:
/// {"model", "opset" (default domain), "inputs", "outputs" ({"name", "dtype",
/// "shape"}, symbolic dims by name), "nodes", "operators" (op -> count,
/// subgraphs included), "weights", "weight_bytes", "symbolic_dims" (what
/// --shape / --dim must fix; an unnamed one as "input[axis]"),
/// "data_dependent_dims" ([{"node", "op", "value", "axis", "bound" (text or
/// null), "max" (number or null)}]: sizes known only at run time,
/// runtime/data_dependent.h)}. Imports the
/// model; compiles nothing. Throws Error: io, invalid_model, unsupported.
nlohmann::ordered_json inspect_model(const std::string& path);

/// inspect_artifact(path) for an artifact (is_artifact), else inspect_model.
nlohmann::ordered_json inspect_file(const std::string& path);

}  // namespace kiln

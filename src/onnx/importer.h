// ONNX importer: ModelProto (onnx.proto, IR version 3+) -> kiln::ir::Model.
#pragma once
#include <filesystem>
#include <string>

#include "ir/graph.h"

namespace kiln::onnx_import {

/// Default-domain opsets the importer accepts ([kMinOpset, kMaxOpset]).
constexpr int kMinOpset = 7;
constexpr int kMaxOpset = 22;

/// Imports an .onnx file. Initializers become constant values (external data
/// is read from files next to the model, relative paths only); graph inputs
/// that are also initializers are treated as constants (their initializer is
/// the value) and are not model inputs; value_info types are kept as hints.
/// Each node goes through its family parser (onnx/parsers/), which
/// normalises opset differences.
/// Throws Error(io) when the file cannot be read, Error(invalid_model) for a
/// file that is not a valid ONNX model (message names the file and the node or
/// tensor at fault), Error(unsupported) naming operator, domain, opset and node.
ir::Model import_file(const std::filesystem::path& path);

/// Same for bytes in memory; `base_dir` resolves external data, `what` names the source in messages.
ir::Model import_bytes(const void* data, size_t size, const std::filesystem::path& base_dir,
                       const std::string& what);

/// Digest (XXH3-128 hex) of everything that defines the model: the .onnx bytes
/// and the bytes of every external-data file it references (found with a
/// lightweight protobuf wire-format scan that skips tensor payloads, so no full
/// parse is needed). Throws Error(io) / Error(invalid_model).
std::string model_digest(const std::filesystem::path& path);

}  // namespace kiln::onnx_import

// Compile side of the runtime: ONNX file -> CompiledProgram (internal).
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/compile.h"
#include "kiln/options.h"

namespace kiln {

/// Canonical text of every option that changes the compiled program
/// (target, precision, tuning, input shapes); digested into the key.
std::string options_text(const SessionOptions& opt);

/// The cache-key fields for a model digest and options: model digest, target,
/// device arch, required ISA, library versions, precision, tuning, options
/// digest, kiln version, artifact format version.
std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt);

/// Imports, runs the passes for opt.target and builds the program with its
/// compatibility block (cache_key recorded). Fills `report` (may be null).
artifact::CompiledProgram compile_program(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                                          const std::string& model_digest, const std::string& cache_key,
                                          CompileResult* report);

}  // namespace kiln

// The .kiln artifact: writer, reader, compatibility block.
// Layout, field by field: docs/file-format.md.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/memory_plan.h"

namespace kiln::artifact {

/// Current artifact format version; readers refuse any other.
constexpr uint32_t kFormatVersion = 1;

/// The compatibility block: what an artifact was built from and for. Read
/// without reading the rest of the file (kiln check, the cache).
struct CompatInfo {
  std::string kiln_version;
  uint32_t format_version = kFormatVersion;
  std::string target;          ///< "cpu" | "ref" | "cuda"
  std::string device_arch;     ///< "x86-64" | "sm_90" ...
  std::string device_name;     ///< CPU model name / GPU name (informative, not checked)
  std::vector<std::string> cpu_isa;  ///< ISA features the program needs ("avx2", ...)
  std::vector<std::pair<std::string, std::string>> library_versions;  ///< ("onednn","2.6.3")...
  std::string precision;       ///< "fp32" | "fp16" | "bf16"
  std::string tuning;          ///< "none" | "heuristic" | "fast" | "exhaustive"
  std::string options_digest;  ///< XXH3-128 hex of every compile option
  std::string model_digest;    ///< XXH3-128 hex of the model graph and weight bytes
  std::string input_signature; ///< "x:float32[1,3,224,224];y:int64[N]"
  std::string cache_key;       ///< the cache key this artifact was published under ("" if none)

  /// Every field as (name, value) text, in a fixed order, for check/explain/inspect.
  std::vector<std::pair<std::string, std::string>> fields() const;
};

/// Everything a compiled program holds. `model` carries the values (constants
/// included, data in Value::constant), the main graph and subgraphs.
struct CompiledProgram {
  CompatInfo compat;
  ir::Model model;
  ir::MemoryPlan plan;          ///< empty for the ref target
  std::string metadata_json;    ///< human metadata (JSON object text)
};

/// Serialises to the .kiln byte layout. Constants are 64-byte aligned in the
/// file. Throws Error(internal) for a program that cannot be serialised.
std::vector<uint8_t> serialize(const CompiledProgram& p);

/// serialize() + atomic_write(): the file appears whole or not at all. Throws Error(io).
void write_file(const std::filesystem::path& path, const CompiledProgram& p);

/// Reads the header and compatibility block only (no section is read or
/// checksummed but the compat block's own). Throws Error(corrupt_artifact)
/// naming the region (header, compatibility block) for a bad magic, version,
/// size or checksum; Error(io) when the file cannot be read.
CompatInfo read_compat(const std::filesystem::path& path);

/// Reads and validates a whole artifact through mmap: header, compat block,
/// every section checksum, FlatBuffers verification of each table. Constant
/// tensors view the mapping (no copy); they keep it alive. Throws
/// Error(corrupt_artifact) naming the section that is damaged; Error(io).
CompiledProgram read_file(const std::filesystem::path& path);

/// read_file() on bytes in memory (used by tests and fuzzing); `what` names the source.
CompiledProgram read_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& what);

}  // namespace kiln::artifact

// kiln public API: session and compile options.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// Where a compiled program runs.
///  - ref: plain loops over the reference kernels (src/ops); the correctness oracle.
///  - cpu: x86-64 CPU program with a static memory plan (oneDNN lowering: see docs).
///  - cuda: NVIDIA GPU (not built in this version; selecting it is an error).
struct Target {
  enum class Kind { ref, cpu, cuda };
  Kind kind = Kind::cpu;
  int device = 0;  ///< device index, cuda only

  static Target ref() { return {Kind::ref, 0}; }
  static Target cpu() { return {Kind::cpu, 0}; }
  static Target cuda(int device = 0) { return {Kind::cuda, device}; }
  /// Parses "ref", "cpu", "cuda", "cuda:N". Throws Error(invalid_option) naming the value.
  static Target parse(const std::string& text);
  std::string name() const;  ///< "cpu", "ref", "cuda"
  bool operator==(const Target&) const = default;
};

/// Numeric precision of the compiled program. fp32 is the only one the cpu
/// and ref targets offer; asking for another is an error naming the option.
enum class Precision { fp32, fp16, bf16 };
const char* precision_name(Precision p);
/// Parses "fp32" / "fp16" / "bf16"; throws Error(invalid_option).
Precision parse_precision(const std::string& text);

/// What to do when an artifact does not match this machine, model or options.
enum class MismatchPolicy {
  recompile,  ///< compile again and replace the cache entry (default for the cache)
  error,      ///< throw Error(incompatible_artifact) naming the field (default for an explicit .kiln)
};

/// Options of a kiln::Session. Validated by validate() (called by every
/// Session constructor); every error names the option.
struct SessionOptions {
  Target target = Target::cpu();
  Precision precision = Precision::fp32;

  /// Cache directory. Unset: $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
  /// Set to an empty path: invalid (an error naming "cache_dir").
  std::optional<std::filesystem::path> cache_dir;
  /// false: compile in memory every time, never read or write the cache.
  bool use_cache = true;

  /// Fixed input shapes by input name, e.g. {"x", {1,3,224,224}}. Inputs not
  /// named keep the model's dims; symbolic dims stay symbolic (run-time shapes).
  std::map<std::string, std::vector<int64_t>> input_shapes;

  MismatchPolicy cache_mismatch = MismatchPolicy::recompile;

  /// Threads used by one Session::run (0: all cores available). Not part of
  /// the cache key: results do not depend on it beyond float rounding.
  int threads = 0;

  /// Throws Error(invalid_option) naming the first invalid field.
  void validate() const;
};

/// The directory the cache uses when SessionOptions::cache_dir is unset.
std::filesystem::path default_cache_dir();

}  // namespace kiln

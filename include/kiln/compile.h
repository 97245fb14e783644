// kiln public API: ahead-of-time compilation to an explicit artifact file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/options.h"

namespace kiln {

/// What a compilation did (times in milliseconds, sizes in bytes).
struct CompileResult {
  double compile_ms = 0;      ///< import + passes + lowering, excluding the write
  double write_ms = 0;        ///< serialising and writing the artifact
  int nodes_imported = 0;     ///< nodes in the ONNX graph (main graph)
  int nodes_compiled = 0;     ///< nodes left after constant folding and dead-code elimination
  int nodes_folded = 0;       ///< nodes evaluated at compile time
  uint64_t arena_bytes = 0;   ///< intermediate memory one run needs (static plan)
  uint64_t naive_bytes = 0;   ///< what the same intermediates take without reuse
  uint64_t artifact_bytes = 0;
  int programs = 1;           ///< programs in the artifact (one per bucket with opt.dims)
  std::string model_digest;   ///< XXH3-128 hex of graph + weights
  std::string cache_key;      ///< the key this program has in a cache
  /// What the compile wants the user to know: for 16-bit cuda programs, the
  /// precision check's result (which nodes stay float32 and why, or that it
  /// was off or skipped); for cuda programs with host fallback, which nodes
  /// run on the host (SessionOptions::fallback). The first program's, with buckets.
  std::vector<std::string> notes;
};

/// Compiles an ONNX model for opt.target and writes the artifact to `out`
/// atomically (no partial file on any error). Reads opt.target, precision,
/// input_shapes and dims (every bucket is compiled, one program each, all
/// sharing one copy of the constants); ignores the cache options.
/// Throws Error: invalid_option, invalid_model, unsupported, io.
CompileResult compile(const std::filesystem::path& onnx_path, const std::filesystem::path& out,
                      const SessionOptions& opt);

}  // namespace kiln

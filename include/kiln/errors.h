// kiln public API: errors.
#pragma once
#include <stdexcept>
#include <string>

namespace kiln {

/// Category of a kiln::Error. The command line maps each to a distinct exit
/// code (docs/cli.md); the numbers here ARE those exit codes.
enum class ErrorCode : int {
  internal = 1,             ///< a bug in kiln
  invalid_option = 2,       ///< a SessionOptions field or command-line option is invalid
  incompatible_artifact = 3,///< a valid artifact built for another target/machine/library/model
  invalid_model = 4,        ///< not an ONNX model, truncated, or malformed graph
  unsupported = 5,          ///< operator, attribute, dtype or opset kiln does not implement
  invalid_input = 6,        ///< missing / extra input, wrong shape or dtype, bad .npy
  corrupt_artifact = 7,     ///< checksum mismatch, truncated or not a .kiln file
  io = 8,                   ///< a file could not be read or written
};

/// Name of an error code as printed in messages and --json ("invalid_model", ...).
const char* error_code_name(ErrorCode c);

/// The one exception type kiln throws across its public API. what() is a
/// complete sentence naming what is wrong and where (file, node, input, field).
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace kiln

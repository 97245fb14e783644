#include "kiln/errors.h"

namespace kiln {

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::internal: return "internal";
    case ErrorCode::invalid_option: return "invalid_option";
    case ErrorCode::incompatible_artifact: return "incompatible_artifact";
    case ErrorCode::invalid_model: return "invalid_model";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::invalid_input: return "invalid_input";
    case ErrorCode::corrupt_artifact: return "corrupt_artifact";
    case ErrorCode::io: return "io";
  }
  return "unknown";
}

}  // namespace kiln

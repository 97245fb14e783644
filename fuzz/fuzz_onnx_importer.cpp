// libFuzzer target: the ONNX importer (onnx_import::import_bytes: protobuf
// parse, graph and tensor checks, parsers) and the cache's wire-format walk
// for external data (cache::external_data_locations). Any input must give a
// model or a kiln::Error that is not `internal`; anything else (a crash, a
// sanitizer report, an internal error) is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cache/model_digest.h"
#include "kiln/errors.h"
#include "onnx/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::cache::external_data_locations(data, size, "fuzz.onnx");
  } catch (const kiln::Error& e) {
    if (e.code() != kiln::ErrorCode::invalid_model) {
      std::fprintf(stderr, "kiln error (code %d, expected invalid_model): %s\n", static_cast<int>(e.code()), e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln error: a non-kiln exception escaped the digest walk: %s\n", e.what());
    std::abort();
  }
  try {
    // A base directory that does not exist: external data must fail cleanly.
    kiln::onnx_import::import_bytes(data, size, "/nonexistent-kiln-fuzz", "fuzz.onnx");
  } catch (const kiln::Error& e) {
    if (e.code() == kiln::ErrorCode::internal) {
      std::fprintf(stderr, "kiln error (internal): %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln error: a non-kiln exception escaped the importer: %s\n", e.what());
    std::abort();
  }
  return 0;
}

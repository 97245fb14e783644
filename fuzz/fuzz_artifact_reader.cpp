// libFuzzer target: the .kiln reader (artifact::read_bytes: header, compat
// block, section table, padding, checksums, FlatBuffers verification and
// decoding). Any input must give a program or Error(corrupt_artifact);
// anything else (a crash, a sanitizer report, another error code) is a bug.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  try {
    kiln::artifact::CompiledProgram cp = kiln::artifact::read_bytes(bytes, "fuzz.kiln");
    // Touch what a loader touches next: every field, every constant byte.
    size_t sum = cp.compat.fields().size() + cp.metadata_json.size();
    for (auto& v : cp.model.values)
      if (v.constant) {
        const auto* p = static_cast<const uint8_t*>(v.constant->raw());
        for (size_t i = 0; i < v.constant->nbytes(); ++i) sum += p[i];
      }
    if (sum == 0xdeadbeef) std::abort();  // keeps the loop from being optimised away
  } catch (const kiln::Error& e) {
    if (e.code() != kiln::ErrorCode::corrupt_artifact) std::abort();
  }
  return 0;
}

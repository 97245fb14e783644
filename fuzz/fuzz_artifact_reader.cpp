// libFuzzer target: the .kiln reader (artifact::read_bytes: header, compat
// block, section table, padding, checksums, FlatBuffers verification and
// decoding). Any input must give a program or Error(corrupt_artifact);
// anything else (a crash, a sanitizer report, another error code) is a bug.
//
// Almost every mutation of a real artifact breaks a checksum, so each input
// is read twice: as it is, and "restamped" (file_size and every checksum
// recomputed per docs/file-format.md), which lets mutations reach the
// FlatBuffers verifier and the decoders behind it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/errors.h"
#include "support/hash.h"

namespace {

uint64_t get(const std::vector<uint8_t>& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

void put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

bool inside(const std::vector<uint8_t>& b, uint64_t off, uint64_t size) {
  return off <= b.size() && size <= b.size() - off;
}

// Header layout (docs/file-format.md, "Fixed header"): file_size u64 @16,
// compat offset/size/checksum @24/32/40, table offset @48, count u32 @56,
// table checksum @64, header checksum (of bytes 0..71) @72; table entries of
// 32 bytes: offset @8, size @16, checksum @24.
void restamp(std::vector<uint8_t>& f) {
  if (f.size() < 80) return;
  put64(f, 16, f.size());
  uint64_t table = get(f, 48, 8), count = get(f, 56, 4);
  if (count <= 64 && inside(f, table, count * 32)) {
    for (uint64_t i = 0; i < count; ++i) {
      size_t e = table + i * 32;
      uint64_t off = get(f, e + 8, 8), size = get(f, e + 16, 8);
      if (inside(f, off, size)) put64(f, e + 24, kiln::hash64(f.data() + off, size));
    }
    put64(f, 64, kiln::hash64(f.data() + table, count * 32));
  }
  uint64_t coff = get(f, 24, 8), csize = get(f, 32, 8);
  if (inside(f, coff, csize)) put64(f, 40, kiln::hash64(f.data() + coff, csize));
  put64(f, 72, kiln::hash64(f.data(), 72));
}

void read_one(std::shared_ptr<const std::vector<uint8_t>> bytes) {
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
    if (e.code() != kiln::ErrorCode::corrupt_artifact) {
      std::fprintf(stderr, "kiln error (code %d, expected corrupt_artifact): %s\n", static_cast<int>(e.code()), e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln error: a non-kiln exception escaped the reader: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  read_one(std::make_shared<const std::vector<uint8_t>>(data, data + size));
  auto stamped = std::make_shared<std::vector<uint8_t>>(data, data + size);
  restamp(*stamped);
  read_one(stamped);
  return 0;
}

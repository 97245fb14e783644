#include "support/hash.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "support/error.h"

namespace kiln {

uint64_t hash64(const void* data, size_t size) { return XXH3_64bits(data, size); }

Hasher128::Hasher128() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Hasher128::update(const void* data, size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

void Hasher128::field(std::string_view s) {
  uint64_t n = s.size();
  update(&n, sizeof n);
  update(s.data(), s.size());
}

std::string Hasher128::hex_digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

void hash_file_into(Hasher128& h, const std::filesystem::path& p) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(p.c_str(), "rb"), &std::fclose);
  if (!f) fail(ErrorCode::io, "cannot open '{}' for reading", p.string());
  std::vector<char> buf(4 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) h.update(buf.data(), n);
  if (std::ferror(f.get())) fail(ErrorCode::io, "read error on '{}'", p.string());
}

}  // namespace kiln

// Digests: XXH3 (xxhash, https://github.com/Cyan4973/xxHash), 64 and 128 bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace kiln {

/// XXH3-64 of a byte range (used for section and header checksums).
uint64_t hash64(const void* data, size_t size);

/// Streaming XXH3-128; digest() returns 32 lowercase hex characters.
/// Used for model digests and cache keys.
class Hasher128 {
 public:
  Hasher128();
  ~Hasher128();
  Hasher128(const Hasher128&) = delete;
  Hasher128& operator=(const Hasher128&) = delete;
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// Adds a length-prefixed field so that ("ab","c") and ("a","bc") differ.
  void field(std::string_view s);
  std::string hex_digest() const;

 private:
  void* state_;
};

/// Streams a file through Hasher128 in 4 MiB blocks (disk speed). Throws Error(io).
void hash_file_into(Hasher128& h, const std::filesystem::path& p);

}  // namespace kiln

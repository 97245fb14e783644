// The compiled-program cache: one artifact file per key in a directory
// (docs/cache.md).
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "artifact/artifact.h"

namespace kiln::cache {

/// Cache key: XXH3-128 hex over every (name, value) field, in order, each
/// length-prefixed. The fields must cover everything that can change the
/// compiled program (see key_fields in runtime/compile.cpp).
std::string derive_key(const std::vector<std::pair<std::string, std::string>>& fields);

/// A cache directory. Entries are "<dir>/<key>.kiln", published atomically
/// (temporary file in the same directory, fsync, rename), so a reader sees a
/// whole entry or none.
class Cache {
 public:
  explicit Cache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_path(const std::string& key) const;
  /// True when an entry file exists for key.
  bool contains(const std::string& key) const;
  /// Creates the directory (mode 0700) if needed and checks it can be
  /// written. Never throws; on false `why` says what failed.
  bool writable(std::string* why) const;
  /// Atomically writes the entry. Throws Error(io) (a full disk included);
  /// the cache is left as it was.
  void publish(const std::string& key, const artifact::CompiledProgram& p) const;
  /// Moves a damaged entry aside to "<key>.kiln.bad" (kept for inspection,
  /// never loaded). Never throws; returns false if it could not.
  bool quarantine(const std::string& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace kiln::cache

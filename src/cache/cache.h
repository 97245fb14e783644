// The compiled-program cache: one artifact file per key in a directory
// (docs/cache.md).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "artifact/artifact.h"

namespace kiln::cache {

/// (name, value) text pairs, in a fixed order.
using Fields = std::vector<std::pair<std::string, std::string>>;

/// Names of the compatibility-block fields that make up the cache key, in
/// key order: model_digest, target, device_arch, device_name, cpu_isa,
/// library_versions, precision, tuning, options_digest, kiln_version,
/// format_version. Every one of them is stored in each entry's compatibility
/// block, so an entry can be compared with a request field by field.
const std::vector<std::string>& key_field_names();

/// The key fields of `c`, valued as CompatInfo::fields() prints them.
Fields key_fields(const artifact::CompatInfo& c);

/// Cache key: XXH3-128 hex over every (name, value) field, in order, each
/// length-prefixed.
std::string derive_key(const Fields& fields);

/// One key field in which a cache entry differs from a request.
struct FieldDiff {
  std::string field;
  std::string entry;    ///< the entry's value
  std::string request;  ///< the value this lookup needs
};

/// The key fields in which `entry` differs from `request`, in key order.
std::vector<FieldDiff> differing_fields(const artifact::CompatInfo& entry, const artifact::CompatInfo& request);

/// A cache directory. Entries are "<dir>/<key>.kiln", published atomically
/// (temporary file in the same directory, fsync, rename), so a reader sees a
/// whole entry or none. Other names it uses: "<key>.kiln.bad" (a damaged entry
/// moved aside), "<key>.lock" (compile lock), ".<key>.kiln.tmp-<pid>-<hex>"
/// (a publish in progress), "digests/" (model digest memo).
class Cache {
 public:
  explicit Cache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path entry_path(const std::string& key) const;
  std::filesystem::path lock_path(const std::string& key) const;
  std::filesystem::path memo_dir() const { return dir_ / "digests"; }
  /// True when an entry file exists for key.
  bool contains(const std::string& key) const;
  /// Atomically writes the entry. Throws Error(io) (a full disk included);
  /// the cache is left as it was (no entry, no temporary file).
  void publish(const std::string& key, const artifact::CompiledProgram& p) const;
  /// Moves a damaged entry aside to "<key>.kiln.bad" (kept for inspection,
  /// never loaded; gc removes it first when over the size cap). Never throws;
  /// returns false if it could not.
  bool quarantine(const std::string& key) const;
  /// Records a use of the entry: sets its mtime to now, which is what
  /// eviction orders by (atime is unreliable under noatime/relatime mounts,
  /// and a sidecar file would be a second file to keep consistent). Never
  /// throws; returns false when it could not (read-only directory).
  bool touch(const std::string& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace kiln::cache

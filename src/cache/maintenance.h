// Cache maintenance: listing, verification, eviction (gc) and clearing
// (docs/cache.md, "Maintenance"; `kiln cache ls|verify|gc|clear`).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "artifact/artifact.h"

namespace kiln::cache {

/// Kinds of file kiln keeps in a cache directory (any other file is left alone).
enum class FileKind {
  entry,        ///< "<key>.kiln"
  quarantined,  ///< "<key>.kiln.bad": a damaged entry moved aside
  temporary,    ///< ".<key>.kiln.tmp-<pid>-<hex>": a publish in progress, or left by a killed one
  lock,         ///< "<key>.lock"
  /// "ort-partitions/<identity>.onnx": a partition of an ONNX Runtime graph
  /// the kiln EP wrote for kiln to compile (ort_ep/, docs/ort_ep.md); the
  /// EP writes it again when it is gone. Counted and evicted like entries.
  partition,
};

/// The folder of a cache directory holding the kiln EP's partition models.
inline constexpr const char* kPartitionDir = "ort-partitions";

/// One file of the cache directory.
struct CacheFile {
  FileKind kind = FileKind::entry;
  std::string key;                 ///< 32 hex characters (a partition: its identity)
  std::filesystem::path path;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;            ///< for entries: the last use (touched on every hit)
  int pid = 0;                     ///< temporary files: the writer's process id
};

/// The kiln files of `dir` and of its ort-partitions folder (partitions and
/// their temporary files), sorted by kind then key; missing dir = none.
/// Never throws for a file that vanishes while listing (another process's gc).
std::vector<CacheFile> scan_dir(const std::filesystem::path& dir);

/// Whether a temporary file is left over from a dead publish: its key's lock
/// is not held (every publish through the cache holds it) and its writer
/// process no longer exists or it is older than an hour (the writer may live
/// in another pid namespace).
bool stale_temporary(const std::filesystem::path& dir, const CacheFile& tmp, int64_t now_ns);

/// What `kiln cache ls` shows for an entry. `compat` is read alone (header
/// and compatibility block); `error` is set instead when that fails.
struct EntryInfo {
  CacheFile file;
  std::optional<artifact::CompatInfo> compat;
  std::string error;
};
std::vector<EntryInfo> list_entries(const std::filesystem::path& dir);

/// Result of checking one entry completely (`kiln cache verify`).
struct VerifyResult {
  CacheFile file;
  bool ok = false;
  std::string problem;  ///< "" when ok: the reader's error, or a key that does not match the file name
  std::string note;     ///< ok entries: "" or the torn append at its end that loads ignore (artifact::read_entry)
};
/// Reads every entry with every checksum and verifies that each was
/// published under its own key. Never throws for a bad entry.
std::vector<VerifyResult> verify_entries(const std::filesystem::path& dir);

/// What gc or clear removed or kept.
struct GcReport {
  std::vector<CacheFile> removed;   ///< every file removed, in removal order
  std::vector<CacheFile> kept_busy; ///< temporary or lock files in use by a live process
  uint64_t bytes_before = 0;        ///< entries + quarantined + partitions, before
  uint64_t bytes_after = 0;         ///< entries + quarantined + partitions, after
  int memos_removed = 0;            ///< digest memos whose model is gone
};

/// Evicts until entries + quarantined files + partitions total at most
/// `max_bytes` (0: no cap): quarantined files first, then entries (by
/// least recent use) and partitions (by when they were written: kiln's
/// digest memo keys on their mtime, so a reuse does not touch them), oldest first,
/// never `keep_key` (the entry just published). Always removes stale
/// temporary files, lock files no process holds and digest memos of models
/// that no longer exist. Files that vanish meanwhile are skipped. Never throws.
GcReport gc(const std::filesystem::path& dir, uint64_t max_bytes, const std::string& keep_key = "");

/// Removes every entry, quarantined file and partition, stale temporary files, unheld
/// lock files and the digest memo; a publish or lock in progress is kept
/// (reported in kept_busy). Never throws.
GcReport clear(const std::filesystem::path& dir);

/// Parses a size: "2GiB", "500MB", "1.5G", "4096" (bytes); K/M/G/T and
/// KiB..TiB are powers of 1024, KB..TB of 1000. Throws Error(invalid_option)
/// naming `option` and the text.
uint64_t parse_size(const std::string& text, const std::string& option);

/// "1.50 GiB", "12.0 KiB", "512 B".
std::string format_size(uint64_t bytes);

}  // namespace kiln::cache

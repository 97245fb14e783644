// Per-key compile lock: an flock(2) on "<dir>/<key>.lock" (docs/cache.md,
// "Concurrency").
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace kiln::cache {

/// An exclusive lock on one cache key, held by an open file descriptor, so
/// the kernel releases it when the process dies however it dies.
///
/// The holder removes the lock file before releasing it; a process that was
/// waiting then finds that the file it locked is no longer the one at the
/// path and tries again on a fresh file. That check (same inode at the path
/// after flock) is what makes removing lock files safe, for the holder and
/// for gc.
class KeyLock {
 public:
  KeyLock() = default;
  KeyLock(KeyLock&& o) noexcept;
  KeyLock& operator=(KeyLock&& o) noexcept;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  ~KeyLock();

  /// Takes the lock at `path`, creating the file if needed. When another
  /// process holds it, calls `on_wait` once and keeps trying until `timeout`.
  /// Never throws: on failure (timeout, the file cannot be created) returns
  /// a lock that is not held and sets `why`.
  static KeyLock acquire(const std::filesystem::path& path, std::chrono::milliseconds timeout,
                         const std::function<void()>& on_wait, std::string* why);

  bool held() const { return fd_ >= 0; }
  /// True when another process held the lock when we first asked.
  bool waited() const { return waited_; }
  double waited_ms() const { return waited_ms_; }
  /// Removes the lock file and releases the lock (also done by the destructor).
  void release();

 private:
  int fd_ = -1;
  std::filesystem::path path_;
  bool waited_ = false;
  double waited_ms_ = 0;
};

/// True when some process holds the lock at `path` (probed with a shared,
/// non-blocking flock; a missing file is not held). Never creates the file.
bool lock_held(const std::filesystem::path& path);

/// Removes the lock file at `path` when no process holds it (left behind by a
/// killed process). Returns true when it removed it.
bool remove_stale_lock(const std::filesystem::path& path);

}  // namespace kiln::cache

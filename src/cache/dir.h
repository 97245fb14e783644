// Cache directory access: private creation, trust and read-only checks
// (docs/cache.md, "Safety").
#pragma once
#include <sys/stat.h>

#include <filesystem>
#include <string>

namespace kiln::cache {

/// How a process may use a cache directory.
enum class DirAccess {
  read_write,  ///< lookups, loads and publishes
  read_only,   ///< lookups and loads only; nothing is written (e.g. baked into an image)
  unusable,    ///< missing and cannot be created, or not a directory
  untrusted,   ///< another user could plant programs in it; not used unless trusted
};

/// The outcome of open_dir; `why` explains every state but read_write.
struct DirState {
  DirAccess access = DirAccess::unusable;
  std::string why;
};

/// Creates `dir` when missing and `create` is set (every missing component
/// with mode 0700, so the directory is private from its first instant), then
/// classifies it: untrusted (unless `trust`), read_only when this process
/// cannot create files in it, read_write otherwise. Never throws.
DirState open_dir(const std::filesystem::path& dir, bool trust, bool create);

/// Why a file or directory with this stat is not safe to load programs from:
/// owned by a user other than this one or root, or writable by group or
/// others. Empty when it is safe.
std::string ownership_problem(const struct stat& st);

}  // namespace kiln::cache

#include "cache/dir.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

// mkdir -p with mode 0700 for each directory it creates (existing ones are
// left as they are). Returns "" or the OS reason.
std::string make_private_dirs(const fs::path& dir) {
  std::vector<fs::path> missing;
  fs::path p = dir.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "a/b/" -> "a/b"
  struct stat st{};
  while (!p.empty() && ::stat(p.c_str(), &st) != 0) {
    if (errno != ENOENT) return fmt::format("cannot stat '{}': {}", p.string(), std::strerror(errno));
    missing.push_back(p);
    if (p == p.parent_path()) break;
    p = p.parent_path();
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it)
    if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST)
      return fmt::format("cannot create '{}': {}", it->string(), std::strerror(errno));
  return "";
}

}  // namespace

std::string ownership_problem(const struct stat& st) {
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fmt::format("it is owned by another user (uid {}, this process runs as uid {})", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("it is writable by {} (mode {:04o})", (st.st_mode & S_IWOTH) ? "every user" : "its group",
                       st.st_mode & 07777);
  return "";
}

DirState open_dir(const fs::path& dir, bool trust, bool create) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || !create) return {DirAccess::unusable, std::strerror(errno)};
    if (auto why = make_private_dirs(dir); !why.empty()) return {DirAccess::unusable, why};
    if (::stat(dir.c_str(), &st) != 0) return {DirAccess::unusable, std::strerror(errno)};
  }
  if (!S_ISDIR(st.st_mode)) return {DirAccess::unusable, "not a directory"};
  if (!trust)
    if (auto why = ownership_problem(st); !why.empty()) return {DirAccess::untrusted, why};
  // access() answers for root too when the file system is mounted read-only.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return {DirAccess::read_only, std::strerror(errno)};
  struct statvfs vfs{};
  if (::statvfs(dir.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY))
    return {DirAccess::read_only, "read-only file system"};
  return {DirAccess::read_write, ""};
}

}  // namespace kiln::cache

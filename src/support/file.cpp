#include "support/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "support/error.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {
std::string os_error() { return std::strerror(errno); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

std::vector<uint8_t> read_file(const fs::path& p) {
  Fd f{::open(p.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail(ErrorCode::io, "cannot open '{}': {}", p.string(), os_error());
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) fail(ErrorCode::io, "cannot stat '{}': {}", p.string(), os_error());
  if (S_ISDIR(st.st_mode)) fail(ErrorCode::io, "'{}' is a directory, not a file", p.string());
  std::vector<uint8_t> out(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(f.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorCode::io, "read error on '{}': {}", p.string(), os_error());
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

namespace {
/// Where atomic_write puts `dest`'s bytes: through symbolic links to their
/// target when `links` is follow, and only over a regular file, a link being
/// replaced, or nothing: a rename over a device, FIFO or directory entry
/// would replace it (as `-o /dev/full` once replaced that device node).
fs::path write_target(const fs::path& dest, Links links) {
  if (dest.empty()) fail(ErrorCode::io, "cannot write a file at an empty path");
  fs::path target = dest;
  struct stat st{};
  // Follow the link chain by hand: weakly_canonical leaves a link to a file
  // that does not exist yet unresolved.
  for (int hops = 0; links == Links::follow && ::lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode); ++hops) {
    std::error_code ec;
    fs::path to = fs::read_symlink(target, ec);
    if (ec || hops == 40)
      fail(ErrorCode::io, "cannot write '{}': cannot resolve the symbolic link{}", dest.string(),
           ec ? ": " + ec.message() : std::string(" (a loop?)"));
    target = to.is_absolute() ? to : target.parent_path() / to;
  }
  if (::lstat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
    fail(ErrorCode::io, "cannot write '{}': it exists and is not a regular file (a directory, device, FIFO or socket)",
         dest.string());
  return target;
}
}  // namespace

void atomic_write(const fs::path& requested, const void* data, size_t size, Links links) {
  const fs::path dest = write_target(requested, links);
  fs::path dir = dest.has_parent_path() ? dest.parent_path() : fs::path(".");
  std::random_device rd;
  fs::path tmp = dir / fmt::format(".{}.tmp-{}-{:08x}", dest.filename().string(), ::getpid(), rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorCode::io, "cannot create '{}' (to write '{}'): {}", tmp.string(), dest.string(), os_error());
  auto give_up = [&](const std::string& what) {
    std::string reason = os_error();
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(ErrorCode::io, "cannot write '{}': {} failed: {}", dest.string(), what, reason);
  };
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) give_up("write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) give_up("fsync");
  if (::close(fd) != 0) {
    std::string reason = os_error();
    ::unlink(tmp.c_str());
    fail(ErrorCode::io, "cannot write '{}': close failed: {}", dest.string(), reason);
  }
  if (::rename(tmp.c_str(), dest.c_str()) != 0) {
    std::string reason = os_error();
    ::unlink(tmp.c_str());
    fail(ErrorCode::io, "cannot move '{}' into place as '{}': {}", tmp.string(), dest.string(), reason);
  }
  // The rename is durable only once the directory entry is on disk.
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
}

std::shared_ptr<MappedFile> MappedFile::open(const fs::path& p) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // (a FIFO planted as a cache entry hung `kiln run`); it is refused below.
  Fd f{::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) fail(ErrorCode::io, "cannot open '{}': {}", p.string(), os_error());
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) fail(ErrorCode::io, "cannot stat '{}': {}", p.string(), os_error());
  if (S_ISDIR(st.st_mode)) fail(ErrorCode::io, "'{}' is a directory, not a file", p.string());
  if (!S_ISREG(st.st_mode)) fail(ErrorCode::io, "'{}' is not a regular file (a device, FIFO or socket)", p.string());
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ == 0) return m;
  // MAP_POPULATE: every byte is read at once anyway (section checksums), and
  // populating the mapping in one call costs far less than a page fault per
  // 4 KiB (on virtual machines especially).
  void* addr = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, f.fd, 0);
  if (addr == MAP_FAILED) fail(ErrorCode::io, "cannot mmap '{}': {}", p.string(), os_error());
  m->data_ = static_cast<const uint8_t*>(addr);
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool ensure_writable_dir(const fs::path& dir, std::string* why) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      if (why) *why = ec.message();
      return false;
    }
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  if (!fs::is_directory(dir, ec)) {
    if (why) *why = "not a directory";
    return false;
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    if (why) *why = os_error();
    return false;
  }
  return true;
}

}  // namespace kiln

#include "cache/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "support/log.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

// True when `fd` is still the file at `path` (not removed or replaced since
// it was opened).
bool still_at_path(int fd, const fs::path& path) {
  struct stat a{}, b{};
  if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0) return false;
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

int flock_retry(int fd, int op) {
  int r;
  do r = ::flock(fd, op);
  while (r != 0 && errno == EINTR);
  return r;
}

}  // namespace

KeyLock::KeyLock(KeyLock&& o) noexcept { *this = std::move(o); }

KeyLock& KeyLock::operator=(KeyLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    waited_ = o.waited_;
    waited_ms_ = o.waited_ms_;
  }
  return *this;
}

KeyLock::~KeyLock() { release(); }

KeyLock KeyLock::acquire(const fs::path& path, std::chrono::milliseconds timeout, const std::function<void()>& on_wait,
                         std::string* why) {
  KeyLock lock;
  lock.path_ = path;
  Stopwatch sw;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (why) *why = fmt::format("cannot create the lock file '{}': {}", path.string(), std::strerror(errno));
      return lock;
    }
    if (flock_retry(fd, LOCK_EX | LOCK_NB) == 0) {
      if (still_at_path(fd, path)) {
        lock.fd_ = fd;
        lock.waited_ms_ = lock.waited_ ? sw.ms() : 0;
        return lock;
      }
      ::close(fd);  // the holder removed it as it finished: lock the new file
      continue;
    }
    int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) {
      if (why) *why = fmt::format("cannot lock '{}': {}", path.string(), std::strerror(err));
      return lock;
    }
    if (!lock.waited_) {
      lock.waited_ = true;
      if (on_wait) on_wait();
    }
    if (sw.ms() >= static_cast<double>(timeout.count())) {
      if (why) *why = fmt::format("another process still holds '{}' after {:.0f} s", path.string(), sw.ms() / 1000);
      lock.waited_ms_ = sw.ms();
      return lock;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void KeyLock::release() {
  if (fd_ < 0) return;
  // Unlink while still holding the lock: a waiter that then gets the old
  // file sees it is gone from the path and retries on a new one.
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

bool lock_held(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool held = flock_retry(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

bool remove_stale_lock(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool removed = false;
  if (flock_retry(fd, LOCK_EX | LOCK_NB) == 0 && still_at_path(fd, path)) removed = ::unlink(path.c_str()) == 0;
  ::close(fd);
  return removed;
}

}  // namespace kiln::cache

// The per-key compile lock. flock(2) locks belong to open file descriptions,
// so two acquire() calls in one process exclude each other like two processes.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "cache/lock.h"
#include "cache_test_util.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

TEST(KeyLock, ExcludesAndIsRemovedOnRelease) {
  TempDir dir;
  fs::path p = dir / "k.lock";
  std::string why;
  auto a = cache::KeyLock::acquire(p, milliseconds(0), nullptr, &why);
  ASSERT_TRUE(a.held()) << why;
  EXPECT_FALSE(a.waited());
  EXPECT_TRUE(fs::exists(p));
  EXPECT_TRUE(cache::lock_held(p));

  int waits = 0;
  auto b = cache::KeyLock::acquire(p, milliseconds(30), [&] { ++waits; }, &why);
  EXPECT_FALSE(b.held());
  EXPECT_TRUE(b.waited());
  EXPECT_EQ(waits, 1);  // reported once, not on every retry
  EXPECT_NE(why.find("still holds"), std::string::npos) << why;
  EXPECT_GE(b.waited_ms(), 30);

  a.release();
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(cache::lock_held(p));
  auto c = cache::KeyLock::acquire(p, milliseconds(0), nullptr, &why);
  EXPECT_TRUE(c.held());
}

TEST(KeyLock, WaiterGetsTheLockWhenTheHolderFinishes) {
  TempDir dir;
  fs::path p = dir / "k.lock";
  std::string why;
  auto a = cache::KeyLock::acquire(p, milliseconds(0), nullptr, &why);
  ASSERT_TRUE(a.held());
  std::atomic<bool> waiting{false};
  std::atomic<bool> got{false};
  std::thread t([&] {
    std::string w;
    auto b = cache::KeyLock::acquire(p, milliseconds(10000), [&] { waiting = true; }, &w);
    got = b.held() && b.waited();
    // The lock file at the path is the one b holds (not the removed one).
    EXPECT_TRUE(cache::lock_held(p));
  });
  while (!waiting) std::this_thread::sleep_for(milliseconds(1));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(got);
  a.release();  // removes the file b may have opened: b must retry on a new one
  t.join();
  EXPECT_TRUE(got);
  EXPECT_FALSE(fs::exists(p));
}

TEST(KeyLock, StaleLockFileIsRemovedOnlyWhenNobodyHoldsIt) {
  TempDir dir;
  fs::path p = dir / "k.lock";
  { std::ofstream(p) << ""; }  // left by a killed process: the file, no lock
  EXPECT_FALSE(cache::lock_held(p));
  EXPECT_TRUE(cache::remove_stale_lock(p));
  EXPECT_FALSE(fs::exists(p));

  std::string why;
  auto a = cache::KeyLock::acquire(p, milliseconds(0), nullptr, &why);
  EXPECT_FALSE(cache::remove_stale_lock(p));
  EXPECT_TRUE(fs::exists(p));
  EXPECT_FALSE(cache::lock_held(dir / "missing.lock"));
}

TEST(KeyLock, ALockHeldByAChildProcessIsReleasedWhenItIsKilled) {
  TempDir dir;
  fs::path p = dir / "k.lock";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(p.c_str(), O_RDWR | O_CREAT, 0600);
    ::flock(fd, LOCK_EX);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_TRUE(cache::lock_held(p));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(cache::lock_held(p));
  std::string why;
  EXPECT_TRUE(cache::KeyLock::acquire(p, milliseconds(0), nullptr, &why).held()) << why;
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST(KeyLock, UncreatableLockFileSaysWhy) {
  TempDir dir;
  std::string why;
  auto a = cache::KeyLock::acquire(dir / "no_such_dir" / "k.lock", milliseconds(0), nullptr, &why);
  EXPECT_FALSE(a.held());
  EXPECT_NE(why.find("cannot create the lock file"), std::string::npos) << why;
}

}  // namespace
}  // namespace kiln::testing

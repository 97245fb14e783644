// The cache as a Session sees it: mismatch policy, damaged entries, read-only
// and untrusted directories, private creation, full disks, several processes.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache.h"
#include "cache/lock.h"
#include "cache/maintenance.h"
#include "cache/model_digest.h"
#include "cache_test_util.h"
#include "kiln/compile.h"
#include "runtime/compile.h"
#include "runtime/program.h"
#include "support/version.h"
#include "targets/host.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

std::string all_notes(const SessionStats& st) {
  std::string s;
  for (auto& n : st.notes) s += n + "\n";
  return s;
}

bool has_note(const SessionStats& st, const std::string& needle) {
  return all_notes(st).find(needle) != std::string::npos;
}

/// Expects `f` to throw kiln::Error with `code` and a message containing each
/// of `parts` (the field it names, the values it shows, the file).
void expect_refused(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << p << ": " << e.what();
  }
}

struct SessionCacheTest : ::testing::Test {
  TempDir dir;
  fs::path model = dir / "mlp.onnx";
  fs::path cache_dir = dir / "cache";
  SessionOptions opt;
  void SetUp() override {
    mlp_model().save(model);
    // These tests are about the entry a Session makes when it is constructed;
    // the MLP's batch is symbolic, and shape specialization (the default)
    // would compile on the first run instead (tests/cli/test_specialization.py).
    opt.specialize_shapes = false;
    opt.cache_dir = cache_dir;
  }
  std::string key() {
    return cache::derive_key(key_fields(cache::digest_model(model).digest, opt));
  }
};

/// A tmpfs mounted for the test's lifetime (root only); mounted() is false
/// where mounting is not allowed.
struct Tmpfs {
  fs::path dir;
  bool ok = false;
  Tmpfs(const fs::path& d, const char* options) : dir(d) {
    fs::create_directories(dir);
    ok = ::geteuid() == 0 && ::mount("tmpfs", dir.c_str(), "tmpfs", 0, options) == 0;
  }
  bool remount_read_only() { return ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0; }
  ~Tmpfs() {
    if (ok) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

TEST_F(SessionCacheTest, DirectoryIsCreatedPrivateWithItsParents) {
  opt.cache_dir = dir / "a" / "b" / "kiln";
  Session s(model, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  for (auto p : {dir / "a", dir / "a" / "b", dir / "a" / "b" / "kiln"}) {
    struct stat st{};
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << p;
  }
}

TEST_F(SessionCacheTest, NoAbsolutePathInsideAnArtifact) {
  Session s(model, opt);
  auto bytes = file_bytes(s.stats().artifact_path);
  std::string text(bytes.begin(), bytes.end());
  EXPECT_EQ(text.find(dir.path().string()), std::string::npos);
  EXPECT_EQ(text.find(fs::temp_directory_path().string() + "/kiln-test"), std::string::npos);
  EXPECT_NE(text.find("mlp.onnx"), std::string::npos);  // the file name alone is kept
}

TEST_F(SessionCacheTest, MismatchingEntryIsRecompiledOrRefusedByPolicy) {
  // Publish, under this request's key, a program whose compat block says it
  // was built for another device arch.
  auto facts = build_facts(opt.target);
  auto request = request_compat(cache::digest_model(model).digest, opt, facts);
  auto other = request;
  other.device_arch = "riscv64";
  fs::create_directories(cache_dir);
  cache::Cache(cache_dir).publish(key(), compile_program(model, opt, other, key(), nullptr));

  SessionOptions strict = opt;
  strict.cache_mismatch = MismatchPolicy::error;
  expect_refused([&] { Session s(model, strict); }, ErrorCode::incompatible_artifact, {"device_arch", "riscv64", "x86-64"});
  Session s(model, opt);  // recompile (the default)
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  EXPECT_TRUE(has_note(s.stats(), "does not match")) << all_notes(s.stats());
  EXPECT_TRUE(has_note(s.stats(), "device_arch")) << all_notes(s.stats());
  expect_mlp_y(s.run({{"x", mlp_x()}}));
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::hit);
}

// kiln_version is "<release>+<build id>": a program compiled by another build
// of kiln (other sources, same release number) is refused as an explicit
// artifact, naming the field and both values, and recompiled by the cache.
TEST_F(SessionCacheTest, ProgramFromAnotherKilnBuildIsRefusedOrRecompiled) {
  compile(model, dir / "m.kiln", opt);
  EXPECT_EQ(artifact::read_compat(dir / "m.kiln").kiln_version, version());
  EXPECT_EQ(build_facts(opt.target).kiln_version, version());
  EXPECT_EQ(targets::host_facts(opt.target).kiln_version, version());

  // The same release, another build id (a build id differing in one digit).
  std::string other_build = std::string(project_version()) + "+" + build_id();
  other_build.back() = other_build.back() == '0' ? '1' : '0';
  auto facts = build_facts(opt.target);
  auto request = request_compat(cache::digest_model(model).digest, opt, facts);
  auto other = request;
  other.kiln_version = other_build;
  auto program = compile_program(model, opt, other, key(), nullptr);
  artifact::write_file(dir / "other.kiln", program);
  expect_refused([&] { Session::load(dir / "other.kiln", opt); }, ErrorCode::incompatible_artifact,
                 {"kiln_version", other_build, version()});

  // Its key differs from this build's (kiln_version is a key field); even an
  // entry published under this build's key is not run.
  facts.kiln_version = other_build;
  EXPECT_NE(cache::derive_key(key_fields(cache::digest_model(model).digest, opt, facts)), key());
  fs::create_directories(cache_dir);
  cache::Cache(cache_dir).publish(key(), program);
  SessionOptions strict = opt;
  strict.cache_mismatch = MismatchPolicy::error;
  expect_refused([&] { Session s(model, strict); }, ErrorCode::incompatible_artifact, {"kiln_version", other_build});
  Session s(model, opt);  // recompiled (the default policy)
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  EXPECT_TRUE(has_note(s.stats(), "kiln_version")) << all_notes(s.stats());
  expect_mlp_y(s.run({{"x", mlp_x()}}));
  EXPECT_EQ(artifact::read_compat(s.stats().artifact_path).kiln_version, version());
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::hit);
}

TEST_F(SessionCacheTest, DamagedEntryUnderErrorPolicyIsCorruptArtifact) {
  std::string entry = Session(model, opt).stats().artifact_path;
  auto bytes = file_bytes(entry);
  bytes[bytes.size() / 2] ^= 0x01;
  write_bytes(entry, bytes);
  opt.cache_mismatch = MismatchPolicy::error;
  expect_refused([&] { Session s(model, opt); }, ErrorCode::corrupt_artifact, {entry});
  EXPECT_TRUE(fs::exists(entry));  // refused, left as it is
  EXPECT_FALSE(fs::exists(entry + ".bad"));
}

TEST_F(SessionCacheTest, CheckReadsOnlyTheHeaderAndCompatBlock) {
  compile(model, dir / "m.kiln", opt);
  auto bytes = file_bytes(dir / "m.kiln");
  // Header fields (docs/file-format.md): compat_offset u64 at 24, compat_size u64 at 32.
  uint64_t off = 0, size = 0;
  std::memcpy(&off, bytes.data() + 24, 8);
  std::memcpy(&size, bytes.data() + 32, 8);
  ASSERT_GT(bytes.size(), off + size);
  for (size_t i = off + size; i < bytes.size(); ++i) bytes[i] = static_cast<char>(~bytes[i]);
  write_bytes(dir / "m.kiln", bytes);
  auto compat = artifact::read_compat(dir / "m.kiln");  // still answers
  EXPECT_EQ(compat.target, "cpu");
  EXPECT_EQ(compat.cache_key, key());
  EXPECT_TRUE(targets::check_runnable(compat, opt.target).empty());
  expect_refused([&] { Session::load(dir / "m.kiln", opt); }, ErrorCode::corrupt_artifact, {});
}

TEST_F(SessionCacheTest, UntrustedDirectoryIsNotUsedUnlessTrusted) {
  fs::create_directories(cache_dir);
  ::chmod(cache_dir.c_str(), 0777);
  Session s(model, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::none);
  ASSERT_EQ(s.stats().notes.size(), 1u);
  EXPECT_TRUE(has_note(s.stats(), "writable by every user")) << all_notes(s.stats());
  EXPECT_TRUE(has_note(s.stats(), "--trust-cache-dir")) << all_notes(s.stats());
  EXPECT_TRUE(cache::scan_dir(cache_dir).empty());  // nothing written there
  expect_mlp_y(s.run({{"x", mlp_x()}}));

  opt.trust_cache_dir = true;
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::miss);
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::hit);

  // Group-writable is refused too; so is an entry file others can write.
  opt.trust_cache_dir = false;
  ::chmod(cache_dir.c_str(), 0770);
  EXPECT_TRUE(has_note(Session(model, opt).stats(), "writable by its group"));
  ::chmod(cache_dir.c_str(), 0700);
  fs::path entry = cache::Cache(cache_dir).entry_path(key());
  ::chmod(entry.c_str(), 0666);
  Session t(model, opt);
  EXPECT_EQ(t.stats().cache, SessionStats::Cache::miss);  // replaced by a fresh one of ours
  EXPECT_TRUE(has_note(t.stats(), "not safe to load")) << all_notes(t.stats());
  struct stat st{};
  ASSERT_EQ(::stat(entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 022, 0u);
}

TEST_F(SessionCacheTest, DirectoryOwnedByAnotherUserIsNotUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to chown a directory to another user";
  fs::create_directories(cache_dir);
  ASSERT_EQ(::chown(cache_dir.c_str(), 4242, 4242), 0);
  Session s(model, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::none);
  EXPECT_TRUE(has_note(s.stats(), "owned by another user (uid 4242")) << all_notes(s.stats());
  opt.trust_cache_dir = true;
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::miss);
}

TEST_F(SessionCacheTest, ReadOnlyDirectoryLoadsAndWritesNothing) {
  Tmpfs ro(dir / "ro", "size=4m,mode=0700");
  if (!ro.ok) GTEST_SKIP() << "SKIPPED: cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  opt.cache_dir = ro.dir;
  std::string entry = Session(model, opt).stats().artifact_path;
  set_mtime_ago(entry, 1000);
  int64_t used = mtime_ns(entry);
  ASSERT_TRUE(ro.remount_read_only()) << std::strerror(errno);
  auto before = cache::scan_dir(ro.dir).size();

  Session hit(model, opt);
  EXPECT_EQ(hit.stats().cache, SessionStats::Cache::hit);
  ASSERT_EQ(hit.stats().notes.size(), 1u) << all_notes(hit.stats());
  EXPECT_TRUE(has_note(hit.stats(), "is read-only")) << all_notes(hit.stats());
  EXPECT_TRUE(has_note(hit.stats(), "nothing is written")) << all_notes(hit.stats());
  expect_mlp_y(hit.run({{"x", mlp_x()}}));
  EXPECT_EQ(mtime_ns(entry), used);  // last use not recorded

  SessionOptions shaped = opt;
  shaped.input_shapes["x"] = {2, 4};
  Session miss(model, shaped);
  EXPECT_EQ(miss.stats().cache, SessionStats::Cache::none);
  EXPECT_EQ(miss.stats().notes.size(), 1u) << all_notes(miss.stats());
  expect_mlp_y(miss.run({{"x", mlp_x()}}));
  EXPECT_EQ(cache::scan_dir(ro.dir).size(), before);
}

TEST_F(SessionCacheTest, FullDiskOnTmpfsIsANoteNotACorruptEntry) {
  // 64 KiB of tmpfs; the model's 40000-float constant makes a ~160 KB entry.
  Tmpfs small(dir / "small", "size=64k,mode=0700");
  if (!small.ok) GTEST_SKIP() << "SKIPPED: cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  ModelBuilder b;
  b.input("x", 1, {40000});
  b.initializer("w", {40000}, std::vector<float>(40000, 0.5f));
  b.node("Mul", {"x", "w"}, {"y"});
  b.output("y", 1, {40000});
  b.save(dir / "big.onnx");
  opt.cache_dir = small.dir;
  Session s(dir / "big.onnx", opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::none);
  EXPECT_TRUE(has_note(s.stats(), "could not write the cache entry")) << all_notes(s.stats());
  EXPECT_TRUE(has_note(s.stats(), "No space left on device")) << all_notes(s.stats());
  for (auto& f : cache::scan_dir(small.dir)) ADD_FAILURE() << "left behind: " << f.path;
  Tensor x(DType::f32, {40000});
  for (int i = 0; i < 40000; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto y = s.run({{"x", x}});
  EXPECT_EQ(y.at("y").data<float>()[39999], 19999.5f);
}

TEST_F(SessionCacheTest, FileSizeLimitDuringPublishIsANoteNotACorruptEntry) {
  // The same failure without root: RLIMIT_FSIZE makes write() fail with EFBIG
  // (SIGXFSZ ignored), in a child process so the limit does not leak.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim{2048, 2048};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      Session s(model, opt);
      bool ok = s.stats().cache == SessionStats::Cache::none && has_note(s.stats(), "could not write the cache entry") &&
                has_note(s.stats(), "File too large");
      auto y = s.run({{"x", mlp_x()}}).at("y");
      ok = ok && y.data<float>()[0] == 3.5f && y.data<float>()[5] == 0.3f;
      ::_exit(ok ? 0 : 1);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto left = cache::scan_dir(cache_dir);
  EXPECT_TRUE(left.empty()) << left.size() << " file(s) left, first " << left[0].path;
}

TEST_F(SessionCacheTest, WaitingForAnotherCompileIsReportedAsItHappens) {
  fs::create_directories(cache_dir);
  ::chmod(cache_dir.c_str(), 0700);
  std::string why;
  auto held = cache::KeyLock::acquire(cache::Cache(cache_dir).lock_path(key()), std::chrono::milliseconds(0), nullptr, &why);
  ASSERT_TRUE(held.held()) << why;
  std::vector<std::string> live;
  std::atomic<bool> waiting{false};
  opt.on_note = [&](const std::string& n) {
    live.push_back(n);
    waiting = true;
  };
  std::thread other([&] {
    // The "other process": publishes the entry, then lets go of the lock.
    while (!waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    SessionOptions o = opt;
    o.on_note = nullptr;
    o.cache_dir = dir / "elsewhere";
    std::string path = Session(model, o).stats().artifact_path;
    fs::copy_file(path, dir / "staged.kiln");
    fs::rename(dir / "staged.kiln", cache::Cache(cache_dir).entry_path(key()));
    held.release();
  });
  Session s(model, opt);
  other.join();
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::hit);  // loaded what the other one published
  EXPECT_EQ(s.stats().compile_ms, 0);
  ASSERT_FALSE(live.empty());
  EXPECT_NE(live[0].find("waiting for another process"), std::string::npos) << live[0];
  EXPECT_EQ(live, s.stats().notes);
  expect_mlp_y(s.run({{"x", mlp_x()}}));
}

TEST_F(SessionCacheTest, LockTimeoutCompilesAnyway) {
  fs::create_directories(cache_dir);
  std::string why;
  auto held = cache::KeyLock::acquire(cache::Cache(cache_dir).lock_path(key()), std::chrono::milliseconds(0), nullptr, &why);
  ASSERT_TRUE(held.held()) << why;
  opt.cache_lock_timeout_s = 0.05;
  Session s(model, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  EXPECT_TRUE(has_note(s.stats(), "compiling without the cache lock")) << all_notes(s.stats());
  expect_mlp_y(s.run({{"x", mlp_x()}}));
}

TEST_F(SessionCacheTest, ProcessesStartingTogetherCompileOnce) {
  constexpr int kProcs = 8;
  int go[2], results[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(results), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      char c;
      ::close(go[1]);
      (void)!::read(go[0], &c, 1);  // all start when the pipe closes
      char r = 'E';
      try {
        Session s(model, opt);
        auto y = s.run({{"x", mlp_x()}}).at("y");
        bool right = y.data<float>()[0] == 3.5f && y.data<float>()[1] == 0.75f && y.data<float>()[5] == 0.3f;
        r = !right ? 'W' : s.stats().cache == SessionStats::Cache::miss ? 'M' : s.stats().cache == SessionStats::Cache::hit ? 'H' : 'N';
      } catch (...) {
      }
      (void)!::write(results[1], &r, 1);
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  ::close(go[1]);
  for (auto p : pids) ::waitpid(p, nullptr, 0);
  ::close(results[1]);
  std::string got(kProcs, '?');
  ASSERT_EQ(::read(results[0], got.data(), kProcs), kProcs);
  ::close(results[0]);
  EXPECT_EQ(std::count(got.begin(), got.end(), 'M'), 1) << got;
  EXPECT_EQ(std::count(got.begin(), got.end(), 'H'), kProcs - 1) << got;
  auto v = cache::verify_entries(cache_dir);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].ok) << v[0].problem;
  EXPECT_EQ(cache::scan_dir(cache_dir).size(), 1u);  // no lock or temporary file left
}

}  // namespace
}  // namespace kiln::testing

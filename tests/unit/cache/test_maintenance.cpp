// Cache maintenance: listing, verification, LRU eviction, stale files, clear,
// explain; sizes.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cache/cache.h"
#include "cache/explain.h"
#include "cache/lock.h"
#include "cache/maintenance.h"
#include "cache/model_digest.h"
#include "cache_test_util.h"
#include "runtime/compile.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

/// A cache with three entries of the MLP (shapes none, 1x4, 2x4) whose last
/// uses are 300, 200 and 100 s ago.
struct Maint : ::testing::Test {
  TempDir dir;
  fs::path cache_dir = dir / "cache";
  fs::path model = dir / "mlp.onnx";
  std::vector<std::string> entries;  // oldest first
  SessionOptions opt;

  void SetUp() override {
    mlp_model().save(model);
    // These tests are about the entry a Session makes when it is constructed;
    // the MLP's batch is symbolic, and shape specialization (the default)
    // would compile on the first run instead (tests/cli/test_specialization.py).
    opt.specialize_shapes = false;
    opt.cache_dir = cache_dir;
    std::vector<std::vector<int64_t>> shapes{{}, {1, 4}, {2, 4}};
    int age = 300;
    for (auto& s : shapes) {
      SessionOptions o = opt;
      if (!s.empty()) o.input_shapes["x"] = s;
      Session sess(model, o);
      EXPECT_EQ(sess.stats().cache, SessionStats::Cache::miss);
      entries.push_back(sess.stats().artifact_path);
      set_mtime_ago(sess.stats().artifact_path, age);
      age -= 100;
    }
  }
  uint64_t size_of(size_t i) { return fs::file_size(entries[i]); }
};

TEST_F(Maint, ListShowsEveryEntryWithItsCompatBlock) {
  auto list = cache::list_entries(cache_dir);
  ASSERT_EQ(list.size(), 3u);
  for (auto& e : list) {
    ASSERT_TRUE(e.compat.has_value()) << e.error;
    EXPECT_EQ(e.compat->target, "cpu");
    EXPECT_EQ(e.compat->precision, "fp32");
    EXPECT_EQ(e.compat->cache_key, e.file.key);
    EXPECT_EQ(e.file.bytes, fs::file_size(e.file.path));
  }
  // Files that are not kiln's are never listed (nor removed).
  { std::ofstream(cache_dir / "README.txt") << "mine"; }
  EXPECT_EQ(cache::scan_dir(cache_dir).size(), 3u);
  cache::clear(cache_dir);
  EXPECT_TRUE(fs::exists(cache_dir / "README.txt"));
}

TEST_F(Maint, HitUpdatesLastUse) {
  int64_t before = mtime_ns(entries[0]);
  Session s(model, opt);  // the entry without shapes, last used 300 s ago
  ASSERT_EQ(s.stats().cache, SessionStats::Cache::hit);
  int64_t after = mtime_ns(entries[0]);
  EXPECT_GT(after - before, int64_t{290} * 1000000000);
  // Now the least recently used is the 1x4 entry: gc to two entries' size drops it.
  auto rep = cache::gc(cache_dir, size_of(0) + size_of(2));
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].path, entries[1]);
}

TEST_F(Maint, GcEvictsLeastRecentlyUsedDownToTheCap) {
  uint64_t total = size_of(0) + size_of(1) + size_of(2);
  auto none = cache::gc(cache_dir, total);
  EXPECT_TRUE(none.removed.empty());
  EXPECT_EQ(none.bytes_before, total);
  EXPECT_EQ(none.bytes_after, total);

  auto rep = cache::gc(cache_dir, total - 1);
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].path, entries[0]);  // the oldest
  EXPECT_EQ(rep.bytes_after, size_of(1) + size_of(2));
  EXPECT_FALSE(fs::exists(entries[0]));

  // keep_key protects the entry just published, even when it is the oldest.
  std::string key1 = fs::path(entries[1]).stem().string();
  auto rep2 = cache::gc(cache_dir, 1, key1);
  ASSERT_EQ(rep2.removed.size(), 1u);
  EXPECT_EQ(rep2.removed[0].path, entries[2]);
  EXPECT_TRUE(fs::exists(entries[1]));
}

TEST_F(Maint, QuarantinedFilesAreEvictedFirst) {
  std::string key2 = fs::path(entries[2]).stem().string();
  ASSERT_TRUE(cache::Cache(cache_dir).quarantine(key2));  // the newest, moved aside
  EXPECT_TRUE(fs::exists(entries[2] + ".bad"));
  auto rep = cache::gc(cache_dir, size_of(0) + size_of(1));
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].kind, cache::FileKind::quarantined);
  EXPECT_TRUE(fs::exists(entries[0]));
}

TEST_F(Maint, PublishAppliesTheCapAndSaysSo) {
  SessionOptions o = opt;
  o.input_shapes["x"] = {3, 4};
  o.cache_max_bytes = size_of(2) + size_of(2) / 2;  // room for about one entry and a half
  Session s(model, o);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  EXPECT_TRUE(fs::exists(s.stats().artifact_path));
  auto left = cache::list_entries(cache_dir);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].file.path, s.stats().artifact_path);
  bool noted = false;
  for (auto& n : s.stats().notes) noted |= n.find("evicted 3 least recently used") != std::string::npos;
  EXPECT_TRUE(noted) << (s.stats().notes.empty() ? "no notes" : s.stats().notes.back());
}

TEST_F(Maint, StaleTemporaryAndLockFilesGoLiveOnesStay) {
  std::string key = fs::path(entries[0]).stem().string();
  // A dead writer: a child that has exited.
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  fs::path dead = cache_dir / fmt::format(".{}.kiln.tmp-{}-0badf00d", key, child);
  fs::path alive = cache_dir / fmt::format(".{}.kiln.tmp-{}-00c0ffee", key, ::getpid());
  std::string key2 = fs::path(entries[1]).stem().string();
  fs::path locked = cache_dir / fmt::format(".{}.kiln.tmp-{}-12345678", key2, child);
  for (auto& p : {dead, alive, locked}) std::ofstream(p) << "partial";
  { std::ofstream(cache_dir / (key + ".lock")) << ""; }  // stale lock
  std::string why;
  auto held = cache::KeyLock::acquire(cache_dir / (key2 + ".lock"), std::chrono::milliseconds(0), nullptr, &why);
  ASSERT_TRUE(held.held()) << why;

  auto rep = cache::gc(cache_dir, 0);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));   // its writer (this process) lives
  EXPECT_TRUE(fs::exists(locked));  // its key is being published under the lock
  EXPECT_FALSE(fs::exists(cache_dir / (key + ".lock")));
  EXPECT_TRUE(fs::exists(cache_dir / (key2 + ".lock")));
  EXPECT_EQ(rep.removed.size(), 2u);
  EXPECT_EQ(rep.kept_busy.size(), 3u);
  // Temporary files never count as entries, nor are they loaded.
  EXPECT_EQ(cache::list_entries(cache_dir).size(), 3u);
}

TEST_F(Maint, VerifyFindsDamagedAndMisnamedEntries) {
  auto ok = cache::verify_entries(cache_dir);
  ASSERT_EQ(ok.size(), 3u);
  for (auto& r : ok) EXPECT_TRUE(r.ok) << r.problem;

  auto bytes = file_bytes(entries[0]);
  bytes[bytes.size() - 3] ^= 0x40;  // in the buckets section, the last one
  write_bytes(entries[0], bytes);
  fs::copy_file(entries[1], cache_dir / (std::string(32, 'a') + ".kiln"));
  auto res = cache::verify_entries(cache_dir);
  ASSERT_EQ(res.size(), 4u);
  int bad = 0;
  for (auto& r : res) {
    if (r.ok) continue;
    ++bad;
    if (r.file.path == entries[0]) EXPECT_NE(r.problem.find("section 'buckets'"), std::string::npos) << r.problem;
    else EXPECT_NE(r.problem.find("not the key in its file name"), std::string::npos) << r.problem;
  }
  EXPECT_EQ(bad, 2);
}

TEST_F(Maint, ClearRemovesEntriesQuarantineMemosAndStaleFiles) {
  std::string key = fs::path(entries[0]).stem().string();
  ASSERT_TRUE(cache::Cache(cache_dir).quarantine(key));
  fs::create_directories(cache_dir / "digests");
  { std::ofstream(cache_dir / "digests" / "0123456789abcdef.json") << "{}"; }
  auto rep = cache::clear(cache_dir);
  EXPECT_EQ(rep.removed.size(), 3u);
  EXPECT_EQ(rep.bytes_after, 0u);
  EXPECT_TRUE(cache::scan_dir(cache_dir).empty());
  EXPECT_FALSE(fs::exists(cache_dir / "digests"));
  // Clearing a missing directory is not an error.
  EXPECT_TRUE(cache::clear(dir / "none").removed.empty());
}

TEST_F(Maint, OrtEpPartitionModelsAreCountedEvictedAndCleared) {
  // The kiln EP's partition models (ort_ep/ep.cpp): an old one and a new one,
  // a temporary one left by a dead writer, and a file that is not kiln's.
  fs::path parts = cache_dir / cache::kPartitionDir;
  fs::create_directories(parts);
  fs::path old_part = parts / (std::string(32, 'a') + ".onnx"), new_part = parts / (std::string(32, 'b') + ".onnx");
  { std::ofstream(old_part) << std::string(5000, 'x'); }
  { std::ofstream(new_part) << std::string(7000, 'y'); }
  set_mtime_ago(old_part, 400);  // older than every entry
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  fs::path dead = parts / fmt::format(".{}.onnx.tmp-{}-0badf00d", std::string(32, 'c'), child);
  { std::ofstream(dead) << "partial"; }
  { std::ofstream(parts / "notes.txt") << "mine"; }
  int partitions = 0;
  for (auto& f : cache::scan_dir(cache_dir))
    if (f.kind == cache::FileKind::partition) {
      ++partitions;
      EXPECT_EQ(f.bytes, fs::file_size(f.path));
    }
  EXPECT_EQ(partitions, 2);
  const uint64_t entries_bytes = size_of(0) + size_of(1) + size_of(2);
  auto none = cache::gc(cache_dir, entries_bytes + 12000);
  EXPECT_EQ(none.bytes_before, entries_bytes + 12000);
  EXPECT_FALSE(fs::exists(dead));  // the dead writer's temporary file goes
  ASSERT_EQ(none.removed.size(), 1u);
  // Over the cap by one byte: the oldest file (the old partition) goes first.
  auto rep = cache::gc(cache_dir, entries_bytes + 12000 - 1);
  ASSERT_EQ(rep.removed.size(), 1u);
  EXPECT_EQ(rep.removed[0].kind, cache::FileKind::partition);
  EXPECT_EQ(rep.removed[0].path, old_part);
  EXPECT_EQ(rep.bytes_after, entries_bytes + 7000);
  EXPECT_TRUE(fs::exists(new_part));
  auto cleared = cache::clear(cache_dir);
  EXPECT_FALSE(fs::exists(new_part));
  EXPECT_TRUE(fs::exists(parts / "notes.txt"));
  EXPECT_EQ(cleared.bytes_after, 0u);
}

TEST_F(Maint, ExplainNamesTheFieldsOfTheNearestEntries) {
  SessionOptions o = opt;
  o.input_shapes["x"] = {5, 4};  // no entry has this shape
  auto facts = build_facts(o.target);
  auto md = cache::digest_model(model).digest;
  auto request = request_compat(md, o, facts);
  auto ex = cache::explain(cache_dir, request, 2);
  EXPECT_FALSE(ex.entry_exists);
  EXPECT_EQ(ex.entries, 3);
  ASSERT_EQ(ex.nearest.size(), 2u);
  for (auto& c : ex.nearest) {
    ASSERT_EQ(c.diffs.size(), 1u);
    EXPECT_EQ(c.diffs[0].field, "options_digest");
    EXPECT_NE(c.options.find("target=cpu;precision=fp32"), std::string::npos) << c.options;
  }
  // Most recently used first among equals: the 2x4 entry, then 1x4.
  EXPECT_NE(ex.nearest[0].options.find("shape:x=2x4"), std::string::npos) << ex.nearest[0].options;
  EXPECT_NE(ex.nearest[1].options.find("shape:x=1x4"), std::string::npos) << ex.nearest[1].options;

  // Another machine's facts: device_name differs too, and nothing else.
  auto other = facts;
  other.device_name = "Elsewhere CPU";
  auto ex2 = cache::explain(cache_dir, request_compat(md, opt, other), 5);
  ASSERT_EQ(ex2.nearest.size(), 3u);
  ASSERT_EQ(ex2.nearest[0].diffs.size(), 1u);
  EXPECT_EQ(ex2.nearest[0].diffs[0].field, "device_name");
  EXPECT_EQ(ex2.nearest[0].diffs[0].entry, facts.device_name);
  EXPECT_EQ(ex2.nearest[0].diffs[0].request, "Elsewhere CPU");

  // The request's own entry is reported as existing, not as a neighbour.
  auto ex3 = cache::explain(cache_dir, request_compat(md, opt, facts), 5);
  EXPECT_TRUE(ex3.entry_exists);
  EXPECT_EQ(ex3.nearest.size(), 2u);
}

TEST(CacheSizes, ParseAndFormat) {
  EXPECT_EQ(cache::parse_size("2GiB", "--max-size"), uint64_t{2} << 30);
  EXPECT_EQ(cache::parse_size("2G", "--max-size"), uint64_t{2} << 30);
  EXPECT_EQ(cache::parse_size("1.5 MiB", "--max-size"), uint64_t{3} << 19);
  EXPECT_EQ(cache::parse_size("500MB", "--max-size"), 500000000u);
  EXPECT_EQ(cache::parse_size("4096", "--max-size"), 4096u);
  EXPECT_EQ(cache::parse_size("10kb", "--max-size"), 10000u);
  EXPECT_EQ(cache::parse_size("0", "--max-size"), 0u);
  for (const char* bad : {"", "G", "2 GB GB", "-1", "2Gi", "1e9", "2XB"}) {
    try {
      cache::parse_size(bad, "--max-size");
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find("--max-size"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(cache::format_size(512), "512 B");
  EXPECT_EQ(cache::format_size(1536), "1.50 KiB");
  EXPECT_EQ(cache::format_size(uint64_t{3} << 30), "3.00 GiB");
}

}  // namespace
}  // namespace kiln::testing

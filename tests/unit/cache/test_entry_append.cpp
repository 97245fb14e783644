// Programs appended to a cache entry (format 5, artifact/entry.h): a new
// specialization is added without rewriting the entry's constants, a later
// process finds it, and a torn or damaged append loses nothing before it and
// is never run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "../artifact/artifact_test_util.h"
#include "../onnx/model_builder.h"
#include "artifact/artifact.h"
#include "artifact/entry.h"
#include "cache/maintenance.h"
#include "kiln/compile.h"
#include "kiln/session.h"
#include "runtime/inspect.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kWidth = 256;  // W is kWidth x kWidth float32: 256 KiB of constants

// y[N,256] = x[N,256] @ W, W[i][j] = ((i * 31 + j) % 17) / 17; N symbolic.
ModelBuilder heavy_model() {
  ModelBuilder b;
  typed(b.graph().add_input(), "x", 1, {-1, kWidth}, {"N", ""});
  std::vector<float> w(kWidth * kWidth);
  for (int64_t i = 0; i < kWidth; ++i)
    for (int64_t j = 0; j < kWidth; ++j) w[i * kWidth + j] = static_cast<float>((i * 31 + j) % 17) / 17.f;
  b.initializer("W", {kWidth, kWidth}, w);
  b.node("MatMul", {"x", "W"}, {"y"});
  typed(b.graph().add_output(), "y", 1, {-1, kWidth}, {"N", ""});
  return b;
}

Tensor ramp(int64_t rows) {
  Tensor t(DType::f32, {rows, kWidth});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.01f * static_cast<float>((i * 7) % 13) - 0.05f;
  return t;
}

// y = x @ W computed here, for ramp(rows).
void expect_product(const Tensor& y, int64_t rows) {
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{rows, kWidth}));
  Tensor x = ramp(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kWidth; j += 37) {
      double want = 0;
      for (int64_t i = 0; i < kWidth; ++i)
        want += double{x.data<float>()[r * kWidth + i]} * (static_cast<double>((i * 31 + j) % 17) / 17.0);
      ASSERT_NEAR(y.data<float>()[r * kWidth + j], want, 1e-4) << "row " << r << " col " << j;
    }
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

struct stat stat_of(const fs::path& p) {
  struct stat st{};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st;
}

std::string notes_of(const Session& s) {
  std::string out;
  for (auto& n : s.stats().notes) out += n + "\n";
  return out;
}

struct EntryAppend : ::testing::Test {
  TempDir dir;
  fs::path model = dir / "heavy.onnx";
  SessionOptions opt;
  void SetUp() override {
    heavy_model().save(model);
    opt.cache_dir = dir / "cache";
    opt.target = Target::cpu();
  }
  // The entry after a session ran batch 1 (published whole) then batch 3 (appended).
  fs::path two_programs() {
    Session s(model, opt);
    expect_product(s.run({{"x", ramp(1)}}).at("y"), 1);
    expect_product(s.run({{"x", ramp(3)}}).at("y"), 3);
    EXPECT_EQ(s.buckets().compiled_by_run, 2);
    return s.stats().artifact_path;
  }
  // A new session on the entry: its programs, and that batch 3 runs right.
  std::vector<std::vector<int64_t>> reopen(int want_compiles, std::string* notes = nullptr) {
    Session s(model, opt);
    EXPECT_EQ(s.stats().cache, SessionStats::Cache::hit);
    if (notes) *notes = notes_of(s);
    auto held = s.buckets().programs;
    expect_product(s.run({{"x", ramp(3)}}).at("y"), 3);
    EXPECT_EQ(s.buckets().compiled_by_run, want_compiles);
    return held;
  }
};

TEST_F(EntryAppend, ASpecializationIsAppendedWithoutRewritingTheConstants) {
  fs::path entry;
  struct stat before{};
  std::vector<uint8_t> base;
  {
    Session s(model, opt);
    expect_product(s.run({{"x", ramp(1)}}).at("y"), 1);
    entry = s.stats().artifact_path;
    before = stat_of(entry);
    base = read_all(entry);
    ::usleep(20000);  // a rewrite within the same mtime tick would go unseen
    expect_product(s.run({{"x", ramp(3)}}).at("y"), 3);
  }
  struct stat after = stat_of(entry);
  auto e = artifact::read_entry(entry);
  ASSERT_EQ(e.const_regions.size(), 2u);
  const uint64_t constants = e.const_regions.front().size;
  EXPECT_GE(constants, uint64_t{kWidth * kWidth * 4});
  // The same file (no rename), its first bytes untouched, grown by a block
  // that holds the new program but not W.
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(e.base_bytes, static_cast<uint64_t>(before.st_size));
  auto now = read_all(entry);
  ASSERT_GT(now.size(), base.size());
  EXPECT_TRUE(std::equal(base.begin(), base.end(), now.begin()));
  const uint64_t appended = now.size() - base.size();
  EXPECT_LT(appended, constants / 8) << "appended " << appended << " bytes";
  EXPECT_EQ(e.appended, 1u);
  EXPECT_EQ(e.ignored, "");
  EXPECT_EQ(e.program.sizes, (std::vector<int64_t>{1}));
  ASSERT_EQ(e.program.more.size(), 1u);
  EXPECT_EQ(e.program.more[0].sizes, (std::vector<int64_t>{3}));
  // The appended program views the base's W: one copy in the file.
  auto weight = [](const ir::Model& m) {
    const void* p = nullptr;
    for (auto& v : m.values)
      if (v.constant && v.constant->nbytes() >= uint64_t{kWidth * kWidth * 4}) p = v.constant->raw();
    return p;
  };
  EXPECT_NE(weight(e.program.model), nullptr);
  EXPECT_EQ(weight(e.program.more[0].model), weight(e.program.model));
  // A later process finds both programs; the strict reader accepts the file too.
  EXPECT_EQ(reopen(0), (std::vector<std::vector<int64_t>>{{1}, {3}}));
  EXPECT_EQ(artifact::read_file(entry).more.size(), 1u);
  auto j = inspect_artifact(entry.string());
  EXPECT_EQ(j["appended"]["programs"], 1);
  EXPECT_EQ(j["appended"]["bytes"].get<uint64_t>(), appended);
  // cache ls / verify count the one file with its appended bytes.
  auto ls = cache::list_entries(opt.cache_dir.value());
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0].file.bytes, now.size());
  auto v = cache::verify_entries(opt.cache_dir.value());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(v[0].ok) << v[0].problem;
}

TEST_F(EntryAppend, ATruncatedAppendIsIgnoredAndTheProgramCompiledAgain) {
  fs::path entry = two_programs();
  auto e = artifact::read_entry(entry);
  auto bytes = read_all(entry);
  const uint64_t cut = e.base_bytes + (bytes.size() - e.base_bytes) / 2;
  ::truncate(entry.c_str(), static_cast<off_t>(cut));
  // Explicitly loaded, the file is refused naming the block; the cache ignores it.
  try {
    artifact::read_file(entry);
    ADD_FAILURE() << "a torn append was accepted by the strict reader";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::corrupt_artifact);
    EXPECT_NE(std::string(err.what()).find("appended block"), std::string::npos) << err.what();
  }
  std::string notes;
  EXPECT_EQ(reopen(1, &notes), (std::vector<std::vector<int64_t>>{{1}}));
  EXPECT_NE(notes.find("not a complete program block"), std::string::npos) << notes;
  // The recompiled program was appended over the torn bytes: the file is whole again.
  auto again = artifact::read_file(entry);
  ASSERT_EQ(again.more.size(), 1u);
  EXPECT_EQ(again.more[0].sizes, (std::vector<int64_t>{3}));
  EXPECT_EQ(reopen(0), (std::vector<std::vector<int64_t>>{{1}, {3}}));
}

TEST_F(EntryAppend, AFlippedByteInAnAppendIsIgnoredNeverRun) {
  fs::path entry = two_programs();
  auto e = artifact::read_entry(entry);
  const auto good = read_all(entry);
  const uint64_t block = artifact::detail::align_up(e.base_bytes);
  // One byte in the block header, one in its constants / program, one at its end.
  for (uint64_t at : {block + 20, block + (good.size() - block) / 2, uint64_t{good.size() - 1}}) {
    auto bad = good;
    bad[at] ^= 0x40;
    write_all(entry, bad);
    std::string notes;
    EXPECT_EQ(reopen(1, &notes), (std::vector<std::vector<int64_t>>{{1}})) << "byte " << at;
    EXPECT_NE(notes.find("ignored"), std::string::npos) << notes;
    EXPECT_EQ(artifact::read_file(entry).more.size(), 1u) << "byte " << at;  // repaired by the append
  }
}

TEST_F(EntryAppend, EveryFlippedByteOfABlockIsIgnoredAndTheBaseKept) {
  fs::path entry = two_programs();
  const auto good = read_all(entry);
  auto e = artifact::read_entry(entry);
  const uint64_t block = artifact::detail::align_up(e.base_bytes);
  int checked = 0;
  for (uint64_t i = block; i < good.size(); i += 5) {
    auto bytes = std::make_shared<std::vector<uint8_t>>(good);
    (*bytes)[i] ^= 0x01;
    artifact::EntryRead r;
    auto cp = artifact::detail::read_view(bytes->data(), bytes->size(), bytes, "e.kiln", &r);
    ASSERT_EQ(cp.more.size(), 0u) << "byte " << i;
    ASSERT_EQ(cp.sizes, (std::vector<int64_t>{1}));
    ASSERT_NE(r.ignored, "") << "byte " << i;
    ASSERT_EQ(r.valid_end, e.base_bytes);
    ++checked;
  }
  EXPECT_GT(checked, 100);
  // Trailing zeros are padding, not a torn block.
  auto zeros = std::make_shared<std::vector<uint8_t>>(good);
  zeros->resize(good.size() + 1000, 0);
  artifact::EntryRead r;
  EXPECT_EQ(artifact::detail::read_view(zeros->data(), zeros->size(), zeros, "z.kiln", &r).more.size(), 1u);
  EXPECT_EQ(r.ignored, "");
}

TEST_F(EntryAppend, AnExplicitArtifactIsOneFileAndAnEntryCopiedOutRuns) {
  // kiln compile writes one self-contained file: no appended block.
  SessionOptions c = opt;
  c.dims["N"] = DimSpec::parse("1,3");
  auto r = compile(model, dir / "m.kiln", c);
  EXPECT_EQ(r.programs, 2);
  auto e = artifact::read_entry(dir / "m.kiln");
  EXPECT_EQ(e.appended, 0u);
  EXPECT_EQ(e.base_bytes, fs::file_size(dir / "m.kiln"));
  // A cache entry with an appended program is itself one file: copied out, it loads.
  fs::path entry = two_programs();
  fs::copy_file(entry, dir / "copy.kiln");
  SessionOptions lo;
  lo.target = Target::cpu();
  Session s = Session::load(dir / "copy.kiln", lo);
  expect_product(s.run({{"x", ramp(3)}}).at("y"), 3);
  EXPECT_EQ(s.buckets().programs, (std::vector<std::vector<int64_t>>{{1}, {3}}));
}

// y[256,N] = W[256,256] @ x[256,N]: N is a last axis, so padding it is not
// provably safe and every size gets its own program (no split, no rounding).
ModelBuilder column_model() {
  ModelBuilder b;
  typed(b.graph().add_input(), "x", 1, {kWidth, -1}, {"", "N"});
  b.initializer("W", {kWidth, kWidth}, std::vector<float>(kWidth * kWidth, 0.5f));
  b.node("MatMul", {"W", "x"}, {"y"});
  typed(b.graph().add_output(), "y", 1, {kWidth, -1}, {"", "N"});
  return b;
}

// In a child process (the parent must not start OpenMP threads before it
// forks): a session on `model` runs an x of n columns; exit 0 when y has the
// right shape and value and the session compiled exactly one program.
pid_t run_in_child(const fs::path& model, const SessionOptions& opt, int64_t n, const int* go = nullptr) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (go) {
    char c;
    ::close(go[1]);
    (void)!::read(go[0], &c, 1);  // start when the parent closes the pipe
  }
  int rc = 2;
  try {
    Session s(model, opt);
    Tensor x(DType::f32, {kWidth, n});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.f;
    Tensor y = s.run({{"x", x}}).at("y");
    rc = y.shape() == std::vector<int64_t>{kWidth, n} && y.data<float>()[0] == 0.5f * kWidth &&
                 s.buckets().compiled_by_run == 1
             ? 0
             : 1;
  } catch (...) {
  }
  ::_exit(rc);
}

int exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + status;
}

TEST_F(EntryAppend, ProcessesAppendingAtOnceKeepEveryProgram) {
  fs::path columns = dir / "columns.onnx";
  column_model().save(columns);
  ASSERT_EQ(exit_code(run_in_child(columns, opt, 1)), 0);  // publishes the entry (N=1)
  // Four processes, each adding another size at the same moment: the key's
  // lock orders the appends, so none overwrites another.
  const std::vector<int64_t> sizes{2, 3, 5, 6};
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> pids;
  for (int64_t n : sizes) pids.push_back(run_in_child(columns, opt, n, go));
  ::close(go[0]);
  ::close(go[1]);
  for (auto p : pids) EXPECT_EQ(exit_code(p), 0);
  Session s(columns, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::hit);
  auto held = s.buckets().programs;
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<std::vector<int64_t>>{{1}, {2}, {3}, {5}, {6}}));
  auto e = artifact::read_entry(s.stats().artifact_path);
  EXPECT_EQ(e.appended, 4u);
  EXPECT_EQ(e.ignored, "");
  EXPECT_EQ(artifact::read_file(s.stats().artifact_path).more.size(), 4u);
}

// `bytes` (a format 5 file) relabelled as format `v`: header and compat block, checksums redone.
std::vector<uint8_t> as_version(std::vector<uint8_t> bytes, uint32_t v) {
  using artifact_test::get32;
  using artifact_test::get64;
  artifact_test::put32(bytes, 8, v);
  const uint64_t coff = get64(bytes, 24), csize = get64(bytes, 32);
  std::vector<uint8_t> compat(bytes.begin() + static_cast<ptrdiff_t>(coff),
                              bytes.begin() + static_cast<ptrdiff_t>(coff + csize));
  // encode_compat writes kFormatVersion as a u32 somewhere in the FlatBuffer: find it.
  for (size_t i = 0; i + 4 <= compat.size(); ++i) {
    if (get32(compat, i) != artifact::kFormatVersion) continue;
    auto trial = compat;
    artifact_test::put32(trial, i, v);
    try {
      if (artifact::detail::decode_compat(trial.data(), trial.size(), v, "t").format_version != v) continue;
    } catch (const Error&) {
      continue;
    }
    std::copy(trial.begin(), trial.end(), bytes.begin() + static_cast<ptrdiff_t>(coff));
    artifact_test::restamp(bytes);
    return bytes;
  }
  ADD_FAILURE() << "no format_version field found in the compatibility block";
  return bytes;
}

TEST_F(EntryAppend, AVersion4EntryIsRecompiledAndAVersion4FileRefusedNamingTheVersion) {
  fs::path entry;
  {
    Session s(model, opt);
    expect_product(s.run({{"x", ramp(1)}}).at("y"), 1);
    entry = s.stats().artifact_path;
  }
  auto v4 = as_version(read_all(entry), 4);
  ASSERT_EQ(artifact::read_file(entry).compat.format_version, artifact::kFormatVersion);
  write_all(dir / "old.kiln", v4);
  EXPECT_EQ(artifact::read_file(dir / "old.kiln").compat.format_version, 4u);  // still read (kiln inspect)
  // Explicit: refused, naming the version.
  try {
    SessionOptions lo;
    lo.target = Target::cpu();
    Session::load(dir / "old.kiln", lo);
    ADD_FAILURE() << "a format 4 artifact was loaded";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("format_version"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4"), std::string::npos) << msg;
  }
  // In the cache: recompiled with a note, and published in the current format.
  write_all(entry, v4);
  Session s(model, opt);
  EXPECT_NE(notes_of(s).find("format_version"), std::string::npos) << notes_of(s);
  expect_product(s.run({{"x", ramp(1)}}).at("y"), 1);
  EXPECT_EQ(artifact::read_file(entry).compat.format_version, artifact::kFormatVersion);
  // A format 4 file has no appended blocks: bytes after its end are refused.
  v4.push_back(0);
  write_all(dir / "old.kiln", v4);
  EXPECT_THROW(artifact::read_file(dir / "old.kiln"), Error);
}

}  // namespace
}  // namespace kiln::testing

// Model digest: same value as the importer's, covers external data, and the
// memo is used only while every file's stat is unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "cache/model_digest.h"
#include "cache_test_util.h"
#include "onnx/importer.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

TEST(ModelDigest, SameValueAsTheImporterDigest) {
  TempDir dir;
  mlp_model().save(dir / "mlp.onnx");
  auto d = cache::digest_model(dir / "mlp.onnx");
  EXPECT_EQ(d.digest, onnx_import::model_digest(dir / "mlp.onnx"));
  EXPECT_EQ(d.digest.size(), 32u);
  ASSERT_EQ(d.files.size(), 1u);
  EXPECT_EQ(d.bytes_hashed, fs::file_size(dir / "mlp.onnx"));
  EXPECT_FALSE(d.from_memo);

  fs::path ext = external_data_model(dir.path());
  auto e = cache::digest_model(ext);
  EXPECT_EQ(e.digest, onnx_import::model_digest(ext));
  ASSERT_EQ(e.files.size(), 2u);
  EXPECT_EQ(fs::path(e.files[1].path).filename(), "weights.bin");
  EXPECT_EQ(e.bytes_hashed, fs::file_size(ext) + 20);  // 8 bytes of padding + 3 floats
}

TEST(ModelDigest, GarbageAndTruncatedModelsAreInvalidModelNamingTheFile) {
  TempDir dir;
  auto bytes = mlp_model().bytes();
  write_bytes(dir / "cut.onnx", std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  write_bytes(dir / "junk.onnx", {'\xff', '\xff', '\xff', '\xff', '\x0f'});
  write_bytes(dir / "empty.onnx", {});
  for (const char* name : {"cut.onnx", "junk.onnx", "empty.onnx"}) {
    try {
      cache::digest_model(dir / name);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_model) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  try {
    cache::digest_model(dir / "missing.onnx");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
  }
}

TEST(ModelDigest, DeeplyNestedMessagesAreRefusedNotRecursedInto) {
  // model.graph -> (graph.node -> node.attribute -> attribute.g) x 3000:
  // a stack overflow for a naive walk; the digest refuses past 100 levels.
  std::vector<int> fields{7};
  for (int i = 0; i < 3000; ++i) fields.insert(fields.end(), {1, 5, 6});
  std::string msg;
  for (auto f = fields.rbegin(); f != fields.rend(); ++f) {
    std::string outer(1, static_cast<char>(*f << 3 | 2));
    size_t n = msg.size();
    do {
      uint8_t b = n & 0x7f;
      n >>= 7;
      outer += static_cast<char>(b | (n ? 0x80 : 0));
    } while (n);
    msg = outer + msg;
  }
  TempDir dir;
  write_bytes(dir / "deep.onnx", std::vector<char>(msg.begin(), msg.end()));
  try {
    cache::digest_model(dir / "deep.onnx");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_model);
    EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
  }
}

struct Memo : ::testing::Test {
  TempDir dir;
  fs::path memo = dir / "memo";
  fs::path ext;
  void SetUp() override {
    ext = external_data_model(dir.path());
    // Files younger than 2 s are never memoised (a write in the same
    // timestamp tick would go unseen): let them age.
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  }
};

TEST_F(Memo, UsedWhileNoStatChanges) {
  auto first = cache::digest_model(ext, memo, true);
  EXPECT_FALSE(first.from_memo);
  EXPECT_EQ(count_files(memo, ".json"), 1);
  auto second = cache::digest_model(ext, memo, true);
  EXPECT_TRUE(second.from_memo);
  EXPECT_EQ(second.digest, first.digest);
  EXPECT_EQ(second.bytes_hashed, 0u);
  EXPECT_EQ(second.files, first.files);
  // Without write permission the memo is still read.
  EXPECT_TRUE(cache::digest_model(ext, memo, false).from_memo);
}

TEST_F(Memo, ContentChangeWithForgedMtimeIsStillSeen) {
  auto first = cache::digest_model(ext, memo, true);
  struct stat before{};
  ASSERT_EQ(::stat((dir / "weights.bin").c_str(), &before), 0);
  {
    std::fstream f(dir / "weights.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(12);
    f.put('\x7f');
  }
  // Same size, mtime set back to the old value: only ctime tells.
  struct timespec t[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "weights.bin").c_str(), t, 0), 0);
  auto second = cache::digest_model(ext, memo, true);
  EXPECT_FALSE(second.from_memo);
  EXPECT_NE(second.digest, first.digest);
  EXPECT_EQ(second.digest, onnx_import::model_digest(ext));
}

TEST_F(Memo, ReplacedFileAndDamagedMemoAreMisses) {
  auto first = cache::digest_model(ext, memo, true);
  // Same bytes in a new inode: the stamp differs, so the digest is recomputed (same value).
  auto bytes = file_bytes(ext);
  fs::remove(ext);
  write_bytes(ext, bytes);
  auto second = cache::digest_model(ext, memo, true);
  EXPECT_FALSE(second.from_memo);
  EXPECT_EQ(second.digest, first.digest);
  // A damaged memo file is ignored, never an error.
  for (auto& e : fs::directory_iterator(memo)) write_bytes(e.path(), {'{', 'x'});
  auto third = cache::digest_model(ext, memo, false);
  EXPECT_FALSE(third.from_memo);
  EXPECT_EQ(third.digest, first.digest);
}

TEST(ModelDigestMemo, FreshFilesAreNotMemoised) {
  TempDir dir;
  mlp_model().save(dir / "mlp.onnx");
  cache::digest_model(dir / "mlp.onnx", dir / "memo", true);
  EXPECT_EQ(count_files(dir / "memo", ".json"), 0);
  EXPECT_FALSE(cache::digest_model(dir / "mlp.onnx", dir / "memo", true).from_memo);
}

}  // namespace
}  // namespace kiln::testing

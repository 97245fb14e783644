#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>

#include "../onnx/model_builder.h"
#include "artifact/artifact.h"
#include "kiln/compile.h"
#include "kiln/session.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

Tensor x_input() {
  Tensor x(DType::f32, {2, 4});
  float v[] = {1, 2, 3, 4, -1, 0, 0, 0};
  std::copy(v, v + 8, x.data<float>());
  return x;
}

// y = relu(x @ W + b) with W, b from mlp_model(), computed by hand:
// row 0: h = [3.0, 1.0, -1.0] + b = [3.5, 0.75, -1.0] -> [3.5, 0.75, 0]
// row 1: h = [-0.1, 0.1, 0.3] + b = [0.4, -0.15, 0.3] -> [0.4, 0, 0.3]
const std::vector<float> kExpected{3.5f, 0.75f, 0.f, 0.4f, 0.f, 0.3f};

void expect_mlp_output(const std::map<std::string, Tensor>& out) {
  ASSERT_EQ(out.count("y"), 1u);
  const Tensor& y = out.at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.data<float>()[i], kExpected[i], 1e-6) << i;
}

struct Fixture : ::testing::Test {
  TempDir dir;
  fs::path model = dir / "mlp.onnx";
  SessionOptions opt;
  void SetUp() override {
    mlp_model().save(model);
    // These tests are about the entry a Session makes when it is constructed;
    // the MLP's batch is symbolic, and shape specialization (the default)
    // would compile on the first run instead (tests/cli/test_specialization.py).
    opt.specialize_shapes = false;
    opt.cache_dir = dir / "cache";
  }
};

using SessionCache = Fixture;

TEST_F(SessionCache, MissThenHitWithoutCompiling) {
  Session a(model, opt);
  EXPECT_EQ(a.stats().cache, SessionStats::Cache::miss);
  EXPECT_GT(a.stats().compile_ms, 0);
  expect_mlp_output(a.run({{"x", x_input()}}));
  Session b(model, opt);
  EXPECT_EQ(b.stats().cache, SessionStats::Cache::hit);
  EXPECT_EQ(b.stats().compile_ms, 0);
  EXPECT_EQ(b.stats().artifact_path, a.stats().artifact_path);
  expect_mlp_output(b.run({{"x", x_input()}}));
}

TEST_F(SessionCache, KeyCoversWeightsTargetAndShapes) {
  Session a(model, opt);
  mlp_model(2.0f).save(dir / "mlp2.onnx");  // same graph, other weights
  Session w(dir / "mlp2.onnx", opt);
  EXPECT_EQ(w.stats().cache, SessionStats::Cache::miss);
  SessionOptions ref = opt;
  ref.target = Target::ref();
  EXPECT_EQ(Session(model, ref).stats().cache, SessionStats::Cache::miss);
  SessionOptions shaped = opt;
  shaped.input_shapes["x"] = {2, 4};
  Session s(model, shaped);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::miss);
  expect_mlp_output(s.run({{"x", x_input()}}));
  EXPECT_EQ(Session(model, shaped).stats().cache, SessionStats::Cache::hit);
}

TEST_F(SessionCache, CorruptEntryIsMovedAsideAndRebuilt) {
  std::string entry;
  {
    Session a(model, opt);
    entry = a.stats().artifact_path;
  }
  {
    std::fstream f(entry, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(0, std::ios::end);
    auto size = static_cast<long>(f.tellg());
    f.seekp(size / 2);
    f.put('\x5a');
    f.seekp(size / 2 + 1);
    f.put('\xa5');
  }
  Session b(model, opt);
  EXPECT_EQ(b.stats().cache, SessionStats::Cache::miss);
  ASSERT_FALSE(b.stats().notes.empty());
  EXPECT_NE(b.stats().notes[0].find("damaged"), std::string::npos) << b.stats().notes[0];
  EXPECT_TRUE(fs::exists(entry + ".bad"));
  expect_mlp_output(b.run({{"x", x_input()}}));
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::hit);
}

// An entry whose compatibility block records other math than the request
// (here TF32, as if written by another kiln) is refused naming `precision`,
// or recompiled under the default policy.
TEST_F(SessionCache, EntryWithOtherPrecisionIsRefusedNamingTheField) {
  std::string entry;
  {
    Session a(model, opt);
    entry = a.stats().artifact_path;
  }
  auto cp = artifact::read_file(entry);
  cp.compat.precision = "fp32+tf32";
  artifact::write_file(entry, cp);
  SessionOptions strict = opt;
  strict.cache_mismatch = MismatchPolicy::error;
  try {
    Session s(model, strict);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::incompatible_artifact);
    EXPECT_NE(std::string(e.what()).find("precision: the entry was compiled for 'fp32+tf32'"), std::string::npos)
        << e.what();
  }
  Session b(model, opt);
  EXPECT_EQ(b.stats().cache, SessionStats::Cache::miss);
  expect_mlp_output(b.run({{"x", x_input()}}));
  EXPECT_EQ(Session(model, opt).stats().cache, SessionStats::Cache::hit);
}

TEST_F(SessionCache, UnwritableCacheDirStillRunsAndSaysSo) {
  { std::ofstream(dir / "a_file") << "x"; }
  opt.cache_dir = dir / "a_file" / "cache";  // cannot be created, even as root
  Session s(model, opt);
  EXPECT_EQ(s.stats().cache, SessionStats::Cache::none);
  ASSERT_EQ(s.stats().notes.size(), 1u);
  EXPECT_NE(s.stats().notes[0].find("not writable"), std::string::npos) << s.stats().notes[0];
  expect_mlp_output(s.run({{"x", x_input()}}));
}

TEST_F(SessionCache, EmptyCacheDirIsAnErrorNamingTheOption) {
  opt.cache_dir = fs::path();
  try {
    Session s(model, opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("cache_dir"), std::string::npos) << e.what();
  }
}

TEST_F(SessionCache, ExplicitArtifactForAnotherTargetIsRefusedNamingTheField) {
  SessionOptions ref = opt;
  ref.target = Target::ref();
  compile(model, dir / "m.kiln", ref);
  expect_mlp_output(Session::load(dir / "m.kiln", ref).run({{"x", x_input()}}));
  try {
    Session::load(dir / "m.kiln", opt);  // cpu
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::incompatible_artifact);
    EXPECT_NE(std::string(e.what()).find("target"), std::string::npos) << e.what();
  }
}

TEST_F(SessionCache, RunRejectsBadInputsByName) {
  Session s(model, opt);
  auto expect_input_error = [&](std::map<std::string, Tensor> in, const char* needle) {
    try {
      s.run(in);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_input);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_input_error({}, "missing input 'x'");
  expect_input_error({{"x", x_input()}, {"z", x_input()}}, "unknown input 'z'");
  expect_input_error({{"x", Tensor(DType::i64, {2, 4})}}, "int64");
  expect_input_error({{"x", Tensor(DType::f32, {2, 5})}}, "dim 1 is 5 instead of 4");
  expect_input_error({{"x", Tensor(DType::f32, {8})}}, "rank 1 instead of 2");
}

TEST_F(SessionCache, ConcurrentRunsGiveTheSameResults) {
  opt.input_shapes["x"] = {2, 4};  // static shapes: intermediates live in the planned arena
  Session s(model, opt);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto out = s.run({{"x", x_input()}});
        const float* y = out.at("y").data<float>();
        bool ok = true;
        for (int k = 0; k < 6; ++k) ok &= std::abs(y[k] - kExpected[k]) < 1e-6f;
        good += ok;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), 400);
}

}  // namespace
}  // namespace kiln::testing

namespace kiln::testing {
namespace {

TEST(SessionRunDevice, HostTargetsRefuseDeviceTensorsNamingTheCall) {
  TempDir dir;
  mlp_model().save(dir / "m.onnx");
  SessionOptions opt;
  opt.use_cache = false;
  opt.input_shapes["x"] = {2, 4};
  Session s(dir / "m.onnx", opt);
  try {
    s.run_device({{"x", {0x1000, 32}}}, {{"y", {0x2000, 24}}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("run_device: target cpu runs on the host"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln::testing

// Session::run_into (outputs into caller-owned host memory) and
// Session::output_shapes on the ref and cpu targets: the values run()
// returns, written into the caller's buffer; wrong buffers are errors naming
// the output and leave the buffer alone.
#include <gtest/gtest.h>

#include <cstring>

#include "../onnx/model_builder.h"
#include "kiln/session.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

Tensor batch_input(int64_t rows) {
  Tensor x(DType::f32, {rows, 4});
  for (int64_t i = 0; i < rows * 4; ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  return x;
}

/// A tensor of `shape` filled with the sentinel -7 (no output of the MLP is negative).
Tensor sentinel(DType dt, std::vector<int64_t> shape) {
  Tensor t(dt, std::move(shape));
  if (dt == DType::f32)
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = -7.f;
  return t;
}

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << got.describe();
}

/// Runs `s` with run() and run_into() on `x`: the caller's buffers (filled
/// with a sentinel first) must hold exactly what run() returns.
void expect_run_into_matches(const Session& s, const Tensor& x) {
  auto want = s.run({{"x", x}});
  std::map<std::string, Tensor> bufs;
  for (auto& [name, t] : want) bufs.emplace(name, sentinel(t.dtype(), t.shape()));
  s.run_into({{"x", x}}, bufs);
  for (auto& [name, t] : want) expect_same(bufs.at(name), t);
}

struct RunInto : ::testing::TestWithParam<const char*> {
  TempDir dir;
  fs::path model = dir / "mlp.onnx";
  SessionOptions opt;
  void SetUp() override {
    mlp_model().save(model);
    opt.target = std::string(GetParam()) == "ref" ? Target::ref() : Target::cpu();
    opt.use_cache = false;
  }
};

TEST_P(RunInto, StaticProgramWritesTheCallersBuffer) {
  opt.input_shapes["x"] = {3, 4};
  Session s(model, opt);
  auto shapes = s.output_shapes({{"x", batch_input(3)}});
  ASSERT_EQ(shapes.count("y"), 1u);
  EXPECT_EQ(shapes.at("y"), (std::vector<int64_t>{3, 3}));
  expect_run_into_matches(s, batch_input(3));
  // A view of memory the caller allocated (as an ORT output is), written twice.
  std::vector<float> mem(9, -7.f);
  Tensor y = Tensor::view(DType::f32, {3, 3}, mem.data(), nullptr);
  for (int rep = 0; rep < 2; ++rep) {
    std::fill(mem.begin(), mem.end(), -7.f);
    s.run_into({{"x", batch_input(3)}}, {{"y", y}});
    expect_same(y, s.run({{"x", batch_input(3)}}).at("y"));
  }
  // Known values: x row 0 = [-0.5,-0.25,0,0.25] -> relu(x W + b).
  Tensor x0 = batch_input(3);
  const float* xv = x0.data<float>();
  for (int j = 0; j < 3; ++j) {
    float h = j == 0 ? 0.5f : j == 1 ? -0.25f : 0.f;
    for (int i = 0; i < 4; ++i) h += xv[i] * (0.1f * static_cast<float>(i + 1) - 0.2f * static_cast<float>(j));
    EXPECT_NEAR(mem[static_cast<size_t>(j)], std::max(h, 0.f), 1e-6) << j;
  }
}

TEST_P(RunInto, WrongBuffersNameTheOutputAndAreLeftAlone) {
  opt.input_shapes["x"] = {2, 4};
  Session s(model, opt);
  auto expect_error = [&](const std::map<std::string, Tensor>& bufs, const std::string& part) {
    try {
      s.run_into({{"x", batch_input(2)}}, bufs);
      FAIL() << "no error; expected one mentioning " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_input);
      EXPECT_NE(std::string(e.what()).find("'y'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  Tensor wrong_shape = sentinel(DType::f32, {3, 2});
  expect_error({{"y", wrong_shape}}, "shape [3,2]");
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(wrong_shape.data<float>()[i], -7.f);
  expect_error({{"y", Tensor(DType::f16, {2, 3})}}, "dtype float16");
  expect_error({}, "missing");
  try {
    s.run_into({{"x", batch_input(2)}}, {{"y", sentinel(DType::f32, {2, 3})}, {"z", Tensor(DType::f32, {1})}});
    FAIL() << "an unknown output name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown output 'z'"), std::string::npos) << e.what();
  }
  // A wrong input is still the input's error.
  try {
    s.run_into({{"x", batch_input(3)}}, {{"y", sentinel(DType::f32, {2, 3})}});
    FAIL() << "a wrong input shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 'x'"), std::string::npos) << e.what();
  }
}

TEST_P(RunInto, SymbolicBatchShapesComeFromTheInputs) {
  opt.specialize_shapes = false;  // one program with the batch symbolic
  Session s(model, opt);
  for (int64_t rows : {1, 5}) {
    auto shapes = s.output_shapes({{"x", batch_input(rows)}});
    ASSERT_EQ(shapes.count("y"), 1u) << "the output's batch is the input's symbol N";
    EXPECT_EQ(shapes.at("y"), (std::vector<int64_t>{rows, 3}));
    expect_run_into_matches(s, batch_input(rows));
  }
  // Checked before the run: a known shape that differs is an error naming it.
  try {
    s.run_into({{"x", batch_input(2)}}, {{"y", sentinel(DType::f32, {5, 3})}});
    FAIL() << "a batch-5 buffer was accepted for a batch-2 request";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 'y' has shape [5,3]"), std::string::npos) << e.what();
  }
}

TEST_P(RunInto, BucketedExactAndPaddedRequests) {
  opt.dims["N"] = DimSpec::parse("1,4");
  Session s(model, opt);
  // Batch 4 runs on its own bucket (written in place); batch 3 is padded into
  // it and sliced back (one copy into the caller's buffer).
  for (int64_t rows : {4, 3, 1}) {
    expect_run_into_matches(s, batch_input(rows));
    auto shapes = s.output_shapes({{"x", batch_input(rows)}});
    ASSERT_EQ(shapes.count("y"), 1u) << rows;
    EXPECT_EQ(shapes.at("y"), (std::vector<int64_t>{rows, 3}));
  }
  try {
    s.run_into({{"x", batch_input(3)}}, {{"y", sentinel(DType::f32, {4, 3})}});
    FAIL() << "the padded bucket's shape was accepted for a batch-3 request";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 'y'"), std::string::npos) << e.what();
  }
}

TEST_P(RunInto, SpecializedShapeUnknownUntilItsProgramIsHeld) {
  Session s(model, opt);  // specialization on (default): a program per batch seen
  EXPECT_TRUE(s.output_shapes({{"x", batch_input(2)}}).empty()) << "no program for batch 2 yet";
  expect_run_into_matches(s, batch_input(2));  // compiles batch 2, then writes in place
  auto shapes = s.output_shapes({{"x", batch_input(2)}});
  ASSERT_EQ(shapes.count("y"), 1u);
  EXPECT_EQ(shapes.at("y"), (std::vector<int64_t>{2, 3}));
  expect_run_into_matches(s, batch_input(2));
}

TEST_P(RunInto, OutputsThatArePassedThroughAreCopied) {
  // y = Relu(x); x itself is also a graph output (the program does not compute it).
  ModelBuilder b;
  b.input("x", 1, {2, 4}).output("y", 1, {2, 4}).output("x", 1, {2, 4});
  b.node("Relu", {"x"}, {"y"});
  b.save(dir / "pass.onnx");
  Session s(dir / "pass.onnx", opt);
  expect_run_into_matches(s, batch_input(2));
  auto shapes = s.output_shapes({{"x", batch_input(2)}});
  EXPECT_EQ(shapes.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Targets, RunInto, ::testing::Values("ref", "cpu"));

}  // namespace
}  // namespace kiln::testing

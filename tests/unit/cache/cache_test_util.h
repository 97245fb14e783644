// Shared helpers of the cache tests: the MLP model and its hand-computed
// output, a model with external data, file-time and byte helpers.
#pragma once
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../onnx/model_builder.h"
#include "kiln/session.h"

namespace kiln::testing {

/// x = [[1,2,3,4],[-1,0,0,0]] for mlp_model().
inline Tensor mlp_x() {
  Tensor x(DType::f32, {2, 4});
  float v[] = {1, 2, 3, 4, -1, 0, 0, 0};
  std::copy(v, v + 8, x.data<float>());
  return x;
}

/// y = relu(x @ W + b) for mlp_x(), by hand (tests/unit/runtime/test_session.cpp):
/// row 0: [3.0, 1.0, -1.0] + b = [3.5, 0.75, -1.0] -> [3.5, 0.75, 0];
/// row 1: [-0.1, 0.1, 0.3] + b = [0.4, -0.15, 0.3] -> [0.4, 0, 0.3].
inline void expect_mlp_y(const std::map<std::string, Tensor>& out) {
  const std::vector<float> want{3.5f, 0.75f, 0.f, 0.4f, 0.f, 0.3f};
  ASSERT_EQ(out.count("y"), 1u);
  const Tensor& y = out.at("y");
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.data<float>()[i], want[i], 1e-6) << i;
}

/// y = x * w with w = {1.5, -2, 3.25} stored in `dir`/weights.bin at offset 8
/// (external data); the model is `dir`/ext.onnx.
inline std::filesystem::path external_data_model(const std::filesystem::path& dir) {
  std::vector<float> w{1.5f, -2.f, 3.25f};
  {
    std::ofstream f(dir / "weights.bin", std::ios::binary);
    f.write("PADDING!", 8);
    f.write(reinterpret_cast<const char*>(w.data()), 12);
  }
  ModelBuilder b;
  b.input("x", 1, {3});
  auto* t = b.graph().add_initializer();
  t->set_name("w");
  t->set_data_type(1);
  t->add_dims(3);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair{"location", "weights.bin"}, {"offset", "8"}, {"length", "12"}}) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  b.node("Mul", {"x", "w"}, {"y"});
  b.output("y");
  b.save(dir / "ext.onnx");
  return dir / "ext.onnx";
}

/// Sets a file's atime and mtime to `seconds_ago` before now.
inline void set_mtime_ago(const std::filesystem::path& p, int seconds_ago) {
  struct timespec t[2];
  clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= seconds_ago;
  t[1] = t[0];
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), t, 0), 0) << p;
}

inline int64_t mtime_ns(const std::filesystem::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return -1;
  return int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
}

inline std::vector<char> file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

inline void write_bytes(const std::filesystem::path& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

/// Files in `dir` whose name contains `needle`.
inline int count_files(const std::filesystem::path& dir, const std::string& needle) {
  int n = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(dir, ec))
    n += e.path().filename().string().find(needle) != std::string::npos;
  return n;
}

}  // namespace kiln::testing

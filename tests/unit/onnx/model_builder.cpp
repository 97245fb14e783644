#include "model_builder.h"

#include <fstream>
#include <random>

namespace kiln::testing {

namespace fs = std::filesystem;

void ModelBuilder::save(const fs::path& p) const {
  std::ofstream f(p, std::ios::binary);
  f << bytes();
}

TempDir::TempDir() {
  std::random_device rd;
  p_ = fs::temp_directory_path() / ("kiln-test-" + std::to_string(rd()) + std::to_string(rd()));
  fs::create_directories(p_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::permissions(p_, fs::perms::owner_all, fs::perm_options::add, ec);
  fs::remove_all(p_, ec);
}

ModelBuilder mlp_model(float w_scale) {
  ModelBuilder b;
  std::vector<float> w;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) w.push_back(w_scale * (0.1f * (i + 1) - 0.2f * j));
  b.input("x", 1, {-1, 4});
  b.initializer("W", {4, 3}, w);
  b.initializer("b", {3}, {0.5f, -0.25f, 0.f});
  b.node("MatMul", {"x", "W"}, {"h"}, "matmul");
  b.node("Add", {"h", "b"}, {"h2"}, "add");
  b.node("Relu", {"h2"}, {"y"}, "relu");
  b.output("y", 1, {-1, 3});
  return b;
}

}  // namespace kiln::testing

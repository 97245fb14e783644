// Matmuls with n not 16-byte aligned and Slice chains (pad_models.h).
#include "pad_models.h"

#include <cmath>

#include "cuda_models.h"

namespace kiln::testing {

std::vector<float> pad_weights(int64_t n, float scale, float phase) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = scale * std::sin(0.37f * static_cast<float>(i) + phase) + 0.25f * scale * std::cos(0.011f * static_cast<float>(i));
  return v;
}

ModelBuilder pad_matmul_model(int64_t batch, int64_t rows, int64_t k, int64_t n, bool bias, const std::string& act) {
  ModelBuilder b(act == "Gelu" ? 20 : 17);  // Gelu is opset 20
  std::vector<int64_t> x = {rows, k}, y = {rows, n};
  if (batch > 0) x.insert(x.begin(), batch), y.insert(y.begin(), batch);
  b.input("x", 1, x);
  b.initializer("W", {k, n}, pad_weights(k * n, 1.f / std::sqrt(static_cast<float>(k)), 0.3f));
  // The last node writes "y".
  const std::string mm = bias || !act.empty() ? "mm" : "y", biased = act.empty() ? "y" : "biased";
  b.node("MatMul", {"x", "W"}, {mm});
  if (bias) {
    b.initializer("b", {n}, pad_weights(n, 0.5f, 1.1f));
    b.node("Add", {mm, "b"}, {biased});
  }
  if (!act.empty()) b.node(act, {bias ? biased : mm}, {"y"});
  b.output("y", 1, y);
  return b;
}

ModelBuilder pad_gemm_model(int64_t m, int64_t k, int64_t n, bool trans_b, const std::string& c) {
  ModelBuilder b(17);
  b.input("x", 1, {m, k});
  b.initializer("W", trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
                pad_weights(k * n, 1.f / std::sqrt(static_cast<float>(k)), 0.3f));
  std::vector<std::string> ins = {"x", "W"};
  if (c == "bias") b.initializer("C", {n}, pad_weights(n, 0.5f, 1.1f));
  if (c == "full") b.input("C", 1, {m, n});
  if (!c.empty()) ins.push_back("C");
  auto& g = b.node("Gemm", ins, {"y"});
  ModelBuilder::attr_int(g, "transB", trans_b ? 1 : 0);
  attr_float(g, "alpha", 0.5f);
  if (!c.empty()) attr_float(g, "beta", 2.f);
  b.output("y", 1, {m, n});
  return b;
}

ModelBuilder pad_residual_model(int64_t m, int64_t k, int64_t n) {
  ModelBuilder b(17);
  b.input("x", 1, {m, k});
  b.input("r", 1, {m, n});
  b.initializer("W", {k, n}, pad_weights(k * n, 1.f / std::sqrt(static_cast<float>(k)), 0.3f));
  b.node("MatMul", {"x", "W"}, {"mm"});
  b.node("Add", {"mm", "r"}, {"y"});
  b.output("y", 1, {m, n});
  return b;
}

ModelBuilder slice_chain_model() {
  ModelBuilder b(17);
  b.input("x", 1, {6, 5, 40});
  auto slice = [&](const std::string& name, int64_t start, int64_t end, int64_t axis) {
    b.initializer_i64(name + "_s", {1}, {start});
    b.initializer_i64(name + "_e", {1}, {end});
    b.initializer_i64(name + "_a", {1}, {axis});
    b.node("Slice", {"x", name + "_s", name + "_e", name + "_a"}, {name});
  };
  slice("sa", 8, 40, 2);
  b.node("Relu", {"sa"}, {"a"});
  slice("sb", 1, 4, 1);
  b.node("Neg", {"sb"}, {"b"});
  slice("sc", 3, 38, -1);
  b.initializer("half", {}, {0.5f});
  b.node("Mul", {"sc", "half"}, {"sch"});
  b.node("Exp", {"sch"}, {"c"});
  slice("d", 0, 2, 0);
  b.output("a", 1, {6, 5, 32}).output("b", 1, {6, 3, 40}).output("c", 1, {6, 5, 35}).output("d", 1, {2, 5, 40});
  return b;
}

}  // namespace kiln::testing

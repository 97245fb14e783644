// Normalization models of the cuda target's tests (norm_models.h).
#include "norm_models.h"

#include <cmath>

namespace kiln::testing {

ModelBuilder rms_norm_model(int form, int64_t d) {
  ModelBuilder b(17);
  b.input("x", 1, {2, 6, d});
  std::vector<float> w(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) w[i] = 0.5f + 0.75f * std::cos(0.7f * static_cast<float>(i));
  b.initializer("W", {d}, w);
  b.initializer("two", {}, {2.f});
  b.initializer("one", {}, {1.f});
  b.initializer("eps", {}, {form == 1 ? 1e-5f : 1e-6f});
  if (form == 1) {
    b.node("Mul", {"x", "x"}, {"sq"});
  } else {
    ModelBuilder::attr_int(b.node("Cast", {"x"}, {"a"}), "to", 1);
    b.node("Pow", {"a", "two"}, {"sq"});
  }
  auto& r = b.node("ReduceMean", {"sq"}, {"ms"});
  ModelBuilder::attr_ints(r, "axes", {-1});
  b.node("Add", {"ms", "eps"}, {"e"});
  b.node("Sqrt", {"e"}, {"s"});
  if (form == 1) {
    b.node("Div", {"x", "s"}, {"y"});
  } else {
    b.node("Div", {"one", "s"}, {"inv"});
    b.node("Mul", {"a", "inv"}, {"n"});
    ModelBuilder::attr_int(b.node("Cast", {"n"}, {"nc"}), "to", 1);
    b.node("Mul", {"W", "nc"}, {"y"});
  }
  b.output("y", 1, {2, 6, d});
  if (form == 2) b.output("sq", 1, {2, 6, d});
  return b;
}

}  // namespace kiln::testing

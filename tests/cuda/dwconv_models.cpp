// Depthwise convolution models for the cuda target's tests (dwconv_models.h).
#include "dwconv_models.h"

#include <fmt/format.h>

#include <cmath>

namespace kiln::testing {

namespace {
/// scale * sin(0.7 i + offset), i < n: seeded, distinct per element.
std::vector<float> sines(int n, float scale, float offset) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(scale * std::sin(0.7f * i + offset));
  return v;
}
}  // namespace

std::string DwConvConfig::label() const {
  return fmt::format("n{} c{} {}x{} k{} s{}{}{}{}", n, c, h, w, k, stride, bias ? " +bias" : "", act.empty() ? "" : " ",
                     act);
}

ModelBuilder dwconv_model(const DwConvConfig& c) {
  ModelBuilder b(17);
  b.input("x", 1, {c.n, c.c, c.h, c.w});
  const float scale = c.big_weights ? 1.5f : 0.4f;
  b.initializer("W", {c.c, 1, c.k, c.k}, sines(static_cast<int>(c.c * c.k * c.k), scale, 0.3f));
  std::vector<std::string> ins = {"x", "W"};
  if (c.bias) {
    b.initializer("B", {c.c}, sines(static_cast<int>(c.c), scale, 1.1f));
    ins.push_back("B");
  }
  auto& conv = b.node("Conv", ins, {c.act.empty() ? "y" : "conv"});
  ModelBuilder::attr_ints(conv, "kernel_shape", {c.k, c.k});
  ModelBuilder::attr_ints(conv, "strides", {c.stride, c.stride});
  ModelBuilder::attr_ints(conv, "pads", {c.k / 2, c.k / 2, c.k / 2, c.k / 2});
  ModelBuilder::attr_int(conv, "group", c.c);
  if (c.act == "Relu") b.node("Relu", {"conv"}, {"y"});
  if (c.act == "Clip") {
    b.initializer("lo", {}, {0.f});
    b.initializer("hi", {}, {6.f});
    b.node("Clip", {"conv", "lo", "hi"}, {"y"});
  }
  const int64_t o = (c.h + 2 * (c.k / 2) - c.k) / c.stride + 1, ow = (c.w + 2 * (c.k / 2) - c.k) / c.stride + 1;
  b.output("y", 1, {c.n, c.c, o, ow});
  return b;
}

ModelBuilder mixed_convs_model(int64_t n) {
  ModelBuilder b(17);
  b.input("x", 1, {n, 16, 12, 12});
  b.initializer("Wa", {16, 1, 3, 3}, sines(144, 0.4f, 0.1f));
  b.initializer("Ba", {16}, sines(16, 0.3f, 0.2f));
  b.initializer("We", {16, 1, 5, 5}, sines(400, 0.2f, 0.3f));
  b.initializer("Be", {16}, sines(16, 0.3f, 0.4f));
  b.initializer("Wb", {16, 16, 3, 3}, sines(2304, 0.1f, 0.5f));
  b.initializer("Wm", {32, 1, 3, 3}, sines(288, 0.4f, 0.6f));
  b.initializer("Wd", {16, 1, 3, 3}, sines(144, 0.4f, 0.7f));
  b.initializer("lo", {}, {0.f});
  b.initializer("hi", {}, {6.f});
  auto conv = [&](const std::vector<std::string>& ins, const std::string& y, int64_t k, int64_t stride, int64_t pad,
                  int64_t group, int64_t dil) -> onnx::NodeProto& {
    auto& c = b.node("Conv", ins, {y});
    ModelBuilder::attr_ints(c, "kernel_shape", {k, k});
    ModelBuilder::attr_ints(c, "strides", {stride, stride});
    ModelBuilder::attr_ints(c, "pads", {pad, pad, pad, pad});
    ModelBuilder::attr_ints(c, "dilations", {dil, dil});
    ModelBuilder::attr_int(c, "group", group);
    return c;
  };
  conv({"x", "Wa", "Ba"}, "ca", 3, 1, 1, 16, 1);
  b.node("Clip", {"ca", "lo", "hi"}, {"a"});
  conv({"x", "We", "Be"}, "ce", 5, 2, 2, 16, 1);
  b.node("Relu", {"ce"}, {"e"});
  conv({"x", "Wb"}, "b", 3, 1, 1, 1, 1);
  conv({"x", "Wm"}, "m", 3, 1, 1, 16, 1);
  conv({"x", "Wd"}, "d", 3, 1, 2, 16, 2);
  b.output("a", 1, {n, 16, 12, 12}).output("e", 1, {n, 16, 6, 6}).output("b", 1, {n, 16, 12, 12});
  b.output("m", 1, {n, 32, 12, 12}).output("d", 1, {n, 16, 12, 12});
  return b;
}

}  // namespace kiln::testing

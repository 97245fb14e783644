// kiln.cpu.GroupConv (compile/group_conv.cpp, run/group_conv.cpp): 2-D
// convolutions over groups of 2 or 4 channels on kiln's own kernel, in the
// blocked layout. Values against the ref target over strides, dilations,
// asymmetric pads, bias and a fused ReLU; what stays oneDNN's (a residual
// post-op, groups of 8, groups of different in / out width); the artifact
// round trip and a corrupt node refused.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_test_util.h"

namespace kiln::testing {
namespace {

struct Gc {
  int64_t N = 1, C = 16, H = 9, W = 11, width = 4, out_width = 4, k = 3;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1}, pads{1, 1, 1, 1};
  bool bias = true, relu = true, residual = false;
};

std::string describe(const Gc& g) {
  return "N " + std::to_string(g.N) + " C " + std::to_string(g.C) + " width " + std::to_string(g.width) + "/" +
         std::to_string(g.out_width) + " k " + std::to_string(g.k) + " stride " + std::to_string(g.strides[0]) +
         " dil " + std::to_string(g.dilations[0]) + " pads " + std::to_string(g.pads[0]) + std::to_string(g.pads[1]) +
         std::to_string(g.pads[2]) + std::to_string(g.pads[3]) + (g.bias ? " bias" : "") + (g.relu ? " relu" : "") +
         (g.residual ? " residual" : "");
}

/// x -> Conv (groups of g.width in, g.out_width out) [-> + x] [-> Relu].
ModelBuilder model(const Gc& g) {
  const int64_t groups = g.C / g.width, O = groups * g.out_width;
  ModelBuilder b;
  b.input("x", 1, {g.N, g.C, g.H, g.W});
  b.initializer("w", {O, g.width, g.k, g.k}, seeded_values({O * g.width * g.k * g.k}, 21));
  std::vector<std::string> ins{"x", "w"};
  if (g.bias) {
    b.initializer("b", {O}, seeded_values({O}, 22));
    ins.push_back("b");
  }
  auto& c = b.node("Conv", ins, {"c"});
  ModelBuilder::attr_int(c, "group", groups);
  ModelBuilder::attr_ints(c, "kernel_shape", {g.k, g.k});
  ModelBuilder::attr_ints(c, "strides", g.strides);
  ModelBuilder::attr_ints(c, "dilations", g.dilations);
  ModelBuilder::attr_ints(c, "pads", g.pads);
  std::string v = "c";
  if (g.residual) {
    b.node("Add", {v, "x"}, {"s"});
    v = "s";
  }
  if (g.relu) b.node("Relu", {v}, {"y"});
  else b.node("Identity", {v}, {"y"});
  b.output("y");
  return b;
}

void expect_close_to_ref(const ModelBuilder& b, const Tensor& x, const std::string& what) {
  auto ref = run_on(b, Target::ref(), {{"x", x}}).at("y");
  auto cpu = run_on(b, Target::cpu(), {{"x", x}}).at("y");
  ASSERT_EQ(cpu.shape(), ref.shape()) << what;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const float want = ref.data<float>()[i];
    ASSERT_NEAR(cpu.data<float>()[i], want, 1e-5 + 1e-5 * std::fabs(want)) << what << " [" << i << "]";
  }
}

TEST(CpuGroupConv, NarrowGroupsRunOnItAndMatchRef) {
  std::vector<Gc> cases;
  for (int64_t width : {2, 4})
    for (int variant = 0; variant < 5; ++variant) {
      Gc g;
      g.width = g.out_width = width;
      g.C = variant == 4 ? 32 : 16;
      g.N = variant == 3 ? 2 : 1;
      if (variant == 1) g.strides = {2, 2};
      if (variant == 2) g.dilations = {2, 2}, g.pads = {2, 0, 1, 2};
      if (variant == 3) g.pads = {0, 1, 0, 0}, g.bias = false;
      if (variant == 4) g.relu = false, g.k = 1, g.pads = {0, 0, 0, 0};
      cases.push_back(g);
    }
  for (const Gc& g : cases) {
    ModelBuilder b = model(g);
    EXPECT_EQ(cpu_nodes(b, "GroupConv"), 1) << describe(g);
    EXPECT_EQ(cpu_nodes(b, "Conv"), 0) << describe(g);
    expect_close_to_ref(b, seeded({g.N, g.C, g.H, g.W}, 30), describe(g));
  }
}

TEST(CpuGroupConv, OtherFormsStayOneDnnsAndMatchRef) {
  Gc residual;  // a binary post-op: not the kernel's
  residual.residual = true;
  Gc eight;  // groups of 8: oneDNN's jit kernel already takes them
  eight.width = eight.out_width = 8;
  Gc uneven;  // 4 in, 2 out per group
  uneven.out_width = 2;
  uneven.relu = false;
  for (const Gc& g : {residual, eight, uneven}) {
    ModelBuilder b = model(g);
    EXPECT_EQ(cpu_nodes(b, "GroupConv"), 0) << describe(g);
    expect_close_to_ref(b, seeded({g.N, g.C, g.H, g.W}, 31), describe(g));
  }
}

TEST(CpuGroupConv, ArtifactRoundTripAndCorruptNodeRefused) {
  Gc g;
  g.C = 32;
  ModelBuilder b = model(g);
  auto cp = compile_cpu(b);
  const std::map<std::string, Tensor> in{{"x", seeded({1, 32, 9, 11}, 32)}};
  expect_artifact_round_trip(cp, in, "y");
  std::string name;
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "GroupConv") n.attrs["width"] = int64_t{3}, name = n.name;
  ASSERT_FALSE(name.empty());
  expect_refused_as_corrupt(std::move(cp), in, name);
}

}  // namespace
}  // namespace kiln::testing

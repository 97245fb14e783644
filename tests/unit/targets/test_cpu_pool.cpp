// kiln.cpu.Pool's own max-pooling kernel (run/max_pool.cpp) on blocked
// activations: kernels, strides, pads and ceil mode (torchvision's
// SqueezeNet / GoogLeNet pools) bit for bit against the ref target; which
// nodes it takes (max over matching blocked layouts) and which stay oneDNN's.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "targets/cpu/run/cpu_kernels.h"

namespace kiln::testing {
namespace {

struct PoolCase {
  int64_t C = 16, H = 13, W = 15, k = 3, stride = 2, dilation = 1;
  std::vector<int64_t> pads{0, 0, 0, 0};
  int64_t ceil = 0;
  std::string op = "MaxPool";
};

/// x -> 1x1 Conv (so the pool's input is channel-blocked) -> pool -> y.
ModelBuilder model(const PoolCase& p) {
  ModelBuilder b;
  b.input("x", 1, {1, p.C, p.H, p.W});
  std::vector<float> w(static_cast<size_t>(p.C * p.C), 0.f);
  for (int64_t c = 0; c < p.C; ++c) w[static_cast<size_t>(c * p.C + c)] = 1.f;  // identity
  b.initializer("w", {p.C, p.C, 1, 1}, w);
  b.node("Conv", {"x", "w"}, {"c"});
  auto& n = b.node(p.op, {"c"}, {"y"});
  ModelBuilder::attr_ints(n, "kernel_shape", {p.k, p.k});
  ModelBuilder::attr_ints(n, "strides", {p.stride, p.stride});
  ModelBuilder::attr_ints(n, "pads", p.pads);
  ModelBuilder::attr_int(n, "ceil_mode", p.ceil);
  if (p.dilation != 1) ModelBuilder::attr_ints(n, "dilations", {p.dilation, p.dilation});
  b.output("y");
  return b;
}

/// Whether the pool node of b's cpu program runs on kiln's own kernel.
bool own_kernel(const ModelBuilder& b) {
  const auto cp = compile_cpu(b);
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Pool" && n.domain == "kiln.cpu") return targets::cpu::make_blocked_max_pool(n).has_value();
  ADD_FAILURE() << "no kiln.cpu.Pool";
  return false;
}

TEST(CpuMaxPool, BlockedMaxPoolsMatchRefBitForBit) {
  std::vector<PoolCase> cases(6);  // (a dilated pool is not lowered: oneDNN has only its reference kernel)
  cases[1].ceil = 1;                                   // SqueezeNet's 3x3 / 2, ceil mode
  cases[2].stride = 1, cases[2].pads = {1, 1, 1, 1};   // GoogLeNet's branch pool
  cases[3].k = 2, cases[3].H = 12, cases[3].W = 12;    // 2x2 / 2
  cases[4].pads = {1, 0, 0, 2}, cases[4].ceil = 1;     // asymmetric pads
  cases[5].C = 32, cases[5].k = 5, cases[5].stride = 3, cases[5].pads = {2, 2, 2, 2};
  for (const auto& p : cases) {
    ModelBuilder b = model(p);
    const std::string what = "k " + std::to_string(p.k) + " s " + std::to_string(p.stride) + " d " +
                             std::to_string(p.dilation) + " ceil " + std::to_string(p.ceil) + " C " + std::to_string(p.C);
    EXPECT_TRUE(own_kernel(b)) << what;
    const Tensor x = seeded({1, p.C, p.H, p.W}, 40);
    const Tensor want = run_on(b, Target::ref(), {{"x", x}}).at("y");
    const Tensor got = run_on(b, Target::cpu(), {{"x", x}}).at("y");
    ASSERT_EQ(got.shape(), want.shape()) << what;
    for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << what << " [" << i << "]";
  }
}

// A pool on the model's input is plain NCHW (nothing blocked before it):
// the same kernel, one channel plane at a time.
TEST(CpuMaxPool, PlainMaxPoolsMatchRefBitForBit) {
  for (int64_t ceil : {0, 1}) {
    ModelBuilder b;
    b.input("x", 1, {1, 5, 13, 15});
    auto& n = b.node("MaxPool", {"x"}, {"y"});
    ModelBuilder::attr_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::attr_ints(n, "strides", {2, 2});
    ModelBuilder::attr_ints(n, "pads", {1, 0, 0, 1});
    ModelBuilder::attr_int(n, "ceil_mode", ceil);
    b.output("y");
    EXPECT_TRUE(own_kernel(b)) << ceil;
    const Tensor x = seeded({1, 5, 13, 15}, 42);
    const Tensor want = run_on(b, Target::ref(), {{"x", x}}).at("y");
    const Tensor got = run_on(b, Target::cpu(), {{"x", x}}).at("y");
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << ceil << " [" << i << "]";
  }
}

TEST(CpuMaxPool, AveragePoolsStayOneDnns) {
  PoolCase p;
  p.op = "AveragePool";
  ModelBuilder b = model(p);
  EXPECT_FALSE(own_kernel(b));
  const Tensor x = seeded({1, p.C, p.H, p.W}, 41);
  const Tensor want = run_on(b, Target::ref(), {{"x", x}}).at("y");
  const Tensor got = run_on(b, Target::cpu(), {{"x", x}}).at("y");
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-6) << i;
}

}  // namespace
}  // namespace kiln::testing

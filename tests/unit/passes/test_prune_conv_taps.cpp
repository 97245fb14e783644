// prune_conv_taps: which Convs lose which taps (weights, kernel_shape, pads,
// dilations after the cut), which stay, and values on the cpu target (the
// pass runs) against the ref target (it does not). split_conv_taps: which
// Convs become per-tap 1x1 products, the nodes made, values against ref.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph_pass_util.h"
#include "kiln/session.h"
#include "passes/passes.h"

namespace kiln::testing {
namespace {

/// y = Conv(x [1, C, H, W], w [M, C, k, k]) with the given dilation, pads and
/// stride; w[m][c][i][j] = 100 m + 10 i + j + c / 10 so a slice is checkable.
ModelBuilder dilated_conv(int64_t C, int64_t H, int64_t W, int64_t M, int64_t k, int64_t dil, int64_t pad,
                          int64_t stride = 1, bool bias = false) {
  ModelBuilder b;
  b.input("x", 1, {1, C, H, W});
  std::vector<float> w;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < k; ++j) w.push_back(static_cast<float>(100 * m + 10 * i + j) + 0.1f * static_cast<float>(c));
  b.initializer("w", {M, C, k, k}, w);
  std::vector<float> bv;
  for (int64_t m = 0; m < M; ++m) bv.push_back(0.5f * static_cast<float>(m) - 1.f);
  if (bias) b.initializer("b", {M}, bv);
  auto& conv = b.node("Conv", bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"}, {"y"});
  ModelBuilder::attr_ints(conv, "dilations", {dil, dil});
  ModelBuilder::attr_ints(conv, "pads", {pad, pad, pad, pad});
  ModelBuilder::attr_ints(conv, "strides", {stride, stride});
  b.output("y");
  return b;
}

/// y on cpu against ref, element by element.
void expect_cpu_matches_ref(const ModelBuilder& b, const std::vector<int64_t>& x_shape) {
  TempDir dir;
  b.save(dir / "conv.onnx");
  Tensor x(DType::f32, x_shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + 0.3f);
  SessionOptions ref;
  ref.target = Target::ref();
  ref.use_cache = false;
  SessionOptions cpu = ref;
  cpu.target = Target::cpu();
  const Tensor want = Session(dir / "conv.onnx", ref).run({{"x", x}}).at("y");
  const Tensor got = Session(dir / "conv.onnx", cpu).run({{"x", x}}).at("y");
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_GT(want.numel(), 0);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4 + 1e-4 * std::fabs(want.data<float>()[i]))
        << "element " << i;
}

TEST(PruneConvTaps, AtrousThreeByThreePastTheMapIsOneByOne) {
  // Dilation 6 over a 5x5 map, pads 6: the outer taps read o - 6 or o + 6, never inside [0, 5).
  ir::Model m = import_inferred(dilated_conv(2, 5, 5, 3, 3, 6, 6));
  EXPECT_EQ(passes::prune_conv_taps(m), 1);
  ir::verify(m);
  const ir::Node& n = m.main.nodes[0];
  EXPECT_EQ(n.ints("kernel_shape"), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(n.ints("pads"), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(n.ints("dilations"), (std::vector<int64_t>{1, 1}));
  const ir::Value& w = m.value(n.inputs[1]);
  ASSERT_TRUE(w.constant.has_value());
  ASSERT_EQ(w.constant->shape(), (std::vector<int64_t>{3, 2, 1, 1}));
  // The centre tap (i = j = 1) of every (m, c): 100 m + 11 + c / 10.
  const std::vector<float> got = constant_floats(m, n.inputs[1]);
  for (int64_t mm = 0; mm < 3; ++mm)
    for (int64_t c = 0; c < 2; ++c)
      EXPECT_FLOAT_EQ(got[static_cast<size_t>(mm * 2 + c)], 100.f * mm + 11.f + 0.1f * c) << mm << " " << c;
}

TEST(PruneConvTaps, CutsOnlyTheTapsThatMissOnEachSide) {
  // Dilation 4, pads 5 over 6x6 with a 3x3: output positions 0..7; tap 0
  // reads o - 5 (inside for o >= 5), tap 2 reads o + 3 (inside for o <= 2):
  // every tap is used, nothing to cut.
  ir::Model keep = import_inferred(dilated_conv(1, 6, 6, 1, 3, 4, 5));
  EXPECT_EQ(passes::prune_conv_taps(keep), 0);
  // Pads 8, dilation 8 over 4x4: outputs 0..3, tap 0 reads o - 8 (never),
  // tap 1 reads o (always), tap 2 reads o + 8 (never): a 1x1.
  ir::Model cut = import_inferred(dilated_conv(1, 4, 4, 1, 3, 8, 8));
  EXPECT_EQ(passes::prune_conv_taps(cut), 1);
  // A 5x5 with dilation 3, pads 6 over 4x4: taps read o - 6, o - 3, o, o + 3,
  // o + 6 for o in 0..3: taps 1..3 are used, 0 and 4 not: a 3x3 with pads 3.
  ir::Model five = import_inferred(dilated_conv(1, 4, 4, 1, 5, 3, 6));
  EXPECT_EQ(passes::prune_conv_taps(five), 1);
  const ir::Node& n = five.main.nodes[0];
  EXPECT_EQ(n.ints("kernel_shape"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(n.ints("pads"), (std::vector<int64_t>{3, 3, 3, 3}));
  EXPECT_EQ(n.ints("dilations"), (std::vector<int64_t>{3, 3}));
  // Row 0 of the cut kernel is row 1 of the original: w[0][0][1][1..3] = 11, 12, 13.
  const std::vector<float> w = constant_floats(five, n.inputs[1]);
  EXPECT_EQ(std::vector<float>(w.begin(), w.begin() + 3), (std::vector<float>{11.f, 12.f, 13.f}));
}

TEST(PruneConvTaps, CpuMatchesRef) {
  expect_cpu_matches_ref(dilated_conv(2, 5, 5, 3, 3, 6, 6), {1, 2, 5, 5});
  expect_cpu_matches_ref(dilated_conv(1, 4, 4, 2, 5, 3, 6), {1, 1, 4, 4});
  expect_cpu_matches_ref(dilated_conv(2, 7, 7, 2, 3, 12, 12, 2), {1, 2, 7, 7});  // strided
}

int count(const std::vector<std::string>& ops, const std::string& op) {
  return static_cast<int>(std::count(ops.begin(), ops.end(), op));
}

TEST(SplitConvTaps, AtrousThreeByThreeOnAMapNearItsDilation) {
  // DeepLab's ASPP shape, small: dilation 12, pads 12 over 14x14. Every tap
  // reads the input somewhere (nothing to prune); the centre everywhere, the
  // edges for 2 of 14 rows or columns, the corners for 2x2: 324 of 1764.
  ir::Model m = import_inferred(dilated_conv(3, 14, 14, 4, 3, 12, 12, 1, true));
  EXPECT_EQ(passes::prune_conv_taps(m), 0);
  EXPECT_EQ(passes::split_conv_taps(m), 1);
  ir::verify(m);
  const auto ops = op_types(m);
  EXPECT_EQ(count(ops, "Conv"), 9);
  EXPECT_EQ(count(ops, "Slice"), 8);  // the centre reads the whole input
  EXPECT_EQ(count(ops, "Pad"), 8);    // and covers the whole output
  EXPECT_EQ(count(ops, "Add"), 8);    // the bias rides on the centre tap: no extra Add
  // The centre tap's weights: w[m][c][1][1] = 100 m + 11 + c / 10, as [4, 3, 1, 1].
  for (const ir::Node& n : m.main.nodes) {
    if (n.op_type != "Conv" || n.name.find("tap1_1") == std::string::npos) continue;
    EXPECT_EQ(n.inputs.size(), 3u);
    const std::vector<float> w = constant_floats(m, n.inputs[1]);
    ASSERT_EQ(w.size(), 12u);
    EXPECT_FLOAT_EQ(w[5], 100.f + 11.f + 0.2f);  // m 1, c 2
  }
  expect_cpu_matches_ref(dilated_conv(3, 14, 14, 4, 3, 12, 12, 1, true), {1, 3, 14, 14});
  expect_cpu_matches_ref(dilated_conv(3, 14, 14, 4, 3, 12, 12), {1, 3, 14, 14});
}

TEST(SplitConvTaps, NoTapCoversTheOutputAndTheBiasIsAddedLast) {
  // A 2x2 with dilation 12, pads 6 over 14x14 (output 14x14): tap 0 reads
  // o - 6 (for o >= 6), tap 1 reads o + 6 (for o <= 7): 8 of 14 each way.
  ir::Model m = import_inferred(dilated_conv(2, 14, 14, 3, 2, 12, 6, 1, true));
  EXPECT_EQ(passes::split_conv_taps(m), 1);
  ir::verify(m);
  const auto ops = op_types(m);
  EXPECT_EQ(count(ops, "Conv"), 4);
  EXPECT_EQ(count(ops, "Pad"), 4);
  EXPECT_EQ(count(ops, "Add"), 4);  // three sums and the bias
  expect_cpu_matches_ref(dilated_conv(2, 14, 14, 3, 2, 12, 6, 1, true), {1, 2, 14, 14});
}

TEST(SplitConvTaps, DenseStridedAndSmallDilationsStay) {
  ir::Model dense = import_inferred(dilated_conv(2, 14, 14, 3, 3, 1, 1));  // 169 / 196 per axis used
  EXPECT_EQ(passes::split_conv_taps(dense), 0);
  ir::Model two = import_inferred(dilated_conv(2, 14, 14, 3, 3, 2, 2));  // dilation 2: most products real
  EXPECT_EQ(passes::split_conv_taps(two), 0);
  ir::Model strided = import_inferred(dilated_conv(2, 14, 14, 3, 3, 12, 12, 2));
  EXPECT_EQ(passes::split_conv_taps(strided), 0);
}

}  // namespace
}  // namespace kiln::testing

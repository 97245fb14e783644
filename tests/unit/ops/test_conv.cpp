// Conv and ConvTranspose reference kernels. Literal expectations were produced
// offline with onnx.reference.ReferenceEvaluator (onnx 1.17) on one-node
// models and cross-checked with onnxruntime 1.20.1; where the two disagree the
// test says which one it follows and why. Inputs are arange()-style integers
// so every value is exact. The randomized tests compare against naive direct
// loops written in this file.
#include <climits>
#include <functional>
#include <random>

#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Attrs = std::map<std::string, ir::AttrValue>;
using Ints = std::vector<int64_t>;

/// numpy.arange(n) + start as float32, with the given shape.
Tensor ar(Ints shape, float start = 0.f) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

/// arange(n) % mod - shift (small signed weights).
Tensor ar_mod(Ints shape, int mod, float shift) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % mod) - shift;
  return t;
}

void expect_tensor(const Tensor& t, const Ints& shape, const std::vector<float>& want) {
  EXPECT_EQ(t.shape(), shape);
  EXPECT_EQ(values<float>(t), want);
}

TEST(Conv, PadsAndStrides) {
  // 4x4 arange, 3x3 ones, pads 1, stride 2: each output sums a clipped 3x3 window.
  auto y = run_op("Conv", {{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}},
                  {ar({1, 1, 4, 4}), make<float>({1, 1, 3, 3}, std::vector<float>(9, 1.f))});
  expect_tensor(y[0], {1, 1, 2, 2}, {10, 24, 51, 90});
}

TEST(Conv, Dilations) {
  auto y = run_op("Conv", {{"dilations", Ints{2, 2}}}, {ar({1, 1, 5, 5}), make<float>({1, 1, 2, 2}, {1, 2, 3, 4})});
  expect_tensor(y[0], {1, 1, 3, 3}, {82, 92, 102, 132, 142, 152, 182, 192, 202});
}

TEST(Conv, GroupsWithBias) {
  auto y = run_op("Conv", {{"group", int64_t{2}}},
                  {ar({1, 4, 3, 3}, -10), ar_mod({4, 2, 2, 2}, 5, 2), make<float>({4}, {1, -1, 0.5, 2})});
  expect_tensor(y[0], {1, 4, 2, 2}, {20, 17, 11, 8, -11, -10, -8, -7, -3.5, -3.5, -3.5, -3.5, -19, -20, -22, -23});
}

TEST(Conv, DepthwiseWithChannelMultiplier) {
  auto y = run_op("Conv", {{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}},
                  {ar({1, 2, 4, 4}), ar_mod({4, 1, 3, 3}, 3, 1), make<float>({4}, {0, 1, 2, 3})});
  expect_tensor(y[0], {1, 4, 2, 2}, {6, 4, 27, 6, 7, 5, 28, 7, 40, 6, 77, 8, 41, 7, 78, 9});
}

TEST(Conv, AutoPadSameUpperLowerValid) {
  const Tensor w = make<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  // Odd total padding: SAME_UPPER pads at the end, SAME_LOWER at the start.
  auto y = run_op("Conv", {{"auto_pad", std::string("SAME_UPPER")}}, {ar({1, 1, 3, 3}), w});
  expect_tensor(y[0], {1, 1, 3, 3}, {27, 37, 17, 57, 67, 29, 20, 23, 8});
  y = run_op("Conv", {{"auto_pad", std::string("SAME_LOWER")}}, {ar({1, 1, 3, 3}), w});
  expect_tensor(y[0], {1, 1, 3, 3}, {0, 4, 11, 12, 27, 37, 30, 57, 67});
  y = run_op("Conv", {{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 2}}}, {ar({1, 1, 5, 5}), w});
  expect_tensor(y[0], {1, 1, 3, 3}, {41, 61, 31, 141, 161, 71, 62, 68, 24});
  // VALID: onnxruntime and torch give 2x2 (floor((5-2)/2)+1); onnx's reference
  // evaluator ignores VALID here and is not followed.
  y = run_op("Conv", {{"auto_pad", std::string("VALID")}, {"strides", Ints{2, 2}}}, {ar({1, 1, 5, 5}), w});
  expect_tensor(y[0], {1, 1, 2, 2}, {41, 61, 141, 161});
}

TEST(Conv, OneAndThreeSpatialDims) {
  auto y = run_op("Conv", {{"pads", Ints{2, 1}}, {"strides", Ints{2}}, {"dilations", Ints{2}}},
                  {ar({1, 2, 7}), ar_mod({3, 2, 3}, 4, 1.5)});
  expect_tensor(y[0], {1, 3, 3}, {-14, -7.5, -11.5, 14, 14.5, 18.5, -14, -7.5, -11.5});
  std::vector<float> w(16, 1.f);
  std::fill(w.begin() + 8, w.end(), -1.f);
  y = run_op("Conv", {{"pads", Ints{0, 1, 0, 1, 0, 1}}, {"strides", Ints{1, 2, 2}}},
             {ar({1, 1, 3, 3, 3}), make<float>({2, 1, 2, 2, 2}, w)});
  expect_tensor(y[0], {1, 2, 3, 2, 2}, {20,  13,  76,  44,  56,  31,  148, 80,  37,  20,  92,  49,
                                        -20, -13, -76, -44, -56, -31, -148, -80, -37, -20, -92, -49});
}

TEST(Conv, ChannelMismatchAndBadDtype) {
  auto mismatch = [] { run_op("Conv", {}, {ar({1, 3, 4, 4}), ar({2, 2, 3, 3})}); };
  EXPECT_THROW(mismatch(), Error);
  Tensor x(DType::f64, {1, 1, 3, 3}), w(DType::f64, {1, 1, 1, 1});
  try {
    run_op("Conv", {}, {x, w});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Conv node 'test_Conv'"), std::string::npos) << e.what();
  }
}

/// Runs `f`, which must throw Error(invalid_model) whose message holds `part`.
void expect_invalid(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error naming " << part;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_model) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Found by adversarial testing: a bias of the wrong length compiled for cuda
// (reading past its end), huge pads overflowed the output size, and a kernel
// larger than the padded input gave an empty output.
TEST(Conv, BadBiasHugeAttributesAndEmptyOutputsAreInvalidModels) {
  expect_invalid([] { run_op("Conv", {}, {ar({1, 4, 5, 5}), ar({4, 4, 3, 3}), ar({3})}); }, "bias B has shape [3]");
  expect_invalid([] { run_op("Conv", {}, {ar({1, 4, 5, 5}), ar({4, 4, 3, 3}), ar({4, 1})}); }, "must be [4]");
  expect_invalid(
      [] {
        run_op("Conv", {{"pads", Ints{INT64_MAX, 0, INT64_MAX, 0}}}, {ar({1, 1, 8, 8}), ar({1, 1, 3, 3})});
      },
      "must be at most");
  expect_invalid([] { run_op("Conv", {{"dilations", Ints{int64_t{1} << 62, 1}}}, {ar({1, 1, 8, 8}), ar({1, 1, 3, 3})}); },
                 "must be at most");
  expect_invalid([] { run_op("Conv", {}, {ar({1, 1, 2, 8}), ar({1, 1, 3, 3})}); }, "the output would be empty");
}

TEST(Conv, SymbolicShapeInference) {
  ir::Node n;
  n.op_type = "Conv";
  n.name = "c";
  n.inputs = {0, 1};
  n.outputs = {2};
  n.attrs = {{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}};
  ops::InType x{DType::f32, ir::Shape{ir::Dim::sym("N"), ir::Dim::known(3), ir::Dim::known(224), ir::Dim::sym("W")}};
  ops::InType w{DType::f32, ir::static_shape({64, 3, 7, 7})};
  auto out = ops::infer(n, {x, w});
  ASSERT_TRUE(out[0].shape.has_value());
  const ir::Shape& s = *out[0].shape;
  EXPECT_EQ(s[0], ir::Dim::sym("N"));
  EXPECT_EQ(s[1], ir::Dim::known(64));
  EXPECT_EQ(s[2], ir::Dim::known(112));
  EXPECT_FALSE(s[3].is_static());
}

TEST(ConvTranspose, Basic) {
  std::vector<float> w(18, 1.f);
  std::fill(w.begin() + 9, w.end(), 2.f);
  const Tensor W = make<float>({1, 2, 3, 3}, w);
  auto y = run_op("ConvTranspose", {}, {ar({1, 1, 3, 3}), W});
  expect_tensor(y[0], {1, 2, 5, 5}, {0,  1,  3,  3,  2,  3,  8,  15, 12, 7,  9,  21, 36, 27, 15, 9,  20,
                                     33, 24, 13, 6,  13, 21, 15, 8,  0,  2,  6,  6,  4,  6,  16, 30, 24,
                                     14, 18, 42, 72, 54, 30, 18, 40, 66, 48, 26, 12, 26, 42, 30, 16});
  y = run_op("ConvTranspose", {{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}, {"output_padding", Ints{1, 0}}},
             {ar({1, 1, 3, 3}), W});
  expect_tensor(y[0], {1, 2, 7, 6},
                {0,  0,  1,  1,  3,  2,  3,  3,  8,  5,  12, 7,  3,  3,  7,  4,  9,  5,  9,  9,  20,
                 11, 24, 13, 6,  6,  13, 7,  15, 8,  6,  6,  13, 7,  15, 8,  0,  0,  0,  0,  0,  0,
                 0,  0,  2,  2,  6,  4,  6,  6,  16, 10, 24, 14, 6,  6,  14, 8,  18, 10, 18, 18, 40,
                 22, 48, 26, 12, 12, 26, 14, 30, 16, 12, 12, 26, 14, 30, 16, 0,  0,  0,  0,  0,  0});
}

TEST(ConvTranspose, OutputShapeAndAutoPad) {
  std::vector<float> w(18, 1.f);
  std::fill(w.begin() + 9, w.end(), 2.f);
  const Tensor W = make<float>({1, 2, 3, 3}, w);
  // output_shape larger than the natural 9x7 output: a negative end pad adds zero rows/cols.
  auto y = run_op("ConvTranspose", {{"strides", Ints{3, 2}}, {"output_shape", Ints{10, 8}}}, {ar({1, 1, 3, 3}), W});
  ASSERT_EQ(y[0].shape(), (Ints{1, 2, 10, 8}));
  const std::vector<float> ch0 = {0, 0, 1, 1, 3, 2, 2, 0, 0, 0, 1, 1, 3, 2, 2, 0, 0, 0, 1, 1, 3, 2, 2, 0, 3, 3, 7,
                                  4, 9, 5, 5, 0, 3, 3, 7, 4, 9, 5, 5, 0, 3, 3, 7, 4, 9, 5, 5, 0, 6, 6, 13, 7, 15, 8,
                                  8, 0, 6, 6, 13, 7, 15, 8, 8, 0, 6, 6, 13, 7, 15, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < ch0.size(); ++i) {
    EXPECT_EQ(y[0].data<float>()[i], ch0[i]) << i;
    EXPECT_EQ(y[0].data<float>()[i + 80], 2 * ch0[i]) << i;  // channel 1 has weights 2
  }
  // SAME_UPPER: output 6x6, the odd total padding (1) goes at the end.
  y = run_op("ConvTranspose", {{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}},
             {ar({1, 1, 3, 3}), W});
  ASSERT_EQ(y[0].shape(), (Ints{1, 2, 6, 6}));
  std::vector<float> want_upper = {0, 0, 1, 1, 3, 2, 0, 0, 1, 1, 3, 2, 3, 3, 8, 5, 12, 7,
                                   3, 3, 7, 4, 9, 5, 9, 9, 20, 11, 24, 13, 6, 6, 13, 7, 15, 8};
  std::vector<float> want_lower = {0, 1, 1, 3, 2, 2, 3, 8, 5, 12, 7, 7, 3, 7, 4, 9, 5, 5,
                                   9, 20, 11, 24, 13, 13, 6, 13, 7, 15, 8, 8, 6, 13, 7, 15, 8, 8};
  EXPECT_EQ(std::vector<float>(y[0].data<float>(), y[0].data<float>() + 36), want_upper);
  y = run_op("ConvTranspose", {{"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}},
             {ar({1, 1, 3, 3}), W});
  EXPECT_EQ(std::vector<float>(y[0].data<float>(), y[0].data<float>() + 36), want_lower);
}

TEST(ConvTranspose, GroupsDilationsBiasAnd1D) {
  // onnxruntime and torch.nn.functional.conv_transpose2d agree (onnx's
  // reference evaluator rejects group > 1 with this weight shape).
  auto y = run_op("ConvTranspose", {{"group", int64_t{2}}, {"dilations", Ints{2, 2}}, {"strides", Ints{1, 2}}},
                  {ar({1, 4, 2, 2}, -3), ar_mod({4, 1, 2, 2}, 3, 1), make<float>({2}, {0.5, -0.5})});
  expect_tensor(y[0], {1, 2, 4, 5}, {3.5,  0.5,  3.5,  0.5,  2.5,  1.5,  0.5,  3.5,  0.5,  4.5,
                                     -3.5, 0.5,  -0.5, 0.5,  2.5,  -3.5, 0.5,  -2.5, 0.5,  0.5,
                                     -4.5, -0.5, -9.5, -0.5, -6.5, -4.5, -0.5, -11.5, -0.5, -8.5,
                                     8.5,  -0.5, 5.5,  -0.5, -4.5, 10.5, -0.5, 7.5,  -0.5, -4.5});
  y = run_op("ConvTranspose", {{"strides", Ints{2}}, {"pads", Ints{1, 2}}},
             {ar({1, 1, 4}), make<float>({1, 1, 3}, {1, -1, 2})});
  expect_tensor(y[0], {1, 1, 6}, {0, 1, -1, 4, -2, 7});
}

// ---- randomized comparisons against naive loops

struct Conv2dCase {
  int64_t N, C, H, W, M, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, group;
};

std::vector<float> random_floats(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

/// Direct 2-D convolution, straight from the ONNX Conv definition.
std::vector<float> naive_conv2d(const Conv2dCase& c, const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& b, int64_t OH, int64_t OW) {
  const int64_t Cg = c.C / c.group, Mg = c.M / c.group;
  std::vector<float> y(static_cast<size_t>(c.N * c.M * OH * OW));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double s = b.empty() ? 0.0 : b[m];
          const int64_t g = m / Mg;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t ky = 0; ky < c.kh; ++ky)
              for (int64_t kx = 0; kx < c.kw; ++kx) {
                const int64_t iy = oy * c.sh - c.pt + ky * c.dh, ix = ox * c.sw - c.pl + kx * c.dw;
                if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
                s += static_cast<double>(x[((n * c.C + g * Cg + ci) * c.H + iy) * c.W + ix]) *
                     w[((m * Cg + ci) * c.kh + ky) * c.kw + kx];
              }
          y[((n * c.M + m) * OH + oy) * OW + ox] = static_cast<float>(s);
        }
  return y;
}

TEST(Conv, RandomizedMatchesNaive) {
  std::mt19937 rng(3);
  const Conv2dCase cases[] = {
      {2, 6, 11, 13, 8, 3, 3, 2, 1, 1, 2, 1, 0, 2, 1, 2},      // groups, asymmetric pads, stride, dilation
      {1, 16, 9, 10, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},     // pointwise (direct GEMM)
      {1, 8, 12, 12, 16, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},     // 1x1 stride 2 (im2col gather)
      {2, 6, 10, 9, 12, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 6},      // depthwise, multiplier 2
      {1, 5, 7, 8, 5, 5, 3, 1, 3, 2, 1, 2, 1, 0, 2, 5},        // depthwise, odd everything
      {1, 16, 130, 130, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   // large: im2col in bands
  };
  for (const auto& c : cases) {
    const int64_t OH = (c.H + c.pt + c.pb - ((c.kh - 1) * c.dh + 1)) / c.sh + 1;
    const int64_t OW = (c.W + c.pl + c.pr - ((c.kw - 1) * c.dw + 1)) / c.sw + 1;
    auto x = random_floats(rng, c.N * c.C * c.H * c.W);
    auto w = random_floats(rng, c.M * (c.C / c.group) * c.kh * c.kw);
    auto b = random_floats(rng, c.M);
    auto y = run_op("Conv",
                    {{"strides", Ints{c.sh, c.sw}},
                     {"dilations", Ints{c.dh, c.dw}},
                     {"pads", Ints{c.pt, c.pl, c.pb, c.pr}},
                     {"group", c.group}},
                    {make<float>({c.N, c.C, c.H, c.W}, x), make<float>({c.M, c.C / c.group, c.kh, c.kw}, w),
                     make<float>({c.M}, b)});
    ASSERT_EQ(y[0].shape(), (Ints{c.N, c.M, OH, OW}));
    auto want = naive_conv2d(c, x, w, b, OH, OW);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(y[0].data<float>()[i], want[i], 1e-4f) << "case C=" << c.C << " H=" << c.H << " at " << i;
  }
}

TEST(ConvTranspose, RandomizedMatchesNaiveScatter) {
  std::mt19937 rng(5);
  const int64_t N = 2, C = 4, H = 5, W = 6, Mg = 3, G = 2, kh = 3, kw = 2, sh = 2, sw = 3, dh = 1, dw = 2;
  const int64_t pt = 1, pl = 0, pb = 2, pr = 1, oph = 1, opw = 0;
  const int64_t OH = sh * (H - 1) + oph + (kh - 1) * dh + 1 - pt - pb;
  const int64_t OW = sw * (W - 1) + opw + (kw - 1) * dw + 1 - pl - pr;
  auto x = random_floats(rng, N * C * H * W);
  auto w = random_floats(rng, C * Mg * kh * kw);
  auto y = run_op("ConvTranspose",
                  {{"strides", Ints{sh, sw}},
                   {"dilations", Ints{dh, dw}},
                   {"pads", Ints{pt, pl, pb, pr}},
                   {"output_padding", Ints{oph, opw}},
                   {"group", G}},
                  {make<float>({N, C, H, W}, x), make<float>({C, Mg, kh, kw}, w)});
  ASSERT_EQ(y[0].shape(), (Ints{N, Mg * G, OH, OW}));
  // Scatter form of the definition: each input pixel adds w * x to the output.
  std::vector<double> want(static_cast<size_t>(N * Mg * G * OH * OW), 0.0);
  const int64_t Cg = C / G;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t iy = 0; iy < H; ++iy)
          for (int64_t ix = 0; ix < W; ++ix)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t oy = iy * sh - pt + ky * dh, ox = ix * sw - pl + kx * dw;
                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                const int64_t oc = (c / Cg) * Mg + m;
                want[((n * Mg * G + oc) * OH + oy) * OW + ox] +=
                    static_cast<double>(x[((n * C + c) * H + iy) * W + ix]) * w[((c * Mg + m) * kh + ky) * kw + kx];
              }
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[0].data<float>()[i], want[i], 1e-4) << i;
}

}  // namespace
}  // namespace kiln

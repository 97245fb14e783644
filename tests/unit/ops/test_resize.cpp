// Resize reference kernel. Expected values come from one-node models run
// offline through onnx.reference.ReferenceEvaluator (onnx 1.17) and
// onnxruntime 1.20.1, which agree on every case here (tf_half_pixel_for_nn:
// onnxruntime only, the reference lacks it); printed to 6 significant digits.
#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;
using Attrs = std::map<std::string, ir::AttrValue>;

Tensor ar(Ints shape) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

Tensor scales(std::vector<float> v) { return make<float>({static_cast<int64_t>(v.size())}, v); }
Tensor sizes(std::vector<int64_t> v) { return make<int64_t>({static_cast<int64_t>(v.size())}, v); }

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 2e-4f) {
  testing::expect_tensor_near(t, shape, want, tol);
}

/// Runs Resize with attrs on (X, roi?, scales?, sizes?), absent ones as undefined tensors.
Tensor resize(Attrs attrs, Tensor x, Tensor roi, Tensor sc, Tensor sz = Tensor(), int opset = 21) {
  return run_op("Resize", std::move(attrs), {x, roi, sc, sz}, 1, opset)[0];
}

TEST(Resize, NearestModesUpsampleHalfPixel) {
  // X = [0, 1.5, 3, 4.5, 0], scale 1.6 -> 8 outputs; x_orig = (x + 0.5) / 1.6 - 0.5.
  Tensor x = make<float>({1, 1, 1, 5}, {0, 1.5, 3, 4.5, 0});
  const std::pair<const char*, std::vector<float>> cases[] = {
      {"round_prefer_floor", {0, 0, 1.5, 3, 3, 4.5, 0, 0}},
      {"round_prefer_ceil", {0, 0, 1.5, 3, 3, 4.5, 0, 0}},
      {"floor", {0, 0, 1.5, 1.5, 3, 3, 4.5, 0}},
      {"ceil", {0, 1.5, 3, 3, 4.5, 4.5, 0, 0}},
  };
  for (auto& [mode, want] : cases) {
    SCOPED_TRACE(mode);
    expect_near(resize({{"mode", std::string("nearest")}, {"nearest_mode", std::string(mode)}}, x, Tensor(),
                       scales({1, 1, 1, 1.6f})),
                {1, 1, 1, 8}, want);
  }
}

TEST(Resize, NearestModesDownsampleAsymmetric) {
  const std::pair<const char*, std::vector<float>> cases[] = {
      {"round_prefer_floor", {0, 2, 8, 10}}, {"round_prefer_ceil", {0, 2, 8, 10}},
      {"floor", {0, 1, 4, 5}},               {"ceil", {0, 2, 8, 10}}};
  for (auto& [mode, want] : cases) {
    SCOPED_TRACE(mode);
    expect_near(resize({{"mode", std::string("nearest")},
                        {"nearest_mode", std::string(mode)},
                        {"coordinate_transformation_mode", std::string("asymmetric")}},
                       ar({1, 1, 4, 4}), Tensor(), scales({1, 1, 0.6f, 0.6f})),
                {1, 1, 2, 2}, want);
  }
}

TEST(Resize, RoundPreferFloorVersusCeilOnATie) {
  // Hand computed: asymmetric x2 upsampling maps output x to x / 2, an exact
  // .5 tie for odd x; the last index (3.5 -> 4) is clamped to 3.
  Tensor x = make<float>({1, 4}, {0, 10, 20, 30});
  Attrs a{{"mode", std::string("nearest")}, {"coordinate_transformation_mode", std::string("asymmetric")}};
  a["nearest_mode"] = std::string("round_prefer_floor");
  expect_near(resize(a, x, Tensor(), scales({1, 2})), {1, 8}, {0, 0, 10, 10, 20, 20, 30, 30});
  a["nearest_mode"] = std::string("round_prefer_ceil");
  expect_near(resize(a, x, Tensor(), scales({1, 2})), {1, 8}, {0, 10, 10, 20, 20, 30, 30, 30});
}

TEST(Resize, NearestWithSizesAndTwoX) {
  expect_near(resize({{"mode", std::string("nearest")}}, ar({1, 1, 2, 2}), Tensor(), scales({1, 1, 2, 2})),
              {1, 1, 4, 4}, {0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3});
  expect_near(resize({{"mode", std::string("nearest")}}, ar({1, 1, 4, 4}), Tensor(), Tensor(), sizes({1, 1, 3, 2})),
              {1, 1, 3, 2}, {0, 2, 4, 6, 12, 14});
}

TEST(Resize, LinearHalfPixelAndAlignCorners) {
  Attrs a{{"mode", std::string("linear")}};
  expect_near(resize(a, ar({1, 1, 2, 2}), Tensor(), scales({1, 1, 2, 2})), {1, 1, 4, 4},
              {0, 0.25, 0.75, 1, 0.5, 0.75, 1.25, 1.5, 1.5, 1.75, 2.25, 2.5, 2, 2.25, 2.75, 3});
  expect_near(resize(a, ar({1, 1, 4, 4}), Tensor(), scales({1, 1, 0.6f, 0.6f})), {1, 1, 2, 2},
              {1.66667f, 3.33333f, 8.33333f, 10});
  a["coordinate_transformation_mode"] = std::string("align_corners");
  expect_near(resize(a, ar({1, 1, 2, 2}), Tensor(), scales({1, 1, 2, 2})), {1, 1, 4, 4},
              {0, 0.333333f, 0.666667f, 1, 0.666667f, 1, 1.33333f, 1.66667f, 1.33333f, 1.66667f, 2, 2.33333f, 2,
               2.33333f, 2.66667f, 3});
}

TEST(Resize, AlignCornersUsesUnflooredLengthWithScales) {
  // 4 * 0.6 = 2.4: x_orig = 1 * (4 - 1) / (2.4 - 1) = 2.142857 (ONNX reference and
  // backend test data; onnxruntime divides by the floored length 2 - 1 and gives 4).
  Tensor x = make<float>({1, 4}, {1, 2, 3, 4});
  expect_near(resize({{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("align_corners")}},
                     x, Tensor(), scales({1, 0.6f})),
              {1, 2}, {1, 3.142857f});
}

TEST(Resize, LinearPytorchHalfPixelAsymmetricAndSymmetric) {
  expect_near(resize({{"mode", std::string("linear")},
                      {"coordinate_transformation_mode", std::string("pytorch_half_pixel")}},
                     ar({1, 1, 4, 4}), Tensor(), Tensor(), sizes({1, 1, 3, 1})),
              {1, 1, 3, 1}, {0.666667f, 6, 11.3333f});
  expect_near(resize({{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("asymmetric")}},
                     ar({1, 1, 2, 2}), Tensor(), scales({1, 1, 2, 1.5f})),
              {1, 1, 4, 3}, {0, 0.666667f, 1, 1, 1.66667f, 2, 2, 2.66667f, 3, 2, 2.66667f, 3});
  expect_near(resize({{"mode", std::string("linear")},
                      {"coordinate_transformation_mode", std::string("half_pixel_symmetric")}},
                     ar({1, 1, 1, 4}), Tensor(), scales({1, 1, 1, 0.6f})),
              {1, 1, 1, 2}, {0.666667f, 2.33333f});
}

TEST(Resize, Cubic) {
  Tensor y = resize({{"mode", std::string("cubic")}}, ar({1, 1, 4, 4}), Tensor(), scales({1, 1, 2, 2}));
  ASSERT_EQ(y.shape(), (Ints{1, 1, 8, 8}));
  // First row and last row of the 8x8 result.
  const std::vector<float> row0 = {-0.527344f, -0.230469f, 0.246094f, 0.875f, 1.28125f, 1.91016f, 2.38672f, 2.68359f};
  const std::vector<float> row7 = {12.3164f, 12.6133f, 13.0898f, 13.7188f, 14.125f, 14.7539f, 15.2305f, 15.5273f};
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(y.data<float>()[i], row0[i], 2e-4f) << i;
    EXPECT_NEAR(y.data<float>()[56 + i], row7[i], 2e-4f) << i;
  }
  // align_corners, exclude_outside=1, A=-0.5.
  expect_near(resize({{"mode", std::string("cubic")},
                      {"coordinate_transformation_mode", std::string("align_corners")},
                      {"exclude_outside", int64_t{1}},
                      {"cubic_coeff_a", -0.5f}},
                     ar({1, 1, 4, 4}), Tensor(), scales({1, 1, 1.5f, 1.5f})),
              {1, 1, 6, 6},
              {0,        0.526718f, 1.2f,     1.8f,     2.47328f, 3,        2.10687f, 2.63359f, 3.30687f,
               3.90687f, 4.58015f,  5.10687f, 4.8f,     5.32672f, 6,        6.6f,     7.27328f, 7.8f,
               7.2f,     7.72672f,  8.4f,     9,        9.67328f, 10.2f,    9.89313f, 10.4198f, 11.0931f,
               11.6931f, 12.3664f,  12.8931f, 12,       12.5267f, 13.2f,    13.8f,    14.4733f, 15});
  expect_near(resize({{"mode", std::string("cubic")}, {"coordinate_transformation_mode", std::string("asymmetric")}},
                     ar({1, 1, 4, 4}), Tensor(), scales({1, 1, 0.8f, 0.8f})),
              {1, 1, 3, 3}, {0, 1.29688f, 2.59375f, 5.1875f, 6.48438f, 7.78125f, 10.375f, 11.6719f, 12.9688f});
}

TEST(Resize, TfCropAndResizeExtrapolates) {
  expect_near(resize({{"mode", std::string("linear")},
                      {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                      {"extrapolation_value", 10.f}},
                     ar({1, 1, 4, 4}), make<float>({8}, {0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}), Tensor(),
                     sizes({1, 1, 3, 3})),
              {1, 1, 3, 3}, {6.6f, 10, 10, 11.4f, 10, 10, 10, 10, 10});
}

TEST(Resize, AxesAndKeepAspectRatio) {
  // sizes (7, 8) for axes (2, 3) of a 2x4 image: not_larger picks scale min(3.5, 2) = 2 -> 4x8.
  expect_near(resize({{"mode", std::string("nearest")}, {"axes", Ints{2, 3}},
                      {"keep_aspect_ratio_policy", std::string("not_larger")}},
                     ar({1, 1, 2, 4}), Tensor(), Tensor(), sizes({7, 8}), 19),
              {1, 1, 4, 8}, {0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3,
                             4, 4, 5, 5, 6, 6, 7, 7, 4, 4, 5, 5, 6, 6, 7, 7});
  // Axes in reverse order; not_smaller picks max(3/4, 3/2) = 1.5 -> 3x6.
  expect_near(resize({{"mode", std::string("linear")}, {"axes", Ints{3, 2}},
                      {"keep_aspect_ratio_policy", std::string("not_smaller")}},
                     ar({1, 1, 2, 4}), Tensor(), Tensor(), sizes({3, 3}), 19),
              {1, 1, 3, 6},
              {0, 0.5f, 1.16667f, 1.83333f, 2.5f, 3, 2, 2.5f, 3.16667f, 3.83333f, 4.5f, 5, 4, 4.5f, 5.16667f,
               5.83333f, 6.5f, 7});
}

TEST(Resize, Opset11EmptyInputsAndTfHalfPixelForNn) {
  // Opset 11 passes an empty roi (and an empty scales when sizes is used).
  Tensor empty(DType::f32, {0});
  expect_near(resize({{"mode", std::string("nearest")},
                      {"coordinate_transformation_mode", std::string("tf_half_pixel_for_nn")}},
                     ar({1, 1, 1, 4}), empty, scales({1, 1, 1, 1.5f}), Tensor(), 11),
              {1, 1, 1, 6}, {0, 1, 2, 2, 3, 3});
  expect_near(resize({{"mode", std::string("nearest")}}, ar({1, 1, 4, 4}), empty, empty, sizes({1, 1, 3, 2}), 11),
              {1, 1, 3, 2}, {0, 2, 4, 6, 12, 14});
}

TEST(Resize, IntegerNearestAndRejectedCases) {
  Tensor x = make<int64_t>({1, 2}, {7, -3});
  Tensor y = resize({{"mode", std::string("nearest")}}, x, Tensor(), scales({1, 2}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{7, 7, -3, -3}));
  auto linear_int = [&] { resize({{"mode", std::string("linear")}}, x, Tensor(), scales({1, 2})); };
  EXPECT_THROW(linear_int(), Error);
  auto antialias = [] {
    resize({{"mode", std::string("linear")}, {"antialias", int64_t{1}}}, ar({1, 4}), Tensor(), scales({1, 0.5f}));
  };
  try {
    antialias();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("Resize node 'test_Resize'"), std::string::npos) << e.what();
  }
  Tensor h(DType::f16, {1, 2});
  auto half = [&] { resize({}, h, Tensor(), scales({1, 2})); };
  EXPECT_THROW(half(), Error);
}

TEST(Resize, SymbolicShapeInference) {
  ir::Node n;
  n.op_type = "Resize";
  n.name = "r";
  n.inputs = {0, ir::kNoValue, 2};
  n.outputs = {3};
  Tensor sc = scales({1, 1, 2, 2});
  ops::InType x{DType::f32, ir::Shape{ir::Dim::sym("N"), ir::Dim::known(3), ir::Dim::sym("H"), ir::Dim::known(16)}};
  ops::InType s{DType::f32, ir::static_shape({4}), &sc};
  auto out = ops::infer(n, {x, ops::InType{}, s});
  ASSERT_TRUE(out[0].shape.has_value());
  const ir::Shape& y = *out[0].shape;
  EXPECT_EQ(y[0], ir::Dim::sym("N"));
  EXPECT_EQ(y[1], ir::Dim::known(3));
  EXPECT_FALSE(y[2].is_static());
  EXPECT_EQ(y[3], ir::Dim::known(32));
}

}  // namespace
}  // namespace kiln

// RoiAlign and NonMaxSuppression reference kernels. Expected values come from
// onnx 1.17's ReferenceEvaluator run offline on one-node models with the same
// inputs (rounded to 6 decimals); the NonMaxSuppression cases with absent
// optional inputs were run through onnxruntime 1.20.1 instead (the onnx
// reference requires every input). The suppression decisions are also
// worked out in the comments.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 2e-5f) {
  testing::expect_tensor_near(t, shape, want, tol);
}

/// X = arange(40) * 0.5 as [1, 2, 4, 5] and two ROIs on batch 0.
std::vector<Tensor> roi_inputs() {
  Tensor x(DType::f32, {1, 2, 4, 5});
  for (int i = 0; i < 40; ++i) x.data<float>()[i] = 0.5f * static_cast<float>(i);
  return {x, make<float>({2, 4}, {0.5f, 0.5f, 3.2f, 2.7f, 1, 0, 4, 4}), make<int64_t>({2}, {0, 0})};
}

std::map<std::string, ir::AttrValue> roi_attrs(const std::string& ctm, const std::string& mode) {
  return {{"coordinate_transformation_mode", ctm}, {"mode", mode}, {"output_height", int64_t{2}},
          {"output_width", int64_t{2}}, {"sampling_ratio", int64_t{0}}};
}

TEST(RoiAlign, HalfPixelAverage) {
  auto y = run_op("RoiAlign", roi_attrs("half_pixel", "avg"), roi_inputs());
  expect_near(y[0], {2, 2, 2, 2},
              {1.7125f, 2.3875f, 4.4625f, 5.1375f, 11.7125f, 12.3875f, 14.4625f, 15.1375f, 1.875f, 2.625f, 6.875f,
               7.625f, 11.875f, 12.625f, 16.875f, 17.625f});
}

TEST(RoiAlign, HalfPixelMax) {
  auto y = run_op("RoiAlign", roi_attrs("half_pixel", "max"), roi_inputs());
  expect_near(y[0], {2, 2, 2, 2},
              {2.444062f, 1.985156f, 5.023906f, 3.815625f, 10.590938f, 7.657032f, 14.158281f, 10.175001f, 2.625f,
               3.5f, 7.0f, 7.875f, 11.375f, 12.25f, 15.75f, 16.625f});
}

TEST(RoiAlign, OutputHalfPixelAverageAndMax) {
  auto avg = run_op("RoiAlign", roi_attrs("output_half_pixel", "avg"), roi_inputs());
  expect_near(avg[0], {2, 2, 2, 2},
              {3.2125f, 3.8875f, 5.9625f, 6.6375f, 13.2125f, 13.8875f, 15.9625f, 16.637501f, 3.375f, 4.125f, 7.75f,
               8.5f, 13.375f, 14.125f, 17.75f, 18.5f});
  auto mx = run_op("RoiAlign", roi_attrs("output_half_pixel", "max"), roi_inputs());
  expect_near(mx[0], {2, 2, 2, 2},
              {1.947188f, 2.67375f, 4.030469f, 4.905469f, 8.437813f, 9.358126f, 11.358594f, 12.452345f, 2.625f,
               2.84375f, 7.4375f, 7.875f, 7.0f, 7.21875f, 16.1875f, 16.625f});
}

TEST(RoiAlign, FixedSamplingAndScale) {
  auto y = run_op("RoiAlign",
                  {{"output_height", int64_t{1}}, {"output_width", int64_t{2}}, {"sampling_ratio", int64_t{2}},
                   {"spatial_scale", 0.5f}},
                  roi_inputs());
  expect_near(y[0], {2, 2, 1, 2}, {0.814063f, 1.13125f, 10.814062f, 11.13125f, 1.4375f, 1.8125f, 11.4375f, 11.8125f});
}

TEST(RoiAlign, BatchIndexOutOfRangeIsAnError) {
  auto in = roi_inputs();
  in[2] = make<int64_t>({2}, {0, 1});
  EXPECT_THROW(run_op("RoiAlign", {}, in), Error);
}

/// Five corner boxes (y1, x1, y2, x2): 0, 1 and 2 overlap pairwise with
/// IoU 0.9 / 1.1 = 0.818 (1 and 2 with 0.8 / 1.2), 3 is far away and 4 is
/// box 0 with its corners swapped.
Tensor corner_boxes() {
  return make<float>({1, 5, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, -0.1f, 1, 0.9f, 0, 10, 1, 11, 1, 1, 0, 0});
}
Tensor two_class_scores() {
  return make<float>({1, 2, 5}, {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f});
}

TEST(NonMaxSuppression, SuppressByIouAndScore) {
  // Class 0: 3 (0.95), 0 (0.9) kept; 1, 2, 4 overlap 0 by more than 0.5.
  // Class 1: only box 4 scores above 0.45.
  auto y = run_op("NonMaxSuppression", {},
                  {corner_boxes(), two_class_scores(), make<int64_t>({1}, {10}), make<float>({1}, {0.5f}),
                   make<float>({1}, {0.45f})});
  EXPECT_EQ(y[0].shape(), (Ints{3, 3}));
  EXPECT_EQ(values<int64_t>(y[0]), (Ints{0, 0, 3, 0, 0, 0, 0, 1, 4}));
}

TEST(NonMaxSuppression, HigherIouThresholdKeepsMore) {
  // At 0.85 only box 4 (IoU 1 with box 0) is suppressed in class 0.
  auto y = run_op("NonMaxSuppression", {},
                  {corner_boxes(), two_class_scores(), make<int64_t>({1}, {10}), make<float>({1}, {0.85f}),
                   make<float>({1}, {0.45f})});
  EXPECT_EQ(values<int64_t>(y[0]), (Ints{0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 1, 4}));
}

TEST(NonMaxSuppression, Int64MaxMeansNoLimit) {
  // torchvision's batched_nms exports max_output_boxes_per_class =
  // INT64_MAX; read through a double it became INT64_MIN and kept nothing.
  auto y = run_op("NonMaxSuppression", {},
                  {corner_boxes(), two_class_scores(), make<int64_t>({1}, {INT64_MAX}), make<float>({1}, {0.5f}),
                   make<float>({1}, {0.45f})});
  EXPECT_EQ(values<int64_t>(y[0]), (Ints{0, 0, 3, 0, 0, 0, 0, 1, 4}));
}

TEST(NonMaxSuppression, LimitPerClass) {
  auto y = run_op("NonMaxSuppression", {},
                  {corner_boxes(), two_class_scores(), make<int64_t>({1}, {1}), make<float>({1}, {0.5f})});
  EXPECT_EQ(values<int64_t>(y[0]), (Ints{0, 0, 3, 0, 1, 4}));
}

TEST(NonMaxSuppression, CenterPointBoxes) {
  // (xc, yc, w, h): boxes 0 and 1 overlap (IoU 0.818), box 2 is far away.
  Tensor boxes = make<float>({1, 3, 4}, {0.5f, 0.5f, 1, 1, 0.5f, 0.6f, 1, 1, 0.5f, 10.5f, 1, 1});
  Tensor scores = make<float>({1, 1, 3}, {0.9f, 0.95f, 0.3f});
  auto def = run_op("NonMaxSuppression", {{"center_point_box", int64_t{1}}}, {boxes, scores, make<int64_t>({1}, {5})});
  EXPECT_EQ(values<int64_t>(def[0]), (Ints{0, 0, 1, 0, 0, 2}));
  auto loose = run_op("NonMaxSuppression", {{"center_point_box", int64_t{1}}},
                      {boxes, scores, make<int64_t>({1}, {5}), make<float>({1}, {0.9f})});
  EXPECT_EQ(values<int64_t>(loose[0]), (Ints{0, 0, 1, 0, 0, 0, 0, 0, 2}));
}

TEST(NonMaxSuppression, NoMaxOutputSelectsNothing) {
  auto y = run_op("NonMaxSuppression", {}, {corner_boxes(), two_class_scores()});
  EXPECT_EQ(y[0].shape(), (Ints{0, 3}));
}

/// Greedy NMS as the spec words it, every candidate against every kept box
/// (corner boxes, one batch, one class, no score threshold, no limit): what
/// the kernel's grid must reproduce.
std::vector<int64_t> brute_force_nms(const std::vector<float>& b, const std::vector<float>& score, double iou) {
  const size_t n = score.size();
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return score[static_cast<size_t>(i)] > score[static_cast<size_t>(j)]; });
  auto box = [&](int64_t i) {
    const float* p = b.data() + i * 4;
    return std::array<double, 4>{std::min<double>(p[0], p[2]), std::min<double>(p[1], p[3]), std::max<double>(p[0], p[2]),
                                 std::max<double>(p[1], p[3])};
  };
  std::vector<int64_t> kept;
  for (int64_t c : order) {
    const auto a = box(c);
    bool keep = true;
    for (int64_t k : kept) {
      const auto o = box(k);
      const double iy = std::min(a[2], o[2]) - std::max(a[0], o[0]), ix = std::min(a[3], o[3]) - std::max(a[1], o[1]);
      if (ix <= 0 || iy <= 0) continue;
      const double aa = (a[2] - a[0]) * (a[3] - a[1]), ao = (o[2] - o[0]) * (o[3] - o[1]);
      const double u = aa + ao - ix * iy;
      if (aa <= 0 || ao <= 0 || u <= 0) continue;
      if (ix * iy / u > iou) {
        keep = false;
        break;
      }
    }
    if (keep) kept.push_back(c);
  }
  return kept;
}

TEST(NonMaxSuppression, BatchedClassesMatchBruteForce) {
  // torchvision's batched NMS: 40 classes of 100 boxes each, every class offset
  // by (class * 1000) on both axes so that classes never overlap; plus boxes
  // the grid must treat specially: a huge one covering every class, a
  // zero-area one, NaN corners, an infinite one, tiny ones, exact duplicates.
  uint32_t seed = 7;
  auto rnd = [&] { return static_cast<double>((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0; };
  std::vector<float> b, score;
  auto add = [&](double y0, double x0, double y1, double x1, double s) {
    b.insert(b.end(), {static_cast<float>(y0), static_cast<float>(x0), static_cast<float>(y1), static_cast<float>(x1)});
    score.push_back(static_cast<float>(s));
  };
  for (int c = 0; c < 40; ++c)
    for (int i = 0; i < 100; ++i) {
      const double y = rnd() * 300, x = rnd() * 300, h = 5 + rnd() * 120, w = 5 + rnd() * 120;
      if (i % 2) add(c * 1000 + y + h, c * 1000 + x + w, c * 1000 + y, c * 1000 + x, rnd());  // corners in either order
      else add(c * 1000 + y, c * 1000 + x, c * 1000 + y + h, c * 1000 + x + w, rnd());
    }
  add(0, 0, 40000, 40000, 0.5);  // covers every class: more cells than the grid takes
  add(0, 0, 39990, 39990, 0.4);  // suppressed by the one above (IoU 0.9995) alone
  // Away from the classes: a box too large for the grid (12 x 12 cells of
  // ~106) kept, then a box inside it small enough for the grid (IoU 0.34).
  add(50000, 50000, 51200, 51200, 0.45);
  add(50100, 50100, 50800, 50800, 0.44);
  add(10, 10, 10, 80, 0.99);     // zero area
  add(std::nan(""), 0, 50, 50, 0.98);
  add(0, 0, 50, std::numeric_limits<double>::infinity(), 0.97);
  add(1000, 1000, 1000.5, 1000.5, 0.96);
  add(1000, 1000, 1000.5, 1000.5, 0.95);  // a duplicate of the box above
  const int64_t n = static_cast<int64_t>(score.size());
  for (double iou : {0.0, 0.3, 0.7}) {
    auto y = run_op("NonMaxSuppression", {},
                    {make<float>({1, n, 4}, b), make<float>({1, 1, n}, score), make<int64_t>({1}, {INT64_MAX}),
                     make<float>({1}, {static_cast<float>(iou)})});
    std::vector<int64_t> got;
    for (size_t r = 0; r < values<int64_t>(y[0]).size(); r += 3) got.push_back(values<int64_t>(y[0])[r + 2]);
    const auto want = brute_force_nms(b, score, iou);
    EXPECT_GT(want.size(), 100u) << "iou " << iou;
    EXPECT_LT(want.size(), static_cast<size_t>(n)) << "iou " << iou;
    EXPECT_EQ(got, want) << "iou " << iou;
  }
}

}  // namespace
}  // namespace kiln

// Pooling reference kernels. Expected values come from one-node models run
// offline through onnx.reference.ReferenceEvaluator (onnx 1.17) and
// onnxruntime 1.20.1; where they disagree the test names the one followed.
#include <cmath>

#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

Tensor ar(Ints shape, float start = 0.f) {
  Tensor t(DType::f32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

/// 5x5 input whose value at flat index i is i, negated when i % 3 == 0, so a
/// MaxPool index can be read off the value.
Tensor signed_5x5() {
  Tensor t(DType::f32, {1, 1, 5, 5});
  for (int i = 0; i < 25; ++i) t.data<float>()[i] = (i % 3 == 0 ? -1.f : 1.f) * static_cast<float>(i);
  return t;
}

void expect_near(const Tensor& t, const Ints& shape, const std::vector<float>& want, float tol = 1e-4f) {
  ASSERT_EQ(t.shape(), shape);
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(t.data<float>()[i])) << i;
    } else {
      EXPECT_NEAR(t.data<float>()[i], want[i], tol) << i;
    }
  }
}

// Found by adversarial testing: a window larger than the input crashed the
// cpu target (an empty output), and pads >= kernel divided 0 by 0.
TEST(MaxPool, EmptyOutputsAndPadsAsLargeAsTheKernelAreInvalidModels) {
  auto expect_invalid = [](const std::string& op, std::map<std::string, ir::AttrValue> attrs, const std::string& part) {
    try {
      run_op(op, std::move(attrs), {signed_5x5()});
      ADD_FAILURE() << op << ": expected an error naming " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_model) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_invalid("MaxPool", {{"kernel_shape", Ints{20, 20}}}, "the output would be empty");
  expect_invalid("AveragePool", {{"kernel_shape", Ints{2, 2}}, {"pads", Ints{3, 3, 3, 3}}},
                 "must be smaller than the kernel");
  expect_invalid("MaxPool", {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{int64_t{1} << 40, 1}}}, "must be at most");
}

TEST(MaxPool, PadsStridesAndIndices) {
  auto y = run_op("MaxPool", {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}},
                  {signed_5x5()}, 2);
  expect_near(y[0], {1, 1, 3, 3}, {5, 8, 8, 16, 17, 19, 20, 23, 23});
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{5, 8, 8, 16, 17, 19, 20, 23, 23}));
}

TEST(MaxPool, CeilModeAndDilations) {
  auto y = run_op("MaxPool", {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}},
                  {signed_5x5()}, 2);
  expect_near(y[0], {1, 1, 3, 3}, {5, 8, 4, 16, 17, 19, 20, 23, -24});
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{5, 8, 4, 16, 17, 19, 20, 23, 24}));
  y = run_op("MaxPool", {{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}}, {signed_5x5()});
  expect_near(y[0], {1, 1, 3, 3}, {10, 13, 14, 17, 16, 19, 22, 23, 22});
}

TEST(MaxPool, CeilModeDropsWindowStartingInEndPadding) {
  // in 5, pads 1+1, k 2, s 2: ceil gives 4 windows but the 4th starts at
  // padded position 6 >= 5 + 1, so the spec (and the ONNX reference) drop it;
  // onnxruntime 1.20 keeps it and is not followed.
  auto y = run_op("MaxPool",
                  {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
                   {"ceil_mode", int64_t{1}}},
                  {signed_5x5()});
  expect_near(y[0], {1, 1, 3, 3}, {-0.f, 2, 4, 10, 11, 14, 20, 22, 23});
}

TEST(MaxPool, ColumnMajorIndices) {
  auto y = run_op("MaxPool", {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"storage_order", int64_t{1}}},
                  {signed_5x5()}, 2);
  expect_near(y[0], {1, 1, 2, 2}, {5, 8, 16, 17});
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{1, 16, 8, 13}));
}

TEST(MaxPool, AutoPadSame) {
  auto y = run_op("MaxPool",
                  {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}},
                  {signed_5x5()});
  expect_near(y[0], {1, 1, 3, 3}, {5, 8, 4, 16, 17, 19, 20, 23, -24});
  // SAME_LOWER: onnxruntime (3x3, padding first) follows the spec; the ONNX
  // reference evaluator returns 2x2 here and is not followed.
  y = run_op("MaxPool",
             {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}},
             {signed_5x5()});
  expect_near(y[0], {1, 1, 3, 3}, {-0.f, 2, 4, 10, 11, 14, 20, 22, 23});
}

TEST(MaxPool, Int8) {
  auto y = run_op("MaxPool", {{"kernel_shape", Ints{2}}}, {make<int8_t>({1, 1, 4}, {-5, 3, -128, 7})});
  EXPECT_EQ(values<int8_t>(y[0]), (std::vector<int8_t>{3, 3, 7}));
}

TEST(AveragePool, CountIncludePad) {
  auto y = run_op("AveragePool", {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}},
                  {ar({1, 2, 4, 4})});
  expect_near(y[0], {1, 2, 2, 2}, {2.5, 4, 8.5, 10, 18.5, 20, 24.5, 26});
  y = run_op("AveragePool",
             {{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}},
              {"count_include_pad", int64_t{1}}},
             {ar({1, 2, 4, 4})});
  expect_near(y[0], {1, 2, 2, 2}, {10.f / 9, 24.f / 9, 51.f / 9, 10, 74.f / 9, 120.f / 9, 147.f / 9, 26});
}

TEST(AveragePool, CeilMode) {
  auto y = run_op("AveragePool", {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}},
                  {ar({1, 2, 4, 4})});
  expect_near(y[0], {1, 2, 2, 2}, {5, 6.5, 11, 12.5, 21, 22.5, 27, 28.5});
  // With count_include_pad the divisor stays 9 even where the window hangs past the padding.
  y = run_op("AveragePool",
             {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
              {"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}},
             {ar({1, 2, 4, 4})});
  expect_near(y[0], {1, 2, 3, 3},
              {1.11111f, 2.66667f, 1.11111f, 5.66667f, 10, 3.66667f, 2.77778f, 4.66667f, 1.66667f, 8.22222f,
               13.3333f, 4.66667f, 16.3333f, 26, 9, 6.33333f, 10, 3.44444f});
}

TEST(AveragePool, DilationsOneAndThreeSpatialDims) {
  auto y = run_op("AveragePool",
                  {{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
                   {"count_include_pad", int64_t{1}}},
                  {ar({1, 1, 4, 4})});
  expect_near(y[0], {1, 1, 4, 4}, {1.25, 2.5, 3, 1.5, 2.5, 5, 6, 3, 4.5, 9, 10, 5, 2.25, 4.5, 5, 2.5});
  y = run_op("AveragePool", {{"kernel_shape", Ints{4}}, {"strides", Ints{3}}, {"pads", Ints{1, 1}}},
             {ar({1, 1, 6})});
  expect_near(y[0], {1, 1, 2}, {1, 3.5});
  y = run_op("AveragePool", {{"kernel_shape", Ints{2, 2, 2}}}, {ar({1, 1, 3, 3, 3})});
  expect_near(y[0], {1, 1, 2, 2, 2}, {6.5, 7.5, 9.5, 10.5, 15.5, 16.5, 18.5, 19.5});
}

TEST(LpPool, P2AndP1WithPads) {
  auto y = run_op("LpPool", {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"p", int64_t{2}}},
                  {ar({1, 2, 4, 4})});
  expect_near(y[0], {1, 2, 2, 2}, {6.48074f, 9.8995f, 21.4009f, 25.3377f, 37.229f, 41.2068f, 53.1601f, 57.1489f});
  y = run_op("LpPool", {{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1, 0, 0}}, {"p", int64_t{1}}},
             {ar({1, 1, 3, 3})});
  expect_near(y[0], {1, 1, 3, 3}, {0, 1, 3, 3, 8, 12, 9, 20, 24});
}

TEST(GlobalPool, AverageMaxLp) {
  auto y = run_op("GlobalAveragePool", {}, {signed_5x5()});
  expect_near(y[0], {1, 1, 1, 1}, {3.36f});
  y = run_op("GlobalMaxPool", {}, {ar({1, 3, 2, 2}, -5)});
  expect_near(y[0], {1, 3, 1, 1}, {-2, 2, 6});
  // Hand computed: sums of |x| over each 2x2 plane of arange(8).
  y = run_op("GlobalLpPool", {{"p", int64_t{1}}}, {ar({1, 2, 2, 2})});
  expect_near(y[0], {1, 2, 1, 1}, {6, 22});
  auto d = run_op("GlobalAveragePool", {}, {make<double>({1, 1, 3}, {1, 2, 4})});
  EXPECT_EQ(values<double>(d[0]), (std::vector<double>{7.0 / 3}));
}

TEST(Pool, ErrorsNameTheNode) {
  Tensor h(DType::f16, {1, 1, 2, 2});
  try {
    run_op("AveragePool", {{"kernel_shape", Ints{2, 2}}}, {h});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("AveragePool node 'test_AveragePool'"), std::string::npos) << e.what();
  }
  auto no_kernel = [] { run_op("MaxPool", {}, {ar({1, 1, 2, 2})}); };
  EXPECT_THROW(no_kernel(), Error);
}

}  // namespace
}  // namespace kiln

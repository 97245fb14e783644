// DFT, STFT, window and MelWeightMatrix reference kernels. Expected values:
// DFT from numpy 1.24's numpy.fft (fft / ifft) on the same signals; STFT,
// the windows and MelWeightMatrix from onnx 1.17's ReferenceEvaluator on
// one-node models; all run offline and rounded to 6 decimals.
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

Tensor scalar_i64(int64_t v) { return make<int64_t>({}, {v}); }

TEST(DFT, RealForward) {
  // fft([1, 2, 0, -1]) = [2, 1-3j, 0, 1+3j].
  auto y = run_op("DFT", {}, {make<float>({1, 4, 1}, {1, 2, 0, -1})});
  expect_near(y[0], {1, 4, 2}, {2, 0, 1, -3, 0, 0, 1, 3});
}

TEST(DFT, ZeroPaddedOnesided) {
  // fft([1, 2, 0, -1], n=6)[:4] = [2, 3-1.732051j, -1-1.732051j, 0].
  auto y = run_op("DFT", {{"onesided", int64_t{1}}}, {make<float>({1, 4, 1}, {1, 2, 0, -1}), scalar_i64(6)});
  expect_near(y[0], {1, 4, 2}, {2, 0, 3, -1.732051f, -1, -1.732051f, 0, 0});
}

TEST(DFT, ComplexInverse) {
  // ifft([1+0.5j, 1j, 2-1j]).
  auto y = run_op("DFT", {{"inverse", int64_t{1}}}, {make<float>({1, 3, 2}, {1, 0.5f, 0, 1, 2, -1})});
  expect_near(y[0], {1, 3, 2}, {1, 0.166667f, -0.57735f, -0.410684f, 0.57735f, 0.744017f});
}

TEST(DFT, AxisInput) {
  // fft of arange(6).reshape(2, 3) along axis 0: [[3, 5, 7], [-3, -3, -3]].
  Tensor empty;
  auto y = run_op("DFT", {}, {make<float>({2, 3, 1}, {0, 1, 2, 3, 4, 5}), empty, scalar_i64(0)});
  expect_near(y[0], {2, 3, 2}, {3, 0, 5, 0, 7, 0, -3, 0, -3, 0, -3, 0});
}

TEST(DFT, LastAxisIsAnError) {
  Tensor empty;
  EXPECT_THROW(run_op("DFT", {}, {make<float>({1, 2, 1}, {1, 2}), empty, scalar_i64(-1)}), Error);
}

Tensor ramp8() { return make<float>({1, 8, 1}, {0, 1, 2, 3, 4, 5, 6, 7}); }

TEST(STFT, FrameLengthOnesided) {
  Tensor no_window;
  auto y = run_op("STFT", {}, {ramp8(), scalar_i64(2), no_window, scalar_i64(4)});
  expect_near(y[0], {1, 3, 3, 2}, {6, 0, -2, 2, -2, 0, 14, 0, -2, 2, -2, 0, 22, 0, -2, 2, -2, 0});
}

TEST(STFT, WindowFullSpectrum) {
  auto y = run_op("STFT", {{"onesided", int64_t{0}}}, {ramp8(), scalar_i64(3), make<float>({4}, {0.5f, 1, 1, 0.5f})});
  expect_near(y[0], {1, 2, 4, 2}, {4.5f, 0, -2, 0.5f, -0.5f, 0, -2, -0.5f, 13.5f, 0, -3.5f, -1, -0.5f, 0, -3.5f, 1});
}

std::vector<float> window(const std::string& op, int64_t periodic) {
  auto y = run_op(op, {{"periodic", periodic}}, {scalar_i64(5)});
  EXPECT_EQ(y[0].dtype(), DType::f32);
  EXPECT_EQ(y[0].shape(), Ints{5});
  return values<float>(y[0]);
}

void expect_values(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6f) << i;
}

TEST(Windows, PeriodicAndSymmetric) {
  expect_values(window("HannWindow", 1), {0, 0.345491f, 0.904509f, 0.904508f, 0.345491f});
  expect_values(window("HannWindow", 0), {0, 0.5f, 1, 0.5f, 0});
  expect_values(window("HammingWindow", 1), {0.086957f, 0.402405f, 0.912812f, 0.912812f, 0.402405f});
  expect_values(window("HammingWindow", 0), {0.086957f, 0.543478f, 1, 0.543478f, 0.086957f});
  expect_values(window("BlackmanWindow", 1), {0, 0.20077f, 0.84923f, 0.84923f, 0.20077f});
  expect_values(window("BlackmanWindow", 0), {0, 0.34f, 1, 0.34f, 0});
}

TEST(Windows, OutputDatatype) {
  auto y = run_op("HannWindow", {{"output_datatype", int64_t{11}}}, {make<int32_t>({}, {4})});
  ASSERT_EQ(y[0].dtype(), DType::f64);
  const std::vector<double> want{0, 0.5, 1, 0.5};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[0].data<double>()[i], want[i], 1e-12) << i;
}

TEST(MelWeightMatrix, SmallBank) {
  auto y = run_op("MelWeightMatrix", {},
                  {scalar_i64(3), scalar_i64(16), scalar_i64(8000), make<float>({}, {100}), make<float>({}, {3000})});
  Tensor want(DType::f32, {9, 3});
  const float w[] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0.5f};
  for (int i = 0; i < 27; ++i) want.data<float>()[i] = i < 12 ? w[i] : 0.0f;
  expect_near(y[0], {9, 3}, values<float>(want));
}

}  // namespace
}  // namespace kiln

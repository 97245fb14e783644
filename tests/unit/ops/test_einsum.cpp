// Einsum reference kernel. Expected values come from numpy 1.24's
// numpy.einsum run offline on the same inputs with the same equations (and
// are small enough to check by hand).
#include <omp.h>

#include "kiln/errors.h"
#include "op_test_util.h"

namespace kiln {
namespace {

using testing::make;
using testing::run_op;
using testing::values;
using Ints = std::vector<int64_t>;

std::map<std::string, ir::AttrValue> eq(const std::string& e) { return {{"equation", e}}; }

Tensor arange_f64(Ints shape) {
  Tensor t(DType::f64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(i);
  return t;
}

TEST(Einsum, ImplicitMatMul) {
  Tensor b(DType::f32, {3, 4});
  for (int i = 0; i < 12; ++i) b.data<float>()[i] = (static_cast<float>(i) - 5) * 0.5f;
  auto y = run_op("Einsum", eq("ij,jk"), {make<float>({2, 3}, {0, 1, 2, 3, 4, 5}), b});
  EXPECT_EQ(y[0].shape(), (Ints{2, 4}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{2.5f, 4.0f, 5.5f, 7.0f, -2.0f, 4.0f, 10.0f, 16.0f}));
}

TEST(Einsum, BatchDiagonalWithEllipsis) {
  auto y = run_op("Einsum", eq("...ii ->...i"), {arange_f64({2, 3, 3})});
  EXPECT_EQ(y[0].shape(), (Ints{2, 3}));
  EXPECT_EQ(values<double>(y[0]), (std::vector<double>{0, 4, 8, 9, 13, 17}));
}

TEST(Einsum, ImplicitTraceKeepsSingleLabels) {
  // "bii": i occurs twice (summed diagonal), b once (kept).
  auto y = run_op("Einsum", eq("bii"), {arange_f64({2, 3, 3})});
  EXPECT_EQ(values<double>(y[0]), (std::vector<double>{12, 39}));
  auto tr = run_op("Einsum", eq("ii"), {arange_f64({3, 3})});
  EXPECT_EQ(tr[0].shape(), Ints{});
  EXPECT_EQ(values<double>(tr[0]), (std::vector<double>{12}));
}

TEST(Einsum, Int64EllipsisBroadcastAndReorder) {
  auto y = run_op("Einsum", eq("...jk,kl->...lj"),
                  {make<int64_t>({1, 2, 3}, {0, 1, 2, 3, 4, 5}), make<int64_t>({3, 1}, {1, 2, 3})});
  EXPECT_EQ(y[0].shape(), (Ints{1, 1, 2}));
  EXPECT_EQ(values<int64_t>(y[0]), (Ints{8, 26}));
}

TEST(Einsum, CaseSensitiveLabelsAndFullContraction) {
  Tensor x = make<double>({2, 2}, {1, 2, 3, 4});
  Tensor w = make<double>({2, 2}, {1, 0, 2, 5});
  EXPECT_EQ(values<double>(run_op("Einsum", eq("Ba,aB"), {x, w})[0]), (std::vector<double>{25}));
  EXPECT_EQ(values<double>(run_op("Einsum", eq("ab,ab->"), {x, w})[0]), (std::vector<double>{27}));
}

TEST(Einsum, OuterProductAndImplicitAsciiOrder) {
  auto outer = run_op("Einsum", eq("i,j->ij"), {make<double>({2}, {1, 2}), make<double>({3}, {3, 4, 5})});
  EXPECT_EQ(values<double>(outer[0]), (std::vector<double>{3, 4, 5, 6, 8, 10}));
  // Implicit output of "zA" is "Az" ('A' sorts before 'z'): a transpose.
  auto t = run_op("Einsum", eq("zA"), {arange_f64({2, 3})});
  EXPECT_EQ(t[0].shape(), (Ints{3, 2}));
  EXPECT_EQ(values<double>(t[0]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Einsum, LargeOutputsSplitAcrossThreadsMatchDirectLoops) {
  // Above the parallel threshold with 4 threads, each thread starting its
  // share of the output mid-row: every element against a direct loop.
  omp_set_num_threads(4);
  const int64_t B = 37, I = 2053, J = 3;
  Tensor x(DType::f32, {B, I}), s(DType::f32, {I}), w(DType::f64, {B, I, J}), v(DType::f64, {B, J});
  for (int64_t k = 0; k < x.numel(); ++k) x.data<float>()[k] = static_cast<float>((k * 7919) % 1013) * 0.01f - 5.f;
  for (int64_t k = 0; k < s.numel(); ++k) s.data<float>()[k] = 0.5f + static_cast<float>(k % 17) * 0.0625f;
  for (int64_t k = 0; k < w.numel(); ++k) w.data<double>()[k] = static_cast<double>((k * 31) % 101) - 50.0;
  for (int64_t k = 0; k < v.numel(); ++k) v.data<double>()[k] = static_cast<double>(k % 7) - 3.0;
  auto scaled = run_op("Einsum", eq("bi,i->bi"), {x, s})[0];
  ASSERT_EQ(scaled.shape(), (Ints{B, I}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < I; ++i)
      ASSERT_EQ(scaled.data<float>()[b * I + i], x.data<float>()[b * I + i] * s.data<float>()[i]) << b << "," << i;
  // Output labels in another order than the input's ("ib"), one summed label.
  auto moved = run_op("Einsum", eq("bij,bj->ib"), {w, v})[0];
  ASSERT_EQ(moved.shape(), (Ints{I, B}));
  for (int64_t i = 0; i < I; ++i)
    for (int64_t b = 0; b < B; ++b) {
      double want = 0;
      for (int64_t j = 0; j < J; ++j) want += w.data<double>()[(b * I + i) * J + j] * v.data<double>()[b * J + j];
      ASSERT_EQ(moved.data<double>()[i * B + b], want) << i << "," << b;
    }
}

TEST(Einsum, MalformedEquationsAreErrors) {
  EXPECT_THROW(run_op("Einsum", eq("ij,jk->ik"), {arange_f64({2, 3})}), Error);             // 2 terms, 1 input
  EXPECT_THROW(run_op("Einsum", eq("ijk->i"), {arange_f64({2, 3})}), Error);                // rank mismatch
  EXPECT_THROW(run_op("Einsum", eq("ij->q"), {arange_f64({2, 3})}), Error);                 // unknown output label
  EXPECT_THROW(run_op("Einsum", eq("ij,ij->i"), {arange_f64({2, 3}), arange_f64({3, 3})}), Error);  // size conflict
}

}  // namespace
}  // namespace kiln

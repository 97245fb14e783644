// Reference kernels on the cpu target (targets/run/kernels.cpp, bind_kernel):
// a product whose row count is only known at run time (rows picked by
// NonZero, as a detector's box head picks proposals) stays a reference node,
// and its GEMM runs on oneDNN's sgemm (targets::library_sgemm) there, while
// the ref target keeps its portable GEMM. Checked bit for bit against
// library_sgemm on the same rows, and within float tolerance of ref.
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_test_util.h"
#include "targets/kernels.h"

namespace kiln::testing {
namespace {

constexpr int64_t kRows = 40, kK = 512, kN = 96;

/// y = Gather(x, NonZero(mask), axis 0) x w: [picked, 512] x [512, 96].
ModelBuilder picked_rows_product() {
  ModelBuilder b;
  b.input("x", 1, {kRows, kK});
  b.input("mask", 9, {kRows});  // bool
  b.initializer("w", {kK, kN}, seeded_values({kK, kN}, 5));
  b.initializer_i64("flat", {1}, {-1});
  b.node("NonZero", {"mask"}, {"nz"});
  b.node("Reshape", {"nz", "flat"}, {"idx"});
  b.node("Gather", {"x", "idx"}, {"picked"});
  b.node("MatMul", {"picked", "w"}, {"y"}, "box_head_fc");
  b.output("y");
  return b;
}

TEST(CpuHostProducts, DataDependentRowsRunOnTheLibrarySgemm) {
  const ModelBuilder b = picked_rows_product();
  // The product stays a reference MatMul on the cpu target (its rows are data-dependent).
  const artifact::CompiledProgram cp = compile_cpu(b);
  int ref_matmuls = 0;
  for (auto& n : cp.model.main.nodes) ref_matmuls += n.op_type == "MatMul" && n.domain.empty();
  ASSERT_EQ(ref_matmuls, 1);

  const Tensor x = seeded({kRows, kK}, 9);
  Tensor mask(DType::boolean, {kRows});
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < kRows; ++i) {
    mask.data<bool>()[i] = i % 3 != 1;
    if (i % 3 != 1) rows.push_back(i);
  }
  const int64_t M = static_cast<int64_t>(rows.size());
  std::vector<float> a(static_cast<size_t>(M * kK));
  for (int64_t r = 0; r < M; ++r)
    std::copy_n(x.data<float>() + rows[static_cast<size_t>(r)] * kK, kK, a.begin() + r * kK);
  const std::vector<float> w = seeded_values({kK, kN}, 5);
  std::vector<float> lib(static_cast<size_t>(M * kN));
  targets::library_sgemm(false, false, M, kN, kK, 1.f, a.data(), kK, w.data(), kN, 0.f, lib.data(), kN);

  const std::map<std::string, Tensor> in{{"x", x}, {"mask", mask}};
  const Tensor cpu = run_on(b, Target::cpu(), in).at("y");
  const Tensor ref = run_on(b, Target::ref(), in).at("y");
  ASSERT_EQ(cpu.shape(), (std::vector<int64_t>{M, kN}));
  int64_t ref_differs = 0;
  for (int64_t i = 0; i < M * kN; ++i) {
    const float want = lib[static_cast<size_t>(i)];
    ASSERT_EQ(cpu.data<float>()[i], want) << "element " << i << ": not the library sgemm's result";
    ASSERT_NEAR(ref.data<float>()[i], want, 1e-4 + 1e-5 * std::fabs(want)) << i;
    ref_differs += ref.data<float>()[i] != want;
  }
  // The test means something only where the two GEMMs round differently:
  // the portable kernel's sums are ordered otherwise than oneDNN's.
  EXPECT_GT(ref_differs, 0) << "ref and the library agree bit for bit: the check above cannot tell them apart";
}

}  // namespace
}  // namespace kiln::testing

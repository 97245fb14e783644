// Patch convolutions (kernel = stride) as a transpose and a matmul
// (patch_conv.cpp), without a GPU: what the cuda lowering makes of
// patch_embed_model, and that the rewrite alone keeps the model's meaning
// on the ref target (the same outputs within float32 rounding). test_cuda_patch_conv_gpu.cpp runs it on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "nhwc_models.h"
#include "runtime/program.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/patch_conv.h"

namespace kiln::testing {
namespace {

ir::Model import(const ModelBuilder& b) { return imported_model(b); }

/// Counts of the lowered program's nodes: "Gemm", "Conv" and each Kernel's source_op.
std::map<std::string, int> lowered_counts(DType dt) {
  artifact::CompiledProgram cp;
  cp.model = import(patch_embed_model(2));
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = dt;
  targets::cuda::lower_for_cuda(cp, opt);
  std::map<std::string, int> c;
  for (auto& n : cp.model.main.nodes) ++c[n.op_type == "Kernel" ? n.s("source_op", "") : n.op_type];
  return c;
}

// Both patch convolutions become matmuls in float32 and float16; cuDNN is not called.
TEST(CudaPatchConv, PatchConvolutionsLowerToMatmuls) {
  for (DType dt : {DType::f32, DType::f16}) {
    auto c = lowered_counts(dt);
    EXPECT_EQ(c["Conv"], 0) << dtype_name(dt);
    EXPECT_EQ(c["Gemm"], 2) << dtype_name(dt);
  }
}

// KILN_CUDA_PATCH_GEMM=0 keeps cuDNN's convolutions.
TEST(CudaPatchConv, SwitchOffKeepsConvolutions) {
  setenv("KILN_CUDA_PATCH_GEMM", "0", 1);
  auto c = lowered_counts(DType::f16);
  unsetenv("KILN_CUDA_PATCH_GEMM");
  EXPECT_EQ(c["Conv"], 2);
  EXPECT_EQ(c["Gemm"], 0);
}

// The rewrite itself: ONNX nodes only, so the ref target runs the result;
// the bias moves into a [16] row added after the matmul.
TEST(CudaPatchConv, RewriteKeepsTheModelsMeaningOnRef) {
  ir::Model m = import(patch_embed_model(2));
  Tensor x(DType::f32, {2, 3, 16, 16});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + 0.4f);
  const auto want = run_ref(m, {{"x", x}});
  targets::cuda::split_conv_bias(m);
  EXPECT_EQ(targets::cuda::patch_convs_to_gemm(m), 2);
  int convs = 0, matmuls = 0, adds = 0;
  for (auto& n : m.main.nodes) {
    convs += n.op_type == "Conv";
    matmuls += n.op_type == "MatMul";
    if (n.op_type == "Add") {
      ++adds;
      EXPECT_EQ(ir::to_sizes(*m.value(n.inputs[1]).shape), (std::vector<int64_t>{16}));
    }
  }
  EXPECT_EQ(convs, 0);
  EXPECT_EQ(matmuls, 2);
  EXPECT_EQ(adds, 1);
  expect_all_near(run_ref(m, {{"x", x}}), want, 1e-4);
  // A Conv that is not a patch convolution (padding, overlap) is left alone.
  ModelBuilder b(17);
  b.input("x", 1, {1, 3, 16, 16});
  std::vector<float> w(16 * 48, 0.1f);
  b.initializer("W", {16, 3, 4, 4}, w);
  auto& c = b.node("Conv", {"x", "W"}, {"y"});
  ModelBuilder::attr_ints(c, "strides", {2, 2});
  b.output("y", 1, {1, 16, 7, 7});
  ir::Model overlap = import(b);
  EXPECT_EQ(targets::cuda::patch_convs_to_gemm(overlap), 0);
}

}  // namespace
}  // namespace kiln::testing

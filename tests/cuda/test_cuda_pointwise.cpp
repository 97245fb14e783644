// KILN_CUDA_POINTWISE=cudnn (pointwise_cudnn.cpp) without a GPU: a
// ResNet-style tail lowers with no kiln.cuda.Gemm node (so a load never
// starts cuBLASLt), the default keeps its matmuls on cuBLASLt, and the
// rewrite of matmuls by constants into 1x1 convolutions keeps the model's
// meaning on the ref target. test_cuda_pointwise_gpu.cpp runs it on a GPU.
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
#include "targets/cuda/compile/pointwise_cudnn.h"

namespace kiln::testing {
namespace {

/// Counts of the lowered (cross-compiled) program's nodes: "Gemm", "Conv",
/// and "Kernel" for generated kernels.
std::map<std::string, int> lowered_counts(DType dt, std::optional<bool> on_cudnn) {
  artifact::CompiledProgram cp;
  cp.model = imported_model(resnet_tail_model(2));
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = dt;
  opt.pointwise_cudnn = on_cudnn;
  targets::cuda::lower_for_cuda(cp, opt);
  std::map<std::string, int> c;
  for (auto& n : cp.model.main.nodes) ++c[n.op_type];
  return c;
}

// cudnn: the two 1x1 convolutions, the two Gemms and the MatMul are cuDNN
// convolutions (with the 3x3 one: 6), in float16 (channels-last) and strict
// float32 (NCHW); by default the 1x1 convolutions and matmuls are cuBLASLt's.
TEST(CudaPointwiseCudnn, ResNetTailLowersWithoutMatmuls) {
  for (DType dt : {DType::f16, DType::f32}) {
    auto c = lowered_counts(dt, true);
    EXPECT_EQ(c["Gemm"], 0) << dtype_name(dt);
    EXPECT_EQ(c["Conv"], 6) << dtype_name(dt);
    auto d = lowered_counts(dt, std::nullopt);  // KILN_CUDA_POINTWISE unset: the default
    EXPECT_EQ(d["Gemm"], 5) << dtype_name(dt);
    EXPECT_EQ(d["Conv"], 1) << dtype_name(dt);
  }
}

// The environment switch, and an unknown value meaning the default.
TEST(CudaPointwiseCudnn, EnvironmentSwitch) {
  targets::cuda::LowerOptions opt;
  setenv("KILN_CUDA_POINTWISE", "cudnn", 1);
  EXPECT_TRUE(targets::cuda::pointwise_on_cudnn(opt));
  EXPECT_EQ(lowered_counts(DType::f16, std::nullopt)["Gemm"], 0);
  setenv("KILN_CUDA_POINTWISE", "gemm", 1);
  EXPECT_FALSE(targets::cuda::pointwise_on_cudnn(opt));
  setenv("KILN_CUDA_POINTWISE", "bogus", 1);
  EXPECT_FALSE(targets::cuda::pointwise_on_cudnn(opt));
  opt.pointwise_cudnn = true;  // the option wins over the environment
  EXPECT_TRUE(targets::cuda::pointwise_on_cudnn(opt));
  unsetenv("KILN_CUDA_POINTWISE");
}

// gemms_to_convs alone (NCHW form: plain ONNX Convs, so the ref target runs
// it): the three matmuls become Reshape -> Conv 1x1 -> Add -> Reshape, the
// MatMul's bias Add taken along, and the outputs are the model's.
TEST(CudaPointwiseCudnn, RewriteKeepsTheModelsMeaningOnRef) {
  ir::Model m = imported_model(resnet_tail_model(3));
  Tensor x(DType::f32, {3, 8, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + 0.4f);
  const auto want = run_ref(m, {{"x", x}});
  EXPECT_EQ(targets::cuda::gemms_to_convs(m, /*nhwc=*/false), 3);
  int convs = 0, adds = 0;
  for (auto& n : m.main.nodes) {
    EXPECT_NE(n.op_type, "Gemm");
    EXPECT_NE(n.op_type, "MatMul");
    convs += n.op_type == "Conv";
    if (n.op_type == "Add" && n.name.find("_bias") != std::string::npos) {
      ++adds;
      auto b = ir::to_sizes(*m.value(n.inputs[1]).shape);
      EXPECT_EQ(b.size(), 4u);
      EXPECT_EQ(b[0] * b[2] * b[3], 1) << n.name << ": a bias over the channel axis";
    }
  }
  EXPECT_EQ(convs, 6);
  EXPECT_EQ(adds, 3);
  expect_all_near(run_ref(m, {{"x", x}}), want, 1e-5);
  // The channels-last form: x [M,1,1,K], filter [N,1,1,K], bias [1,1,1,N].
  ir::Model h = imported_model(resnet_tail_model(3));
  EXPECT_EQ(targets::cuda::gemms_to_convs(h, /*nhwc=*/true), 3);
  for (auto& n : h.main.nodes)
    if (n.op_type == "Conv" && n.i("kiln_nhwc", 0) == 1) {
      EXPECT_EQ(ir::to_sizes(*h.value(n.inputs[0]).shape), (std::vector<int64_t>{3, 1, 1, 16})) << n.name;
      auto w = ir::to_sizes(*h.value(n.inputs[1]).shape);
      EXPECT_EQ(w[1] * w[2], 1) << n.name;
      EXPECT_EQ(w[3], 16) << n.name;
    }
}

// What it leaves alone: a matmul of two computed values, a Gemm with alpha.
TEST(CudaPointwiseCudnn, LeavesOtherMatmuls) {
  ModelBuilder b(17);
  b.input("a", 1, {4, 8});
  b.input("bm", 1, {8, 5});
  b.initializer("W", {8, 5}, std::vector<float>(40, 0.25f));
  b.node("MatMul", {"a", "bm"}, {"y"});
  auto& g = b.node("Gemm", {"a", "W"}, {"z"});
  auto* al = g.add_attribute();
  al->set_name("alpha");
  al->set_type(onnx::AttributeProto::FLOAT);
  al->set_f(2.f);
  b.output("y", 1, {4, 5}).output("z", 1, {4, 5});
  ir::Model m = imported_model(b);
  EXPECT_EQ(targets::cuda::gemms_to_convs(m, true), 0);
}

}  // namespace
}  // namespace kiln::testing

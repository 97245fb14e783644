// RMS normalization chains as one row kernel (rms_norm.cpp), without a GPU:
// which forms the cuda lowering fuses. test_cuda_rms_norm_gpu.cpp runs them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "artifact/artifact.h"
#include "norm_models.h"
#include "targets/cuda/compile/lowering.h"

namespace kiln::testing {
namespace {

/// Kernel nodes of the lowered program, by source_op.
std::map<std::string, int> kernels(int form, DType dt) {
  artifact::CompiledProgram cp;
  cp.model = imported_model(rms_norm_model(form, 64));
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = dt;
  targets::cuda::lower_for_cuda(cp, opt);
  std::map<std::string, int> c;
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Kernel") ++c[n.s("source_op", "")];
  return c;
}

// The Llama form and the plain a / Sqrt form are one kernel each, in
// float32 and float16 (the Casts and the weight included).
TEST(CudaRmsNorm, ChainsBecomeOneRowKernel) {
  for (DType dt : {DType::f32, DType::f16})
    for (int form : {0, 1}) {
      auto c = kernels(form, dt);
      int total = 0;
      for (auto& [op, k] : c) total += k;
      EXPECT_EQ(c["RMSNormalization"], 1) << "form " << form << " " << dtype_name(dt);
      EXPECT_EQ(total, 1) << "form " << form << " " << dtype_name(dt);
    }
}

// Squares that are also an output are not fused (the chain's values must
// have no other reader); KILN_CUDA_RMS_NORM=0 keeps the chain as it is.
TEST(CudaRmsNorm, SharedValuesAndTheSwitchKeepTheChain) {
  EXPECT_EQ(kernels(2, DType::f32)["RMSNormalization"], 0);
  setenv("KILN_CUDA_RMS_NORM", "0", 1);
  auto c = kernels(0, DType::f16);
  unsetenv("KILN_CUDA_RMS_NORM");
  EXPECT_EQ(c["RMSNormalization"], 0);
  EXPECT_GE(c["ReduceMean"], 1);
}

}  // namespace
}  // namespace kiln::testing

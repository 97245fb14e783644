// kiln's depthwise convolution kernel (compile/gen_dwconv.cpp,
// lower_dwconv.cpp) without a GPU: which convolutions lower to it when
// cross-compiling (16-bit at batch >= 8; KILN_CUDA_DWCONV=0 / 1), which stay
// on cuDNN (group 1, a channel multiplier of 2, dilation, batch 1, float32),
// what the kernel node reads (the filter rearranged to [R, S, C], the bias,
// the Clip / Relu absorbed), `kiln inspect`'s count, and that every variant
// of the kernel's source compiles with NVRTC. The numbers are checked on a
// GPU (test_cuda_dwconv_gpu.cpp).
#include <gtest/gtest.h>

#include <cstdlib>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "dwconv_models.h"
#include "kiln/compile.h"
#include "runtime/inspect.h"
#include "support/half.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/nvrtc.h"
#include "scoped_env.h"

namespace kiln::testing {
namespace {

namespace cu = targets::cuda;

/// mixed_convs_model(n) lowered without a device, in `dt`.
struct Lowered {
  artifact::CompiledProgram cp;
  cu::LowerStats st;
  int dw_kernels = 0, convs = 0;
};

Lowered lower(int64_t n, DType dt) {
  Lowered r;
  r.cp.model = imported_model(mixed_convs_model(n));
  cu::LowerOptions opt;
  opt.device = -1;
  opt.tuning = Tuning::heuristic;
  opt.dtype = dt;
  r.st = cu::lower_for_cuda(r.cp, opt);
  for (auto& node : r.cp.model.main.nodes) {
    r.dw_kernels += node.op_type == "Kernel" && node.s("fn", "").ends_with("_dwconv");
    r.convs += node.op_type == "Conv";
  }
  EXPECT_EQ(r.dw_kernels, r.st.dwconvs);
  return r;
}

const ir::Node* kernel_writing(const ir::Model& m, const std::string& output) {
  for (auto& n : m.main.nodes)
    if (n.op_type == "Kernel" && n.s("fn", "").ends_with("_dwconv"))
      for (auto o : n.outputs)
        if (m.value(o).name.rfind(output, 0) == 0) return &n;
  return nullptr;
}

TEST(CudaDwConv, Float16AtBatch8LowersOnlyTheDepthwiseConvolutionsToKilnsKernel) {
  ScopedEnv env("KILN_CUDA_DWCONV", nullptr);
  Lowered r = lower(8, DType::f16);
  EXPECT_EQ(r.dw_kernels, 2);  // a (3x3 + bias + Clip) and e (5x5 stride 2 + bias + Relu)
  EXPECT_EQ(r.convs, 3);       // b (group 1), m (channel multiplier 2), d (dilated) stay on cuDNN
  EXPECT_EQ(r.st.convs, 3);
  const ir::Model& m = r.cp.model;
  for (auto& n : m.main.nodes) {
    EXPECT_NE(n.op_type, "Clip") << "the Clip joined the kernel";
    if (n.op_type != "Kernel" || !n.s("fn", "").ends_with("_dwconv")) continue;
    EXPECT_EQ(n.s("source_op", ""), "Conv");
    EXPECT_EQ(n.i("grid_stride", 0), 1);
    ASSERT_EQ(n.inputs.size(), 3u) << "x, w [R, S, C], bias";
    EXPECT_EQ(m.value(n.inputs[0]).dtype, DType::f16);
    const auto w = ir::to_sizes(*m.value(n.inputs[1]).shape);
    EXPECT_TRUE(w == (std::vector<int64_t>{3, 3, 16}) || w == (std::vector<int64_t>{5, 5, 16})) << n.label();
  }
  // a's filter as the kernel reads it: element [r, s, c] is Wa[c, 0, r, s].
  const ir::Node* ka = kernel_writing(m, "a");
  ASSERT_NE(ka, nullptr);
  const ir::Value& wv = m.value(ka->inputs[1]);
  ASSERT_TRUE(wv.constant);
  ASSERT_EQ(wv.constant->dtype(), DType::f16);
  ir::Model orig = imported_model(mixed_convs_model(8));
  const float* wa = nullptr;
  for (auto& v : orig.values)
    if (v.name == "Wa" && v.constant) wa = v.constant->data<float>();
  ASSERT_NE(wa, nullptr);
  for (int64_t c = 0; c < 16; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(half_to_float(wv.constant->data<uint16_t>()[(i * 3 + j) * 16 + c]),
                  half_to_float(float_to_half(wa[(c * 3 + i) * 3 + j])))
            << c << "," << i << "," << j;
  // The generated source: NHWC, the epilogues, the misaligned fallback.
  const std::string src = cu::decode_bundle(r.cp.kernels, "test").source;
  EXPECT_NE(src.find("depthwise conv float16 NHWC x [8,16,12,12] (N,C,H,W) window 3x3 strides 1,1 pads 1,1 +bias clip"),
            std::string::npos);
  EXPECT_NE(src.find("window 5x5 strides 2,2 pads 2,2 +bias relu"), std::string::npos);
  EXPECT_NE(src.find("& 7ull"), std::string::npos) << "16 channels of float16: 4 per thread, 8-byte alignment test";
}

TEST(CudaDwConv, RuleKeepsCudnnAtBatch1AndInFloat32) {
  ScopedEnv env("KILN_CUDA_DWCONV", nullptr);
  Lowered b1 = lower(1, DType::f16);
  EXPECT_EQ(b1.dw_kernels, 0);
  EXPECT_EQ(b1.convs, 5);
  Lowered f32 = lower(8, DType::f32);
  EXPECT_EQ(f32.dw_kernels, 0);
  EXPECT_EQ(f32.convs, 5);
  Lowered bf16 = lower(8, DType::bf16);
  EXPECT_EQ(bf16.dw_kernels, 2);
}

TEST(CudaDwConv, EnvironmentSwitchesTheKernelOnAndOff) {
  {
    ScopedEnv env("KILN_CUDA_DWCONV", "0");
    Lowered r = lower(8, DType::f16);
    EXPECT_EQ(r.dw_kernels, 0);
    EXPECT_EQ(r.convs, 5);
  }
  {
    ScopedEnv env("KILN_CUDA_DWCONV", "1");
    Lowered r = lower(1, DType::f32);  // NCHW float32 at batch 1: only when forced
    EXPECT_EQ(r.dw_kernels, 2);
    EXPECT_EQ(r.convs, 3);
    const ir::Node* ka = kernel_writing(r.cp.model, "a");
    ASSERT_NE(ka, nullptr);
    // NCHW reads the filter as the model has it, [C, 1, R, S].
    EXPECT_EQ(ir::to_sizes(*r.cp.model.value(ka->inputs[1]).shape), (std::vector<int64_t>{16, 1, 3, 3}));
    const std::string src = cu::decode_bundle(r.cp.kernels, "test").source;
    EXPECT_NE(src.find("depthwise conv float32 NCHW x [1,16,12,12]"), std::string::npos);
  }
}

TEST(CudaDwConv, WithoutBiasOrActivationTheConvolutionAloneJoins) {
  ScopedEnv env("KILN_CUDA_DWCONV", "1");
  for (const std::string act : {"", "Relu"}) {
    DwConvConfig c;
    c.n = 2, c.c = 17, c.bias = false, c.act = act;
    artifact::CompiledProgram cp;
    cp.model = imported_model(dwconv_model(c));
    cu::LowerOptions opt;
    opt.device = -1;
    opt.dtype = DType::f16;
    auto st = cu::lower_for_cuda(cp, opt);
    EXPECT_EQ(st.dwconvs, 1) << c.label();
    EXPECT_EQ(st.convs, 0) << c.label();
    int dw = 0;
    for (auto& n : cp.model.main.nodes) {
      EXPECT_NE(n.op_type, "Relu") << c.label();
      if (n.op_type == "Kernel" && n.s("fn", "").ends_with("_dwconv")) {
        ++dw;
        EXPECT_EQ(n.inputs.size(), 2u) << c.label() << ": x, w and no bias";
      }
    }
    EXPECT_EQ(dw, 1) << c.label();
  }
}

TEST(CudaDwConv, InspectCountsWhichConvolutionsRunWhere) {
  ScopedEnv env("KILN_CUDA_DWCONV", nullptr);
  TempDir dir;
  mixed_convs_model(8).save(dir / "m.onnx");
  SessionOptions o = cross_options();
  o.precision = Precision::fp16;
  o.precision_check = PrecisionCheck::off;
  compile(dir / "m.onnx", dir / "m.kiln", o);
  auto j = inspect_artifact((dir / "m.kiln").string());
  const auto& dw = j["library_algorithms"]["depthwise_convolutions"];
  EXPECT_EQ(dw["kiln_kernel"].get<int>(), 2);
  EXPECT_EQ(dw["cudnn"].get<int>(), 1);  // d (dilated); m has 32 outputs, b group 1
}

TEST(CudaDwConv, EveryKernelVariantCompiles) {
  // Vector widths (C = 3, 17: 1; 18: 2; 96: 4), outputs per thread, windows,
  // strides, epilogues, dtypes and both layouts, in one NVRTC compile (about
  // 0.1 s per kernel: a covering set, not every combination).
  struct Shape {
    int64_t c, k, stride, pixels;
  };
  const Shape shapes[] = {{3, 3, 1, 1}, {17, 5, 2, 2}, {18, 7, 1, 4}, {96, 3, 2, 4}};
  std::string src;
  int fns = 0;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (bool nhwc : {true, false})
      for (const Shape& sh : shapes) {
        cu::DwConvSpec s;
        const int64_t k = sh.k, c = sh.c;
        s.dtype = dt, s.nhwc = nhwc, s.n = 2, s.c = c, s.h = 9, s.w = 11, s.r = k, s.s = k;
        s.stride_h = s.stride_w = sh.stride, s.pad_h = s.pad_w = k / 2;
        s.oh = (s.h + 2 * s.pad_h - k) / sh.stride + 1, s.ow = (s.w + 2 * s.pad_w - k) / sh.stride + 1;
        s.pixels = nhwc ? sh.pixels : 1;
        s.bias = c != 17;
        if (k == 5) s.relu = true;
        if (k == 7) s.lo = 0.f, s.hi = 6.f;
        if (c == 96) s.hi = 6.f;  // an upper bound only
        EXPECT_EQ(s.vec(), !nhwc ? 1 : c == 96 ? 4 : c == 18 ? 2 : 1);
        const int64_t tiles = nhwc ? (s.ow + s.pixels - 1) / s.pixels : s.ow;
        EXPECT_EQ(s.items(), s.n * s.oh * tiles * s.c / s.vec());
        src += cu::dwconv_source(s, "dw" + std::to_string(fns++));
      }
  auto bundle = cu::nvrtc_compile(std::string(cu::kernel_prelude()) + src, "sm_90");
  EXPECT_GT(bundle.cubin.size(), 1000u);
  for (int i = 0; i < fns; ++i) EXPECT_NE(bundle.ptx.find(".entry dw" + std::to_string(i) + "("), std::string::npos) << i;
}

}  // namespace
}  // namespace kiln::testing

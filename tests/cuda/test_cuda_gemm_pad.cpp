// Matmuls whose rows are not 16-byte aligned (issue #20, pad_matmul_n) on
// the compile side (label `unit`, no GPU: NVRTC generates sm_90 code): the
// padded kiln.cuda.Gemm (n_pad, B and bias padded with zeros) and the one
// compaction kernel after it (in 16-bit programs the Slice and the Cast to
// float32 in one kernel), which matmuls are left alone, the size rule and
// KILN_CUDA_GEMM_PAD_N; and Slices joining element-wise chains in general.
// The models also run on ref and cpu here (valid models for the GPU test,
// test_cuda_gemm_pad_gpu.cpp).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "kiln/compile.h"
#include "kiln/session.h"
#include "pad_models.h"
#include "support/half.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/blaslt.h"
#include "targets/cuda/run/cuda_ops.h"
#include "scoped_env.h"

namespace kiln::testing {
namespace {

using targets::cuda::GemmSpec;

/// `b` lowered for sm_90 without a device, as the cuda pipeline does after
/// its graph passes (dtype: the program's float type; tf32 with float32).
artifact::CompiledProgram lowered(const ModelBuilder& b, DType dt, bool tf32 = false) {
  artifact::CompiledProgram cp;
  cp.model = imported_model(b);
  targets::cuda::LowerOptions opt;
  opt.device = -1;
  opt.dtype = dt;
  opt.tf32 = tf32;
  targets::cuda::lower_for_cuda(cp, opt);
  return cp;
}

std::string label(DType dt, bool tf32) { return std::string(dtype_name(dt)) + (tf32 ? "+tf32" : ""); }

/// The program's one Gemm node (a failure when there is not exactly one).
const ir::Node* only_gemm(const artifact::CompiledProgram& cp, const std::string& what) {
  const ir::Node* g = nullptr;
  int count = 0;
  for (auto& n : cp.model.main.nodes)
    if (n.op_type == "Gemm") g = &n, ++count;
  EXPECT_EQ(count, 1) << what;
  return count == 1 ? g : nullptr;
}

/// The nodes reading value v.
std::vector<const ir::Node*> readers(const artifact::CompiledProgram& cp, ir::ValueId v) {
  std::vector<const ir::Node*> out;
  for (auto& n : cp.model.main.nodes)
    if (std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end()) out.push_back(&n);
  return out;
}

int count_kernels(const artifact::CompiledProgram& cp) {
  int k = 0;
  for (auto& n : cp.model.main.nodes) k += n.op_type == "Kernel";
  return k;
}

/// The CUDA C++ of generated kernel `fn` in cp's bundle.
std::string kernel_source(const artifact::CompiledProgram& cp, const std::string& fn) {
  const std::string src = targets::cuda::decode_bundle(cp.kernels, "test").source;
  const auto at = src.find(" " + fn + "(");
  EXPECT_NE(at, std::string::npos) << fn;
  if (at == std::string::npos) return {};
  return src.substr(at, src.find("\n}\n", at) - at);
}

/// Element i of constant `t` as float (float32, float16 or bfloat16).
float element(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::f32) return t.data<float>()[i];
  if (t.dtype() == DType::f16) return half_to_float(t.data<uint16_t>()[i]);
  return bf16_to_float(t.data<uint16_t>()[i]);
}

/// What a padded matmul must look like: one Gemm computing n_pad columns
/// with B's extra columns (rows, trans_b) and the bias's extra entries zero,
/// its D [.., n_pad] read by one compaction kernel that writes the model's
/// output "y" [.., n]. Returns the Gemm's spec.
GemmSpec expect_padded(const artifact::CompiledProgram& cp, int64_t n, int64_t n_pad, const std::string& what) {
  const ir::Node* g = only_gemm(cp, what);
  if (!g) return {};
  const GemmSpec s = targets::cuda::gemm_spec_from(*g);
  EXPECT_EQ(s.n, n_pad) << what;
  const ir::Value& bv = cp.model.value(g->inputs[1]);
  EXPECT_TRUE(bv.constant.has_value()) << what;
  if (!bv.constant) return s;
  const Tensor& B = *bv.constant;
  EXPECT_EQ(B.shape(), (s.trans_b ? std::vector<int64_t>{n_pad, s.k} : std::vector<int64_t>{s.k, n_pad})) << what;
  double kept = 0, tail = 0;
  for (int64_t r = 0; r < B.shape()[0]; ++r)
    for (int64_t c = 0; c < B.shape()[1]; ++c) {
      const bool pad = s.trans_b ? r >= n : c >= n;
      (pad ? tail : kept) += std::fabs(element(B, r * B.shape()[1] + c));
    }
  EXPECT_EQ(tail, 0.0) << what << ": B's padding is zeros";
  EXPECT_GT(kept, 0.0) << what << ": B's columns are the weights";
  if (s.has_bias) {
    const Tensor& bias = *cp.model.value(g->inputs[2]).constant;
    EXPECT_EQ(bias.numel(), n_pad) << what;
    EXPECT_EQ(bias.shape().back(), n_pad) << what;
    for (int64_t i = n; i < bias.numel(); ++i) EXPECT_EQ(element(bias, i), 0.f) << what << " bias[" << i << "]";
  }
  const ir::ValueId d = g->outputs[0];
  EXPECT_EQ(cp.model.value(d).shape->back().value, n_pad) << what;
  auto rd = readers(cp, d);
  EXPECT_EQ(rd.size(), 1u) << what << ": one compaction kernel reads D";
  if (rd.size() == 1) {
    EXPECT_EQ(rd[0]->op_type, "Kernel") << what;
    EXPECT_EQ(rd[0]->inputs, std::vector<ir::ValueId>{d}) << what;
    EXPECT_EQ(rd[0]->outputs.size(), 1u) << what;
    const ir::Value& y = cp.model.value(rd[0]->outputs[0]);
    EXPECT_EQ(y.name, "y") << what;
    EXPECT_EQ(y.shape->back().value, n) << what;
    EXPECT_EQ(cp.model.main.outputs, std::vector<ir::ValueId>{rd[0]->outputs[0]}) << what;
  }
  return s;
}

/// The compaction kernel's function name (the one reader of the Gemm's D).
std::string compaction_fn(const artifact::CompiledProgram& cp) {
  const ir::Node* g = only_gemm(cp, "compaction_fn");
  auto rd = g ? readers(cp, g->outputs[0]) : std::vector<const ir::Node*>{};
  return rd.size() == 1 ? rd[0]->s("fn", "") : "";
}

// MatMul + bias Add + Relu, B shared by two batches of A: in every precision
// the Gemm computes n_pad columns (a multiple of 4 float32 / 8 16-bit
// elements: 16-byte rows) with the bias and Relu still fused, and one
// kernel compacts D into y. In 16-bit programs that kernel also casts to
// float32: it reads 16-bit D and writes float32 y.
TEST(CudaGemmPad, MatMulWithBiasAndReluPadsNInEveryPrecision) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", "1");
  for (auto [dt, tf32] : std::vector<std::pair<DType, bool>>{
           {DType::f32, false}, {DType::f32, true}, {DType::f16, false}, {DType::bf16, false}}) {
    const std::string what = label(dt, tf32);
    auto cp = lowered(pad_matmul_model(2, 32, 96, 1001, true, "Relu"), dt, tf32);
    const int64_t n_pad = dt == DType::f32 ? 1004 : 1008;
    GemmSpec s = expect_padded(cp, 1001, n_pad, what);
    EXPECT_EQ(s.m, 64) << what << ": A's two batches are rows of one matmul";
    EXPECT_EQ(s.k, 96) << what;
    EXPECT_EQ(s.batch, 1) << what;
    EXPECT_TRUE(s.has_bias) << what;
    EXPECT_EQ(s.epilogue, 1) << what << ": Relu stays fused";
    EXPECT_EQ(s.tf32, tf32) << what;
    EXPECT_EQ(s.d_type(), dt) << what << ": D keeps the program's type (padded)";
    const std::string fn = compaction_fn(cp);
    const std::string src = kernel_source(cp, fn);
    if (dt == DType::f32) {
      EXPECT_NE(fn.find("_slice"), std::string::npos) << what << ": " << fn;
      EXPECT_NE(src.find("const float* __restrict__ in0, float* __restrict__ out0"), std::string::npos) << src;
      EXPECT_NE(src.find(fmt::format("(unsigned long long)o * {} + 0 + r", n_pad)), std::string::npos) << src;
      EXPECT_NE(src.find("kl_stv(reinterpret_cast<uint4*>(out0 + i0)"), std::string::npos) << what << ": vector stores\n" << src;
      EXPECT_EQ(count_kernels(cp), 1) << what;
    } else {
      EXPECT_NE(fn.find("_cast"), std::string::npos) << what << ": the Slice joined the Cast's kernel: " << fn;
      EXPECT_NE(src.find("const unsigned short* __restrict__ in0, float* __restrict__ out0"), std::string::npos) << src;
      EXPECT_NE(src.find(fmt::format("% {}u", 1001)), std::string::npos) << src;
      EXPECT_NE(src.find(fmt::format("(unsigned long long)o * {} + 0 + r", n_pad)), std::string::npos) << src;
      EXPECT_EQ(count_kernels(cp), 2) << what << ": x's cast to 16 bits, then the compaction with the cast back";
    }
  }
}

// An LM head (no bias) in fp16: today's out_dtype fusion would write float32
// D; padded, D stays 16-bit and the compaction kernel casts.
TEST(CudaGemmPad, Float16LmHeadCompactsAndCastsInOneKernel) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", "1");
  auto cp = lowered(pad_matmul_model(0, 64, 96, 1001, false, ""), DType::f16);
  GemmSpec s = expect_padded(cp, 1001, 1008, "fp16 lm head");
  EXPECT_FALSE(s.out_dtype.has_value()) << "D is 16-bit: the cast is the compaction kernel's";
  EXPECT_FALSE(s.has_bias);
  EXPECT_EQ(count_kernels(cp), 2);
  EXPECT_EQ(cp.model.value(cp.model.main.outputs[0]).dtype, DType::f32);
}

// Gemm with transB (B stored [n, k], torch.nn.Linear's layout), alpha and a
// bias C with beta 2: B gets zero rows, the folded bias (2 C) zero entries.
TEST(CudaGemmPad, GemmTransBPadsRowsAndTheBias) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", "1");
  const auto C = pad_weights(1001, 0.5f, 1.1f);
  for (DType dt : {DType::f32, DType::f16}) {
    const std::string what(dtype_name(dt));
    auto cp = lowered(pad_gemm_model(64, 96, 1001, true, "bias"), dt);
    const int64_t n_pad = dt == DType::f32 ? 1004 : 1008;
    GemmSpec s = expect_padded(cp, 1001, n_pad, what);
    EXPECT_TRUE(s.trans_b) << what;
    EXPECT_FLOAT_EQ(s.alpha, 0.5f) << what;
    EXPECT_TRUE(s.has_bias) << what;
    EXPECT_FALSE(s.has_c) << what;
    const ir::Node* g = only_gemm(cp, what);
    if (g && s.has_bias) {
      const Tensor& bias = *cp.model.value(g->inputs[2]).constant;
      for (int64_t i : {0, 500, 1000})
        EXPECT_NEAR(element(bias, i), 2.f * C[i], dt == DType::f32 ? 1e-6 : 4e-3) << what << " bias[" << i << "] = beta * C";
    }
  }
}

// Without KILN_CUDA_GEMM_PAD_N the size rule decides (lowering.h): a
// matmul of m 1024, k 96, n 1001 (98M multiply-adds) is padded; the same
// with m 64 (6M) is not, nor one with k 32 (bound by writing D), nor an n
// of 9 (padding to 12 / 16 adds more than an eighth).
TEST(CudaGemmPad, SizeRuleTakesLargeMatmulsOnly) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", nullptr);
  for (DType dt : {DType::f32, DType::f16}) {
    const std::string what(dtype_name(dt));
    auto big = lowered(pad_matmul_model(4, 256, 96, 1001, false, ""), dt);
    expect_padded(big, 1001, dt == DType::f32 ? 1004 : 1008, what + " m 1024");
    struct Small {
      const char* why;
      ModelBuilder model;
      int64_t n;
    };
    for (auto& c : std::vector<Small>{{"m 64", pad_matmul_model(2, 32, 96, 1001, true, "Relu"), 1001},
                                      {"k 32", pad_matmul_model(0, 4096, 32, 1001, false, ""), 1001},
                                      {"n 9", pad_matmul_model(0, 8192, 256, 9, false, ""), 9}}) {
      auto cp = lowered(c.model, dt);
      const ir::Node* g = only_gemm(cp, what + " " + c.why);
      if (g) {
        EXPECT_EQ(targets::cuda::gemm_spec_from(*g).n, c.n) << what << " " << c.why << ": not padded";
      }
    }
  }
}

// KILN_CUDA_GEMM_PAD_N=0 gives today's program: the large fp16 LM head is
// one Gemm of n 1001 writing float32 (the fused cast), no kernel after it.
TEST(CudaGemmPad, SwitchedOffGivesTodaysProgram) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", "0");
  auto cp = lowered(pad_matmul_model(4, 256, 96, 1001, false, ""), DType::f16);
  const ir::Node* g = only_gemm(cp, "off");
  ASSERT_NE(g, nullptr);
  GemmSpec s = targets::cuda::gemm_spec_from(*g);
  EXPECT_EQ(s.n, 1001);
  EXPECT_EQ(s.d_type(), DType::f32);
  EXPECT_EQ(cp.model.value(g->outputs[0]).name, "y");
  EXPECT_EQ(count_kernels(cp), 1) << "only x's cast to 16 bits";
}

// Left alone even when forced: n already aligned (1024), a residual C (a
// Gemm's full C, a residual Add lower_gemm fuses: C has D's layout), and
// A's rows not 16-byte aligned (k 95: padding n cannot give cuBLASLt its
// vectorized kernels).
TEST(CudaGemmPad, AlignedResidualAndMisalignedAAreLeftAlone) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", "1");
  for (DType dt : {DType::f32, DType::f16}) {
    const std::string what(dtype_name(dt));
    struct Case {
      const char* why;
      ModelBuilder model;
      int64_t n;
      bool has_c;
    };
    for (auto& c : std::vector<Case>{{"n 1024", pad_matmul_model(0, 64, 96, 1024, true, "Relu"), 1024, false},
                                     {"Gemm C", pad_gemm_model(64, 96, 1001, false, "full"), 1001, true},
                                     {"residual Add", pad_residual_model(64, 96, 1001), 1001, true},
                                     {"k 95", pad_matmul_model(0, 64, 95, 1001, false, ""), 1001, false}}) {
      auto cp = lowered(c.model, dt);
      const ir::Node* g = only_gemm(cp, what + " " + c.why);
      if (!g) continue;
      GemmSpec s = targets::cuda::gemm_spec_from(*g);
      EXPECT_EQ(s.n, c.n) << what << " " << c.why;
      EXPECT_EQ(s.has_c, c.has_c) << what << " " << c.why;
      EXPECT_EQ(cp.model.value(g->outputs[0]).shape->back().value, c.n) << what << " " << c.why << ": D not padded";
      for (auto* r : readers(cp, g->outputs[0]))
        EXPECT_EQ(r->s("fn", "").find("_slice"), std::string::npos) << what << " " << c.why << ": no compaction";
    }
  }
}

// Through the whole pipeline (graph passes, precision pass, artifact) for
// sm_90 without a GPU: the padding and the compaction are in the artifact.
TEST(CudaGemmPad, CrossCompiledArtifactHoldsThePaddedGemm) {
  ScopedEnv env("KILN_CUDA_GEMM_PAD_N", "1");
  TempDir dir;
  pad_matmul_model(2, 32, 96, 1001, true, "Relu").save(dir / "m.onnx");
  SessionOptions o;
  o.target = Target::cuda();
  o.arch = "sm_90";
  o.tuning = Tuning::heuristic;
  o.precision = Precision::fp16;
  o.use_cache = false;
  compile(dir / "m.onnx", dir / "m.kiln", o);
  auto cp = artifact::read_file(dir / "m.kiln");
  GemmSpec s = expect_padded(cp, 1001, 1008, "artifact");
  EXPECT_TRUE(s.has_bias);
  EXPECT_EQ(s.epilogue, 1);
}

// Slices read only by an element-wise node join its kernel: no Slice kernel
// and no sliced copy, except for d in float32 (no element-wise reader; in
// fp16 its cast back to float32 is one), which is a gather kernel alone. a's window (rows of 40, offset 8,
// 32 wide) is read as vectors, c's (35 wide) element by element.
TEST(CudaSliceGather, SlicesJoinTheirElementwiseReader) {
  for (DType dt : {DType::f32, DType::f16}) {
    const std::string what(dtype_name(dt));
    auto cp = lowered(slice_chain_model(), dt);
    std::map<std::string, std::string> fn_of;  // output name -> kernel
    int slices = 0;
    for (auto& n : cp.model.main.nodes) {
      if (n.op_type != "Kernel") continue;
      fn_of[cp.model.value(n.outputs[0]).name] = n.s("fn", "");
      slices += n.s("fn", "").find("_slice") != std::string::npos;
    }
    EXPECT_EQ(slices, dt == DType::f32 ? 1 : 0) << what << ": only d is a Slice kernel, in float32";
    ASSERT_TRUE(fn_of.count("a") && fn_of.count("b") && fn_of.count("c") && fn_of.count("d")) << what;
    if (dt == DType::f32) {
      EXPECT_NE(fn_of["d"].find("_slice"), std::string::npos) << what;
      // d alone: the gather kernel too (its window, 2 of 6 rows of 200, is read as vectors).
      EXPECT_NE(kernel_source(cp, fn_of["d"]).find("(unsigned long long)o * 1200 + 0 + r"), std::string::npos) << what;
    }
    EXPECT_NE(kernel_source(cp, fn_of["b"]).find("(unsigned long long)o * 200 + 40 + r"), std::string::npos) << what;
    const std::string a = kernel_source(cp, fn_of["a"]), c = kernel_source(cp, fn_of["c"]);
    EXPECT_NE(a.find("(unsigned long long)o * 40 + 8 + r"), std::string::npos) << a;
    EXPECT_NE(a.find("g0.u = *reinterpret_cast<const"), std::string::npos) << what << ": a's window is read as vectors\n" << a;
    EXPECT_NE(c.find("(unsigned long long)o * 40 + 3 + r"), std::string::npos) << c;
    EXPECT_EQ(c.find("g0.u ="), std::string::npos) << what << ": c's window is read element by element\n" << c;
  }
}

// The models of these tests and of test_cuda_gemm_pad_gpu.cpp run on ref and
// cpu alike, and y is what the model says (checked at a few elements).
TEST(CudaGemmPad, ModelsRunOnRefAndCpu) {
  struct Case {
    const char* name;
    ModelBuilder model;
  };
  std::vector<Case> cases = {{"mm bias relu", pad_matmul_model(2, 32, 96, 1001, true, "Relu")},
                             {"mm bias gelu", pad_matmul_model(2, 32, 96, 1001, true, "Gelu")},
                             {"lm head", pad_matmul_model(4, 256, 96, 1001, false, "")},
                             {"gemm transB bias", pad_gemm_model(64, 96, 1001, true, "bias")},
                             {"gemm full C", pad_gemm_model(64, 96, 1001, false, "full")},
                             {"residual", pad_residual_model(64, 96, 1001)},
                             {"slices", slice_chain_model()}};
  for (auto& c : cases) {
    TempDir dir;
    c.model.save(dir / "m.onnx");
    SessionOptions ro, co;
    ro.target = Target::ref();
    co.target = Target::cpu();
    ro.use_cache = co.use_cache = false;
    Session ref(dir / "m.onnx", ro), cpu(dir / "m.onnx", co);
    std::map<std::string, Tensor> in;
    float phase = 0.2f;
    for (auto& t : ref.inputs()) {
      Tensor x(DType::f32, t.dims);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + phase);
      in[t.name] = x;
      phase += 0.7f;
    }
    auto want = ref.run(in), got = cpu.run(in);
    ASSERT_EQ(want.size(), got.size()) << c.name;
    for (auto& [name, w] : want) {
      const Tensor& g = got.at(name);
      ASSERT_EQ(g.shape(), w.shape()) << c.name << " " << name;
      double worst = 0, scale = 1;
      for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, std::fabs(double(w.data<float>()[i])));
      for (int64_t i = 0; i < w.numel(); ++i)
        worst = std::max(worst, std::fabs(double(g.data<float>()[i]) - w.data<float>()[i]));
      EXPECT_LE(worst, 1e-4 * scale) << c.name << " " << name;
    }
    if (std::string(c.name) == "gemm transB bias") {
      // y[i, j] = 0.5 * sum_k x[i, k] W[j, k] + 2 C[j]
      const auto W = pad_weights(96 * 1001, 1.f / std::sqrt(96.f), 0.3f), C = pad_weights(1001, 0.5f, 1.1f);
      const Tensor& x = in.at("x");
      for (auto [i, j] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {5, 1000}, {63, 517}}) {
        double acc = 0;
        for (int64_t k = 0; k < 96; ++k) acc += double(x.data<float>()[i * 96 + k]) * W[j * 96 + k];
        EXPECT_NEAR(want.at("y").data<float>()[i * 1001 + j], 0.5 * acc + 2 * C[j], 1e-4) << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::testing

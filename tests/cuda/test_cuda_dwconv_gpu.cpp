// kiln's depthwise convolution kernel on a GPU (label `cuda`, part of
// kiln_cuda_kernels_gpu_tests, whose main() prints SKIPPED and exits 77
// without a device), against the ref target on the same model and inputs:
//  - the kernel itself (dwconv_source, compiled with NVRTC and launched
//    here): float32, float16 and bfloat16, NHWC (1, 2 and 4 outputs per
//    thread) and NCHW, 3x3 stride 1 and 2, 5x5 stride 2, 7x7 stride 1, 3, 17
//    and 96 channels (1, 1 and 4 per thread), batch 1 and 32, with bias +
//    Clip, Relu, or neither; on a grid smaller than the work (the grid-stride
//    loop) and on misaligned pointers (the one-channel fallback);
//  - whole programs with KILN_CUDA_DWCONV=1: fp32 (NCHW), fp32 + TF32 (NHWC
//    float32) and fp16 (NHWC);
//  - the timed choice (default) and KILN_CUDA_DWCONV=0 give ref's results too,
//    and the test prints which one ran.
//
// Tolerances (an element passes when |got - ref| <= atol * scale + rtol *
// |ref|, scale = max(1, max |ref|)), as the conv tests use them: float32
// 1e-4 / 1e-5 without scale (test_cuda_gpu.cpp: the same products summed in
// another order); float16 2e-2 and bfloat16 1e-1 (test_cuda_precision_gpu.cpp:
// inputs and filter rounded once, sums of <= 49 products in float32, the
// output rounded once).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "artifact/artifact.h"
#include "cuda_models.h"
#include "dwconv_models.h"
#include "kiln/compile.h"
#include "kiln/session.h"
#include "support/half.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/nvrtc.h"
#include "targets/cuda/run/driver.h"
#include "scoped_env.h"

namespace kiln::testing {
namespace {

namespace cu = targets::cuda;

struct Tol {
  double rtol, atol;
  bool scaled;
};
constexpr Tol kF32{1e-4, 1e-5, false};
constexpr Tol kF16{2e-2, 2e-2, true};
constexpr Tol kBf16{1e-1, 1e-1, true};

Tol tol_for(DType dt) { return dt == DType::f32 ? kF32 : dt == DType::f16 ? kF16 : kBf16; }

SessionOptions options(Target t, Precision p = Precision::fp32, bool tf32 = false) {
  SessionOptions o;
  o.target = t;
  o.precision = p;
  o.allow_tf32 = tf32;
  o.use_cache = false;
  return o;
}

/// amplitude * sin(0.37 i + phase): signed, smooth, no two rows alike.
std::vector<float> wave(size_t n, float amplitude, float phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = amplitude * std::sin(0.37f * static_cast<float>(i) + phase);
  return v;
}

Tensor tensor_of(const std::vector<int64_t>& shape, const std::vector<float>& v) {
  Tensor t(DType::f32, shape);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

/// Worst |got - want| / tolerance over the elements (ADD_FAILURE for the first few outside).
double check_close(const std::vector<float>& got, const std::vector<float>& want, Tol tol, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return INFINITY;
  double scale = 1;
  if (tol.scaled)
    for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double lim = tol.atol * scale + tol.rtol * std::fabs(want[i]), err = std::fabs(double(got[i]) - want[i]);
    const double ratio = err / lim;
    if (!(err <= lim)) {
      if (bad++ < 5) ADD_FAILURE() << what << " [" << i << "]: kiln " << got[i] << ", ref " << want[i];
      worst = INFINITY;
    } else {
      worst = std::max(worst, ratio);
    }
  }
  if (bad > 5) ADD_FAILURE() << what << ": " << bad << " elements out of tolerance";
  return worst;
}

std::vector<uint8_t> encode(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(v.size() * dtype_size(dt));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::f32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dt == DType::f16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& b, DType dt) {
  std::vector<float> out(b.size() / dtype_size(dt));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dt == DType::f32) {
      std::memcpy(&out[i], b.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      out[i] = dt == DType::f16 ? half_to_float(h) : bf16_to_float(h);
    }
  }
  return out;
}

/// One depthwise problem: the model's data (NCHW, float32) and ref's output.
struct Problem {
  DwConvConfig cfg;
  int64_t oh = 0, ow = 0;
  std::vector<float> x, w, b, want;  // x [N,C,H,W], w [C,1,K,K], b [C] (empty: none), want [N,C,OH,OW]
};

Problem make_problem(const DwConvConfig& c) {
  Problem p;
  p.cfg = c;
  p.oh = (c.h + 2 * (c.k / 2) - c.k) / c.stride + 1;
  p.ow = (c.w + 2 * (c.k / 2) - c.k) / c.stride + 1;
  ir::Model m = imported_model(dwconv_model(c));
  for (auto& v : m.values) {
    if (v.name == "W" && v.constant) p.w.assign(v.constant->data<float>(), v.constant->data<float>() + v.constant->numel());
    if (v.name == "B" && v.constant) p.b.assign(v.constant->data<float>(), v.constant->data<float>() + v.constant->numel());
  }
  p.x = wave(static_cast<size_t>(c.n * c.c * c.h * c.w), 2.f, 0.1f);
  TempDir dir;
  dwconv_model(c).save(dir / "m.onnx");
  Session ref(dir / "m.onnx", options(Target::ref()));
  auto out = ref.run({{"x", tensor_of({c.n, c.c, c.h, c.w}, p.x)}});
  const Tensor& y = out.at("y");
  p.want.assign(y.data<float>(), y.data<float>() + y.numel());
  return p;
}

/// The kernel's spec for problem `p` in `dt` and layout `nhwc`, `pixels` outputs per thread.
cu::DwConvSpec spec_of(const Problem& p, DType dt, bool nhwc, int64_t pixels) {
  const DwConvConfig& c = p.cfg;
  cu::DwConvSpec s;
  s.dtype = dt, s.nhwc = nhwc, s.n = c.n, s.c = c.c, s.h = c.h, s.w = c.w, s.oh = p.oh, s.ow = p.ow, s.r = c.k, s.s = c.k;
  s.stride_h = s.stride_w = c.stride, s.pad_h = s.pad_w = c.k / 2;
  s.bias = c.bias, s.relu = c.act == "Relu";
  if (c.act == "Clip") s.lo = 0.f, s.hi = 6.f;
  s.pixels = pixels;
  return s;
}

/// Runs function `fn` of `module` (spec `s`) on p's data, x and y placed
/// `offset` bytes past a 256-byte boundary, on a third of the grid the work
/// needs (at least 1 block): returns y in NCHW order, as floats.
std::vector<float> run_kernel(CUmodule module, const std::string& fn, const cu::DwConvSpec& s, const Problem& p,
                              size_t offset) {
  const auto& d = cu::driver();
  CUfunction f;
  cu::check(d.cuModuleGetFunction(&f, module, fn.c_str()), "cuModuleGetFunction");
  const int64_t N = s.n, C = s.c, H = s.h, W = s.w, R = s.r, S = s.s, OH = s.oh, OW = s.ow;
  std::vector<float> x = p.x, w = p.w;
  if (s.nhwc) {  // x to [N, H, W, C], w to [R, S, C]
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < W; ++i) x[((n * H + h) * W + i) * C + c] = p.x[((n * C + c) * H + h) * W + i];
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t q = 0; q < S; ++q) w[(r * S + q) * C + c] = p.w[(c * R + r) * S + q];
  }
  std::vector<std::vector<uint8_t>> in = {encode(x, s.dtype), encode(w, s.dtype)};
  if (s.bias) in.push_back(encode(p.b, s.dtype));
  std::vector<cu::DeviceBuffer> bufs;
  std::vector<CUdeviceptr> args;
  for (size_t k = 0; k < in.size(); ++k) {
    bufs.emplace_back(in[k].size() + 256, "test");
    args.push_back(bufs.back().get() + (k == 0 ? offset : 0));
    cu::check(d.cuMemcpyHtoD(args.back(), in[k].data(), in[k].size()), "cuMemcpyHtoD");
  }
  const size_t ybytes = static_cast<size_t>(N * C * OH * OW) * dtype_size(s.dtype);
  bufs.emplace_back(ybytes + 256, "test");
  args.push_back(bufs.back().get() + offset);
  std::vector<uint8_t> junk(ybytes, 0xA5);  // a pattern the kernel must overwrite everywhere
  cu::check(d.cuMemcpyHtoD(args.back(), junk.data(), ybytes), "cuMemcpyHtoD");
  std::vector<void*> params(args.size());
  for (size_t i = 0; i < args.size(); ++i) params[i] = &args[i];
  const int64_t grid = std::max<int64_t>(1, (s.items() + cu::kDwConvBlock - 1) / cu::kDwConvBlock / 3);
  cu::check(d.cuLaunchKernel(f, unsigned(grid), 1, 1, unsigned(cu::kDwConvBlock), 1, 1, 0, nullptr, params.data(), nullptr),
            "cuLaunchKernel");
  cu::check(d.cuCtxSynchronize(), "cuCtxSynchronize (the depthwise kernel)");
  std::vector<uint8_t> out(ybytes);
  cu::check(d.cuMemcpyDtoH(out.data(), args.back(), ybytes), "cuMemcpyDtoH");
  std::vector<float> y = decode(out, s.dtype);
  if (!s.nhwc) return y;
  std::vector<float> nchw(y.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < OH; ++h)
        for (int64_t i = 0; i < OW; ++i) nchw[((n * C + c) * OH + h) * OW + i] = y[((n * OH + h) * OW + i) * C + c];
  return nchw;
}

/// The problems: 3 channel counts x 4 windows x batch 1 and 32.
std::vector<DwConvConfig> configs() {
  struct Window {
    int64_t k, stride;
    bool bias;
    const char* act;
  };
  const Window windows[] = {{3, 1, true, "Clip"}, {3, 2, true, "Relu"}, {5, 2, false, ""}, {7, 1, true, "Clip"}};
  std::vector<DwConvConfig> out;
  for (int64_t c : {3, 17, 96})
    for (const Window& w : windows)
      for (int64_t n : {1, 32}) {
        DwConvConfig cfg;
        cfg.n = n, cfg.c = c, cfg.h = 10, cfg.w = 11, cfg.k = w.k, cfg.stride = w.stride, cfg.bias = w.bias, cfg.act = w.act;
        cfg.big_weights = true;  // sums beyond 6: the Clip's upper bound is hit
        out.push_back(cfg);
      }
  return out;
}

TEST(CudaDwConvGpu, KernelMatchesRefInEveryLayoutDtypeAndWidth) {
  cu::use_device(0);
  struct Launch {
    size_t problem;
    cu::DwConvSpec spec;
    std::string fn;
    size_t offset;
  };
  std::vector<Problem> problems;
  for (auto& c : configs()) problems.push_back(make_problem(c));
  std::vector<Launch> launches;
  std::string src;
  // NVRTC takes ~0.1 s per kernel: batch 1 gets every dtype, layout and
  // width (float16: 1, 2 and 4 outputs per thread; float32 and bfloat16: 2),
  // batch 32 float16 NHWC (4 per thread) and both dtypes' NCHW.
  auto wanted = [](int64_t n, DType dt, bool nhwc, int64_t pixels) {
    if (!nhwc) return pixels == 1 && (n == 1 || dt != DType::bf16);
    if (n == 1) return dt == DType::f16 || pixels == 2;
    return dt == DType::f16 && pixels == 4;
  };
  for (size_t k = 0; k < problems.size(); ++k)
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (bool nhwc : {true, false})
        for (int64_t pixels : {1, 2, 4}) {
          if (!wanted(problems[k].cfg.n, dt, nhwc, pixels)) continue;
          cu::DwConvSpec s = spec_of(problems[k], dt, nhwc, pixels);
          const std::string fn = "dwtest" + std::to_string(launches.size());
          src += cu::dwconv_source(s, fn);
          launches.push_back({k, s, fn, 0});
          // Misaligned x and y (one element past the boundary): the one-channel path.
          if (nhwc && s.vec() > 1) launches.push_back({k, s, fn, dtype_size(dt)});
        }
  const auto facts = cu::device_facts(0);
  cu::KernelBundle bundle = cu::nvrtc_compile(std::string(cu::kernel_prelude()) + src, facts.arch);
  const auto& d = cu::driver();
  CUmodule module = nullptr;
  cu::check(d.cuModuleLoadData(&module, bundle.cubin.data()), "cuModuleLoadData");
  double worst[3] = {0, 0, 0};
  int misaligned = 0;
  for (const Launch& l : launches) {
    const Problem& p = problems[l.problem];
    const std::string what = fmt::format("{} {} {} P{}{}", p.cfg.label(), dtype_name(l.spec.dtype), l.spec.nhwc ? "NHWC" : "NCHW",
                                         l.spec.pixels, l.offset ? " misaligned" : "");
    SCOPED_TRACE(what);
    std::vector<float> got = run_kernel(module, l.fn, l.spec, p, l.offset);
    const double w = check_close(got, p.want, tol_for(l.spec.dtype), what);
    const int di = l.spec.dtype == DType::f32 ? 0 : l.spec.dtype == DType::f16 ? 1 : 2;
    worst[di] = std::max(worst[di], w);
    misaligned += l.offset != 0;
  }
  d.cuModuleUnload(module);
  std::printf("  %zu launches (%d misaligned); worst error / tolerance: float32 %.3f, float16 %.3f, bfloat16 %.3f\n",
              launches.size(), misaligned, worst[0], worst[1], worst[2]);
  EXPECT_GT(misaligned, 0);
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (auto v : d) n *= v;
  return n;
}

/// Compiles `model` for cuda with `o` (KILN_CUDA_DWCONV as set by the
/// caller), checks it against ref on input x, and returns how many
/// depthwise convolutions run on kiln's kernel.
int compile_and_compare(const ModelBuilder& model, const SessionOptions& o, Tol tol, const std::string& what) {
  TempDir dir;
  model.save(dir / "m.onnx");
  compile(dir / "m.onnx", dir / "m.kiln", o);
  int dw = 0;
  for (auto& n : artifact::read_file(dir / "m.kiln").model.main.nodes)
    dw += n.op_type == "Kernel" && n.s("fn", "").ends_with("_dwconv");
  Session ref(dir / "m.onnx", options(Target::ref()));
  Session gpu = Session::load(dir / "m.kiln", o);
  const auto xi = ref.inputs().at(0);
  std::map<std::string, Tensor> in = {{"x", tensor_of(xi.dims, wave(static_cast<size_t>(numel(xi.dims)), 2.f, 0.3f))}};
  auto want = ref.run(in), got = gpu.run(in);
  double worst = 0;
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    worst = std::max(worst, check_close(std::vector<float>(g.data<float>(), g.data<float>() + g.numel()),
                                        std::vector<float>(w.data<float>(), w.data<float>() + w.numel()), tol, what + " " + name));
  }
  std::printf("  %-58s depthwise on kiln's kernel: %d, worst error / tolerance %.3f\n", what.c_str(), dw, worst);
  return dw;
}

TEST(CudaDwConvGpu, ProgramsOnTheKernelMatchRef) {
  ScopedEnv env("KILN_CUDA_DWCONV", "1");
  std::vector<DwConvConfig> cfgs(3);
  cfgs[0].n = 32, cfgs[0].c = 17, cfgs[0].k = 3, cfgs[0].stride = 2, cfgs[0].act = "Clip";
  cfgs[1].n = 1, cfgs[1].c = 96, cfgs[1].k = 7, cfgs[1].stride = 1, cfgs[1].act = "";
  cfgs[2].n = 32, cfgs[2].c = 3, cfgs[2].k = 5, cfgs[2].stride = 2, cfgs[2].act = "Relu", cfgs[2].bias = false;
  for (auto& c : cfgs) {
    c.h = 14, c.w = 13, c.big_weights = true;
    // fp32: NCHW; fp32 + TF32: NHWC float32 (the kernel does no TF32 rounding); fp16: NHWC.
    EXPECT_EQ(compile_and_compare(dwconv_model(c), options(Target::cuda()), kF32, c.label() + " fp32"), 1);
    EXPECT_EQ(compile_and_compare(dwconv_model(c), options(Target::cuda(), Precision::fp32, true), kF32, c.label() + " fp32+tf32"), 1);
    EXPECT_EQ(compile_and_compare(dwconv_model(c), options(Target::cuda(), Precision::fp16), kF16, c.label() + " fp16"), 1);
  }
}

TEST(CudaDwConvGpu, TimedChoiceAndSwitchedOffBothMatchRef) {
  // The default (timed against cuDNN) may pick either; both must be right,
  // and KILN_CUDA_DWCONV=0 must leave every convolution to cuDNN.
  DwConvConfig mobile;  // MobileNetV2's first depthwise convolution at batch 32
  mobile.n = 32, mobile.c = 32, mobile.h = 112, mobile.w = 112, mobile.k = 3, mobile.stride = 1, mobile.act = "Clip";
  {
    ScopedEnv env("KILN_CUDA_DWCONV", nullptr);
    compile_and_compare(mixed_convs_model(32), options(Target::cuda(), Precision::fp16), kF16, "mixed b32 fp16 (timed)");
    compile_and_compare(mixed_convs_model(1), options(Target::cuda()), kF32, "mixed b1 fp32 (timed)");
    compile_and_compare(dwconv_model(mobile), options(Target::cuda(), Precision::fp16), kF16, mobile.label() + " fp16 (timed)");
  }
  {
    ScopedEnv env("KILN_CUDA_DWCONV", "0");
    EXPECT_EQ(compile_and_compare(mixed_convs_model(32), options(Target::cuda(), Precision::fp16), kF16, "mixed b32 fp16 (off)"), 0);
  }
}

}  // namespace
}  // namespace kiln::testing

// Timing of generated kernels before they join the program (lowering.h:
// time_kernel_launches): the depthwise convolution's choice between kiln's
// kernel and cuDNN (lower_dwconv.cpp) compiles its candidates in one NVRTC
// call and times them here.
#include <fmt/format.h>

#include <algorithm>

#include "support/error.h"
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/compile/nvrtc.h"
#include "targets/cuda/compile/tuning.h"
#include "targets/cuda/run/driver.h"

namespace kiln::targets::cuda {

namespace {
/// Launches per timed repetition: one launch of a small kernel (a few
/// microseconds) is near CUDA events' resolution (as tune_kernels.cpp).
constexpr int kLaunchesPerRep = 10;
/// Parameter buffers start at multiples of this (the vector paths' alignment).
constexpr size_t kAlign = 256;

size_t rounded(size_t b) { return (std::max<size_t>(b, 16) + kAlign - 1) / kAlign * kAlign; }
}  // namespace

std::vector<float> time_kernel_launches(const std::string& source, const std::vector<TimedLaunch>& launches,
                                        const LowerOptions& opt) {
  if (launches.empty()) return {};
  KernelBundle bundle = nvrtc_compile(std::string(kernel_prelude()) + source, opt.arch);
  use_device(opt.device);
  const DriverApi& d = driver();
  CUmodule module = nullptr;
  check(d.cuModuleLoadData(&module, bundle.cubin.data()), "cuModuleLoadData (kernel timing)");
  struct Unload {
    CUmodule m;
    ~Unload() { driver().cuModuleUnload(m); }
  } unload{module};
  size_t scratch = 0;
  for (auto& l : launches) {
    size_t need = 0;
    for (size_t b : l.param_bytes) need += rounded(b);
    scratch = std::max(scratch, need);
  }
  // Zeros: the kernels timed here do no data-dependent work (no denormals,
  // no NaN slow paths), so zeroed operands time like real ones.
  DeviceBuffer buf(scratch, "the kernel timing buffer");
  check(d.cuMemsetD8Async(buf.get(), 0, buf.bytes(), nullptr), "cuMemsetD8Async");
  check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  TimingStream stream;
  const int reps = opt.tuning == Tuning::exhaustive ? 10 : 5;
  std::vector<float> ms;
  for (auto& l : launches) {
    CUfunction f;
    check(d.cuModuleGetFunction(&f, module, l.fn.c_str()), fmt::format("cuModuleGetFunction('{}')", l.fn).c_str());
    std::vector<CUdeviceptr> args;
    CUdeviceptr at = buf.get();
    for (size_t b : l.param_bytes) args.push_back(at), at += rounded(b);
    std::vector<void*> params(args.size());
    for (size_t i = 0; i < args.size(); ++i) params[i] = &args[i];
    const float t = time_median_ms(
        stream.get(),
        [&](CUstream s) {
          for (int r = 0; r < kLaunchesPerRep; ++r)
            check(d.cuLaunchKernel(f, unsigned(l.grid), 1, 1, unsigned(l.block), 1, 1, 0, s, params.data(), nullptr),
                  "cuLaunchKernel (kernel timing)");
        },
        2, reps);
    ms.push_back(t / kLaunchesPerRep);
  }
  return ms;
}

}  // namespace kiln::targets::cuda

// NVRTC compilation of the generated kernels (nvrtc.h).
#include "targets/cuda/compile/nvrtc.h"

#include <fmt/format.h>
#include <nvrtc.h>

#include <memory>
#include <vector>

#include "support/error.h"

namespace kiln::targets::cuda {

namespace {

void check_nvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) fail(ErrorCode::internal, "NVRTC {}: {}", what, nvrtcGetErrorString(r));
}

struct Prog {
  nvrtcProgram p = nullptr;
  ~Prog() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

/// Compiles for --gpu-architecture=`gpu_arch`; returns the program (log checked).
std::unique_ptr<Prog> compile(const std::string& source, const std::string& gpu_arch) {
  auto prog = std::make_unique<Prog>();
  check_nvrtc(nvrtcCreateProgram(&prog->p, source.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr), "create");
  std::string arch_opt = "--gpu-architecture=" + gpu_arch;
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "--device-as-default-execution-space"};
  nvrtcResult r = nvrtcCompileProgram(prog->p, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog->p, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog->p, log.data());
    if (r == NVRTC_ERROR_INVALID_OPTION)
      fail(ErrorCode::unsupported, "NVRTC {} does not support --gpu-architecture={}: {}", nvrtc_version(), gpu_arch, log);
    fail(ErrorCode::internal, "the generated CUDA kernels do not compile for {} (a kiln bug): {}\n{}", gpu_arch,
         nvrtcGetErrorString(r), log);
  }
  return prog;
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("{}.{}", major, minor);
}

KernelBundle nvrtc_compile(const std::string& source, const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) fail(ErrorCode::invalid_option, "arch: '{}' is not of the form sm_XX", arch);
  KernelBundle b;
  b.arch = arch;
  b.source = source;
  {
    auto p = compile(source, arch);
    size_t n = 0;
    check_nvrtc(nvrtcGetCUBINSize(p->p, &n), "cubin size");
    b.cubin.resize(n);
    check_nvrtc(nvrtcGetCUBIN(p->p, reinterpret_cast<char*>(b.cubin.data())), "cubin");
  }
  {
    auto p = compile(source, "compute_" + arch.substr(3));
    size_t n = 0;
    check_nvrtc(nvrtcGetPTXSize(p->p, &n), "ptx size");
    b.ptx.resize(n);
    check_nvrtc(nvrtcGetPTX(p->p, b.ptx.data()), "ptx");
    while (!b.ptx.empty() && b.ptx.back() == '\0') b.ptx.pop_back();
  }
  return b;
}

}  // namespace kiln::targets::cuda

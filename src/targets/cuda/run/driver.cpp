// The CUDA driver API through dlopen (driver.h), device facts and buffers.
#include "targets/cuda/run/blaslt_api.h"
#include "targets/cuda/run/driver.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "support/error.h"

namespace kiln::targets::cuda {

namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

struct Loaded {
  DriverApi api;
  std::string error;  ///< why the driver is unusable ("" = usable)
  int devices = 0;
};

const Loaded& loaded() {
  static Loaded l = [] {
    Loaded r;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      r.error = fmt::format("libcuda.so.1 cannot be opened ({}): no NVIDIA driver on this machine", dlerror());
      return r;
    }
    std::string missing;
#define KILN_CU_FN(name)                                                                 \
  r.api.name = reinterpret_cast<decltype(r.api.name)>(dlsym(h, KILN_STR(name)));        \
  if (!r.api.name) missing += std::string(missing.empty() ? "" : ", ") + KILN_STR(name);
#include "targets/cuda/run/driver_functions.inc"
#undef KILN_CU_FN
    if (!missing.empty()) {
      r.error = fmt::format("the NVIDIA driver is too old: libcuda.so.1 lacks {}", missing);
      return r;
    }
    CUresult e = r.api.cuInit(0);
    if (e != CUDA_SUCCESS) {
      const char* s = nullptr;
      r.api.cuGetErrorString(e, &s);
      r.error = fmt::format("cuInit failed: {}", s ? s : "unknown error");
      return r;
    }
    if (r.api.cuDeviceGetCount(&r.devices) != CUDA_SUCCESS || r.devices == 0)
      r.error = "the NVIDIA driver sees no CUDA device";
    return r;
  }();
  return l;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) fail(ErrorCode::unsupported, "no CUDA driver or device: {}", l.error);
  return l.api;
}

bool device_present() { return loaded().error.empty(); }

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char *name = nullptr, *desc = nullptr;
  const DriverApi& d = loaded().api;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &desc);
  ErrorCode code = r == CUDA_ERROR_OUT_OF_MEMORY || r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
                           r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION
                       ? ErrorCode::unsupported
                       : ErrorCode::internal;
  fail(code, "{}: {}: {}", what, name ? name : std::to_string(int(r)), desc ? desc : "");
}

static CUdevice get_device(int ordinal) {
  const DriverApi& d = driver();
  int n = loaded().devices;
  if (ordinal < 0 || ordinal >= n)
    fail(ErrorCode::unsupported, "CUDA device {} does not exist: {} device{} visible", ordinal, n, n == 1 ? "" : "s");
  CUdevice dev;
  check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  return dev;
}

static std::string cudnn_version() {
  // Read through dlopen: the cuda target's runtime does not link cuDNN until
  // it runs convolutions; the version still belongs in the compat block.
  void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (!h) return "none";
  using Fn = size_t (*)();
  auto f = reinterpret_cast<Fn>(dlsym(h, "cudnnGetVersion"));
  return f ? std::to_string(f()) : "none";
}

DeviceFacts device_facts(int ordinal) {
  const DriverApi& d = driver();
  CUdevice dev = get_device(ordinal);
  DeviceFacts f;
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  f.name = name;
  int major = 0, minor = 0;
  check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&f.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  f.arch = fmt::format("sm_{}{}", major, minor);
  int drv = 0, rt = 0;
  check(d.cuDriverGetVersion(&drv), "cuDriverGetVersion");
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  f.libraries = {{"cuda_driver", std::to_string(drv)},
                 {"cuda_runtime", std::to_string(rt)},
                 {"cublaslt", std::to_string(blaslt_api().cublasLtGetVersion())},
                 {"cudnn", cudnn_version()}};
  return f;
}

std::vector<std::pair<std::string, std::string>> cross_compile_libraries() {
  return {{"cuda_driver", std::to_string(CUDA_VERSION)},
          {"cuda_runtime", std::to_string(CUDART_VERSION)},
          {"cublaslt", "any (chosen at load)"},
          {"cudnn", "any (chosen at load)"}};
}

int sm_count_of(const std::string& arch) {
  if (arch == "sm_80") return 108;
  if (arch == "sm_86") return 84;
  if (arch == "sm_89") return 128;
  if (arch == "sm_90") return 132;
  if (arch == "sm_100") return 148;
  return 128;
}

CUcontext use_device(int ordinal) {
  static std::mutex mu;
  static std::vector<CUcontext> ctxs;
  const DriverApi& d = driver();
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (ctxs.empty()) ctxs.resize(static_cast<size_t>(loaded().devices), nullptr);
    CUdevice dev = get_device(ordinal);
    if (!ctxs[ordinal]) check(d.cuDevicePrimaryCtxRetain(&ctxs[ordinal], dev), "cuDevicePrimaryCtxRetain");
    ctx = ctxs[ordinal];
  }
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

DeviceBuffer::DeviceBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  CUresult r = driver().cuMemAlloc(&ptr_, bytes < 256 ? 256 : bytes);
  if (r != CUDA_SUCCESS) {
    ptr_ = 0;
    check(r, fmt::format("cuMemAlloc of {} bytes for {}", bytes, what).c_str());
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFree(ptr_);
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = o.bytes_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) loaded().api.cuMemFree(ptr_);
}

PinnedBuffer::PinnedBuffer(size_t bytes, const char* what) : bytes_(bytes) {
  CUresult r = driver().cuMemAllocHost(&ptr_, bytes ? bytes : 1);
  if (r != CUDA_SUCCESS) {
    ptr_ = nullptr;
    check(r, fmt::format("cuMemAllocHost of {} bytes (pinned) for {}", bytes, what).c_str());
  }
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) driver().cuMemFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = o.bytes_;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) loaded().api.cuMemFreeHost(ptr_);
}

}  // namespace kiln::targets::cuda

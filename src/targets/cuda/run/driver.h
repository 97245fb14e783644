// The CUDA driver API as the cuda target uses it (run side), behind a small
// interface so that a HIP twin (hip/run/driver.h) can follow.
//
// libcuda.so.1 is opened with dlopen the first time a function here needs it,
// never linked: a machine with the CUDA toolkit but no driver (a build
// machine, CI with the toolkit) still starts every kiln program, and only
// using the cuda target there is an error ("no CUDA driver").
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::targets::cuda {

/// The driver entry points kiln uses, resolved from libcuda.so.1 (each
/// versioned symbol by its real name, e.g. cuMemAlloc_v2).
struct DriverApi {
#define KILN_CU_FN(name) decltype(&::name) name = nullptr;
#include "targets/cuda/run/driver_functions.inc"
#undef KILN_CU_FN
};

/// The driver API, loaded and cuInit()ed once (thread-safe). Throws
/// Error(unsupported) "no CUDA driver: ..." when libcuda.so.1 cannot be
/// opened or cuInit fails (no device, driver too old for this toolkit).
const DriverApi& driver();

/// True when driver() would succeed and at least one device is visible.
/// Never throws. Tests use it to print SKIPPED.
bool device_present();

/// Throws Error(code) "<what>: <CUDA error name>: <description>" when r is
/// not CUDA_SUCCESS.
void check(CUresult r, const char* what);

/// What the cuda target records about a device in the compatibility block.
struct DeviceFacts {
  std::string arch;  ///< "sm_90": compute capability major/minor
  std::string name;  ///< "NVIDIA H200"
  int sm_count = 0;  ///< multiprocessors (for launch sizing)
  /// ("cuda_driver","13000"), ("cuda_runtime","13000"), ("cublaslt","130000"),
  /// ("cudnn","91400" or "none"): exact version numbers as the libraries report them.
  std::vector<std::pair<std::string, std::string>> libraries;
};

/// library_versions of an artifact compiled for an architecture without a
/// device of it (cross-compiled): cuda_driver and cuda_runtime are this
/// toolkit's CUDA version (what the cubin needs at least, e.g. "13000");
/// cublaslt and cudnn are "any (chosen at load)": no decision of theirs is stored.
std::vector<std::pair<std::string, std::string>> cross_compile_libraries();

/// Multiprocessor count of the usual GPU of architecture `arch` (grid sizing
/// when cross-compiling): sm_80 108 (A100), sm_86 84, sm_89 128, sm_90 132
/// (H100 / H200), sm_100 148; 128 for others.
int sm_count_of(const std::string& arch);

/// Facts of device `ordinal`. Throws Error(unsupported) when there is no
/// driver or no such device ("CUDA device 1 does not exist: 1 device visible").
DeviceFacts device_facts(int ordinal);

/// The primary context of device `ordinal`, retained once for the process
/// and made current on the calling thread. Throws like device_facts().
CUcontext use_device(int ordinal);

/// Device memory owned by value (cuMemFree on destruction). Sizes in bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates max(bytes, 256) bytes (cuMemAlloc: 256-byte aligned).
  /// Throws Error(unsupported) naming `what` and the size when it fails.
  DeviceBuffer(size_t bytes, const char* what);
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, 0)), bytes_(o.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Page-locked (pinned) host memory owned by value (cuMemAllocHost, freed
/// with cuMemFreeHost). Copies between it and the device run asynchronously
/// on a stream at full bus speed; from pageable memory the driver stages
/// them through its own buffers and may block. Sizes in bytes.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  /// Allocates max(bytes, 1) bytes in the current context. Throws
  /// Error(unsupported) naming `what` and the size when it fails.
  PinnedBuffer(size_t bytes, const char* what);
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  ~PinnedBuffer();
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  size_t bytes() const { return bytes_; }
  /// True when [p, p + n) lies inside this buffer.
  bool holds(const void* p, size_t n) const {
    auto* b = static_cast<const uint8_t*>(ptr_);
    auto* q = static_cast<const uint8_t*>(p);
    return ptr_ && q >= b && q + n <= b + bytes_;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kiln::targets::cuda

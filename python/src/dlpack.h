// The DLPack C ABI (https://dmlc.github.io/dlpack/latest/c_api.html), as much
// of it as kiln's Python module exchanges: DLPack 0.x unversioned capsules
// ("dltensor") and 1.x versioned ones ("dltensor_versioned"). Declared here
// from the specification rather than vendored: these layouts are a stable ABI
// that every producer (PyTorch, CuPy, JAX, numpy) implements.
#pragma once
#include <cstdint>

extern "C" {

/// DLDeviceType values kiln meets: host memory and CUDA device memory.
enum KilnDLDeviceType : int32_t {
  kKilnDLCPU = 1,
  kKilnDLCUDA = 2,
  kKilnDLCUDAHost = 3,     ///< pinned host memory
  kKilnDLCUDAManaged = 13, ///< unified memory
};

/// DLDataTypeCode values.
enum KilnDLDataTypeCode : uint8_t {
  kKilnDLInt = 0,
  kKilnDLUInt = 1,
  kKilnDLFloat = 2,
  kKilnDLBfloat = 4,
  kKilnDLBool = 6,
};

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

/// A strided view of memory. `strides` (in elements) may be null: compact row-major.
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};

/// Capsule "dltensor": the consumer calls deleter(self) when done with it.
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

/// Capsule "dltensor_versioned" (DLPack >= 1.0).
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;  ///< bit 0: read-only; bit 1: is a copy
  DLTensor dl_tensor;
};

}  // extern "C"

namespace kiln::py {
constexpr uint64_t kDLFlagReadOnly = 1;
constexpr uint32_t kDLPackMajor = 1;
constexpr uint32_t kDLPackMinor = 0;
}  // namespace kiln::py

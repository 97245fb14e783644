// GPU memory for the Python module: the few CUDA driver calls it makes itself
// (output buffers, ordering after the caller's stream, copies to the host) and
// DLPack import / export of device tensors.
#pragma once
#include <Python.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlpack.h"
#include "kiln/dtype.h"
#include "kiln/session.h"

namespace kiln::py {

/// The CUDA driver API, opened with dlopen("libcuda.so.1") on first use (as
/// the runtime does): importing kiln never needs a driver. Every call makes
/// the device's primary context (the one PyTorch, CuPy and kiln's cuda target
/// use) current for its duration. Errors are kiln::Error(unsupported) when
/// there is no driver, else kiln::Error(internal) naming the call.
namespace cuda {
/// Allocates `bytes` (>= 1) on `device`; returns the CUdeviceptr.
uint64_t alloc(int device, size_t bytes);
/// Frees memory from alloc(); never throws (errors at process exit are ignored).
void free(int device, uint64_t ptr) noexcept;
/// Blocks until all work queued so far on `stream` (a CUstream handle; 1 = the
/// legacy default stream, 2 = the per-thread default stream) has finished.
void sync_stream(int device, uint64_t stream);
/// Synchronous copies of `bytes` bytes.
void copy_to_host(int device, void* dst, uint64_t src, size_t bytes);
void copy_device(int device, uint64_t dst, uint64_t src, size_t bytes);
}  // namespace cuda

/// Device memory owned by kiln (an output buffer); freed with the last reference.
struct DeviceBuffer {
  int device = 0;
  uint64_t ptr = 0;
  size_t bytes = 0;
  DeviceBuffer(int device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// A dense row-major tensor in GPU memory that kiln allocated (a run output).
struct DeviceArray {
  std::shared_ptr<DeviceBuffer> buffer;
  DType dtype = DType::undefined;
  std::vector<int64_t> shape;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  /// A new reference to a DLPack capsule viewing this array: "dltensor_versioned"
  /// (DLPack 1.0) when `versioned`, else "dltensor". The capsule shares the buffer.
  /// Throws kiln::Error(unsupported) for a dtype DLPack has no code for.
  PyObject* to_capsule(bool versioned) const;
  /// A deep copy in new device memory.
  DeviceArray copy() const;
};

/// DLPack dtype of a kiln dtype; false when DLPack has none (8-bit floats, 4-bit ints, strings).
bool to_dlpack_dtype(DType t, DLDataType& out);
/// kiln dtype of a DLPack dtype (lanes must be 1); DType::undefined when kiln has none.
DType from_dlpack_dtype(DLDataType t);

/// A DLPack tensor taken from a producer's capsule (marked used, so the
/// producer does not free it); its deleter runs when this is destroyed. Hold
/// the GIL while destroying it (some producers' deleters touch Python objects).
class ImportedTensor {
 public:
  /// Takes the capsule `capsule` ("dltensor" or "dltensor_versioned"). Throws
  /// kiln::Error(invalid_input) naming `what` for anything else or a used capsule.
  ImportedTensor(PyObject* capsule, const std::string& what);
  ~ImportedTensor();
  ImportedTensor(ImportedTensor&& o) noexcept;
  ImportedTensor(const ImportedTensor&) = delete;
  ImportedTensor& operator=(const ImportedTensor&) = delete;
  ImportedTensor& operator=(ImportedTensor&&) = delete;

  const DLTensor& tensor() const { return *tensor_; }
  bool read_only() const { return read_only_; }

  /// Checks that the tensor is a contiguous CUDA tensor on `device` with the
  /// dtype and static shape of `info`, and returns its address and size.
  /// Throws kiln::Error(invalid_input) naming `what` ("input 'x'") and the
  /// difference; Error(invalid_option) when `info` has symbolic dims.
  DeviceTensor check(const TensorInfo& info, int device, const std::string& what) const;

 private:
  DLTensor* tensor_ = nullptr;
  DLManagedTensor* legacy_ = nullptr;
  DLManagedTensorVersioned* versioned_ = nullptr;
  bool read_only_ = false;
};

/// "[1,3,224,224]"
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace kiln::py

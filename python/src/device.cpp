// GPU memory and DLPack for the Python module (device.h).
#include "device.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "kiln/errors.h"

namespace kiln::py {

namespace cuda {
namespace {

// CUDA driver API types and entry points (cuda.h), declared here so that the
// module builds without the toolkit; the driver's ABI for these is stable.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;

struct Api {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  std::string missing;  ///< why the API is unusable ("" when it is)
};

const Api& api() {
  static const Api a = [] {
    Api r;
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      r.missing = std::string("no CUDA driver (libcuda.so.1: ") + dlerror() + ")";
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && r.missing.empty()) r.missing = std::string("the CUDA driver lacks ") + name;
    };
    sym(r.cuInit, "cuInit");
    sym(r.cuDeviceGet, "cuDeviceGet");
    sym(r.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    sym(r.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    sym(r.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    sym(r.cuMemAlloc, "cuMemAlloc_v2");
    sym(r.cuMemFree, "cuMemFree_v2");
    sym(r.cuStreamSynchronize, "cuStreamSynchronize");
    sym(r.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    sym(r.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
    sym(r.cuGetErrorString, "cuGetErrorString");
    if (r.missing.empty() && r.cuInit(0) != 0) r.missing = "cuInit failed: no usable CUDA device or driver";
    return r;
  }();
  if (!a.missing.empty()) throw Error(ErrorCode::unsupported, a.missing);
  return a;
}

void check(CUresult rc, const char* call) {
  if (rc == 0) return;
  const char* s = nullptr;
  if (api().cuGetErrorString) api().cuGetErrorString(rc, &s);
  throw Error(ErrorCode::internal, fmt::format("{} failed: {} (CUresult {})", call, s ? s : "unknown error", rc));
}

/// The device's primary context, retained once for the process.
CUcontext primary(int device) {
  static std::mutex mu;
  static std::vector<CUcontext> ctxs;
  std::lock_guard<std::mutex> lock(mu);
  if (device < 0) throw Error(ErrorCode::invalid_option, fmt::format("cuda device {} is negative", device));
  if (static_cast<size_t>(device) >= ctxs.size()) ctxs.resize(device + 1, nullptr);
  if (!ctxs[device]) {
    CUdevice dev = 0;
    check(api().cuDeviceGet(&dev, device), "cuDeviceGet");
    check(api().cuDevicePrimaryCtxRetain(&ctxs[device], dev), "cuDevicePrimaryCtxRetain");
  }
  return ctxs[device];
}

/// Makes the device's primary context current for the scope.
struct Scope {
  explicit Scope(int device) { check(api().cuCtxPushCurrent(primary(device)), "cuCtxPushCurrent"); }
  ~Scope() {
    CUcontext ignored = nullptr;
    api().cuCtxPopCurrent(&ignored);
  }
};

}  // namespace

uint64_t alloc(int device, size_t bytes) {
  Scope s(device);
  CUdeviceptr p = 0;
  check(api().cuMemAlloc(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc");
  return p;
}

void free(int device, uint64_t ptr) noexcept {
  try {
    Scope s(device);
    api().cuMemFree(ptr);
  } catch (...) {
    // The driver may already be shut down at process exit: nothing to free then.
  }
}

void sync_stream(int device, uint64_t stream) {
  Scope s(device);
  check(api().cuStreamSynchronize(reinterpret_cast<CUstream>(stream)), "cuStreamSynchronize (the caller's stream)");
}

void copy_to_host(int device, void* dst, uint64_t src, size_t bytes) {
  if (!bytes) return;
  Scope s(device);
  check(api().cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void copy_device(int device, uint64_t dst, uint64_t src, size_t bytes) {
  if (!bytes) return;
  Scope s(device);
  check(api().cuMemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD");
}

}  // namespace cuda

DeviceBuffer::DeviceBuffer(int dev, size_t n) : device(dev), ptr(cuda::alloc(dev, n)), bytes(n) {}
DeviceBuffer::~DeviceBuffer() { cuda::free(device, ptr); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

bool to_dlpack_dtype(DType t, DLDataType& out) {
  const uint16_t bits = static_cast<uint16_t>(dtype_size(t) * 8);
  switch (t) {
    case DType::f16: case DType::f32: case DType::f64: out = {kKilnDLFloat, static_cast<uint8_t>(bits), 1}; return true;
    case DType::bf16: out = {kKilnDLBfloat, 16, 1}; return true;
    case DType::i8: case DType::i16: case DType::i32: case DType::i64:
      out = {kKilnDLInt, static_cast<uint8_t>(bits), 1};
      return true;
    case DType::u8: case DType::u16: case DType::u32: case DType::u64:
      out = {kKilnDLUInt, static_cast<uint8_t>(bits), 1};
      return true;
    case DType::boolean: out = {kKilnDLBool, 8, 1}; return true;
    default: return false;
  }
}

DType from_dlpack_dtype(DLDataType t) {
  if (t.lanes != 1) return DType::undefined;
  switch (t.code) {
    case kKilnDLFloat: return t.bits == 16 ? DType::f16 : t.bits == 32 ? DType::f32 : t.bits == 64 ? DType::f64 : DType::undefined;
    case kKilnDLBfloat: return t.bits == 16 ? DType::bf16 : DType::undefined;
    case kKilnDLInt:
      return t.bits == 8 ? DType::i8 : t.bits == 16 ? DType::i16 : t.bits == 32 ? DType::i32 : t.bits == 64 ? DType::i64 : DType::undefined;
    case kKilnDLUInt:
      return t.bits == 8 ? DType::u8 : t.bits == 16 ? DType::u16 : t.bits == 32 ? DType::u32 : t.bits == 64 ? DType::u64 : DType::undefined;
    case kKilnDLBool: return t.bits == 8 ? DType::boolean : DType::undefined;
    default: return DType::undefined;
  }
}

namespace {

/// What an exported capsule owns: the buffer (shared with the DeviceArray) and the shape.
struct ExportCtx {
  std::shared_ptr<DeviceBuffer> buffer;
  std::vector<int64_t> shape;
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
};

void legacy_deleter(DLManagedTensor* self) { delete static_cast<ExportCtx*>(self->manager_ctx); }
void versioned_deleter(DLManagedTensorVersioned* self) { delete static_cast<ExportCtx*>(self->manager_ctx); }

// A capsule nobody consumed still owns its tensor; a consumed one was renamed
// "used_..." and its consumer calls the deleter.
void legacy_capsule_destructor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}
void versioned_capsule_destructor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, "dltensor_versioned")) return;
  auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
  if (m && m->deleter) m->deleter(m);
}

}  // namespace

int64_t DeviceArray::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

PyObject* DeviceArray::to_capsule(bool versioned) const {
  DLDataType dt{};
  if (!to_dlpack_dtype(dtype, dt))
    throw Error(ErrorCode::unsupported,
                fmt::format("a {} tensor cannot be exchanged through DLPack (no DLPack type code for it)", dtype_name(dtype)));
  auto ctx = std::make_unique<ExportCtx>();
  ctx->buffer = buffer;
  ctx->shape = shape;
  DLTensor t{};
  t.data = reinterpret_cast<void*>(buffer->ptr);
  t.device = {kKilnDLCUDA, buffer->device};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = dt;
  t.shape = ctx->shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  PyObject* cap = nullptr;
  if (versioned) {
    ctx->versioned.version = {kDLPackMajor, kDLPackMinor};
    ctx->versioned.manager_ctx = ctx.get();
    ctx->versioned.deleter = versioned_deleter;
    ctx->versioned.flags = 0;
    ctx->versioned.dl_tensor = t;
    cap = PyCapsule_New(&ctx->versioned, "dltensor_versioned", versioned_capsule_destructor);
  } else {
    ctx->legacy.dl_tensor = t;
    ctx->legacy.manager_ctx = ctx.get();
    ctx->legacy.deleter = legacy_deleter;
    cap = PyCapsule_New(&ctx->legacy, "dltensor", legacy_capsule_destructor);
  }
  if (cap) ctx.release();  // the capsule (or its consumer, through the deleter) owns it now
  return cap;
}

DeviceArray DeviceArray::copy() const {
  DeviceArray out{std::make_shared<DeviceBuffer>(buffer->device, nbytes()), dtype, shape};
  cuda::copy_device(buffer->device, out.buffer->ptr, buffer->ptr, nbytes());
  return out;
}

ImportedTensor::ImportedTensor(PyObject* cap, const std::string& what) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    if (m->version.major != kDLPackMajor)
      throw Error(ErrorCode::invalid_input, fmt::format("{}: DLPack version {}.{} is not supported (kiln reads 1.x)",
                                                        what, m->version.major, m->version.minor));
    if (PyCapsule_SetName(cap, "used_dltensor_versioned") != 0) {
      PyErr_Clear();
      throw Error(ErrorCode::internal, what + ": could not mark its DLPack capsule used");
    }
    versioned_ = m;
    tensor_ = &m->dl_tensor;
    read_only_ = (m->flags & kDLFlagReadOnly) != 0;
  } else if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (PyCapsule_SetName(cap, "used_dltensor") != 0) {
      PyErr_Clear();
      throw Error(ErrorCode::internal, what + ": could not mark its DLPack capsule used");
    }
    legacy_ = m;
    tensor_ = &m->dl_tensor;
  } else {
    throw Error(ErrorCode::invalid_input,
                what + ": __dlpack__() did not return an unused DLPack capsule ('dltensor' or 'dltensor_versioned')");
  }
}

ImportedTensor::ImportedTensor(ImportedTensor&& o) noexcept
    : tensor_(o.tensor_), legacy_(o.legacy_), versioned_(o.versioned_), read_only_(o.read_only_) {
  o.tensor_ = nullptr;
  o.legacy_ = nullptr;
  o.versioned_ = nullptr;
}

ImportedTensor::~ImportedTensor() {
  if (versioned_ && versioned_->deleter) versioned_->deleter(versioned_);
  else if (legacy_ && legacy_->deleter) legacy_->deleter(legacy_);
}

DeviceTensor ImportedTensor::check(const TensorInfo& info, int device, const std::string& what) const {
  const DLTensor& t = *tensor_;
  if (t.device.device_type != kKilnDLCUDA && t.device.device_type != kKilnDLCUDAManaged)
    throw Error(ErrorCode::invalid_input,
                fmt::format("{} is not in CUDA device memory (DLPack device type {}); the session runs on cuda:{}",
                            what, t.device.device_type, device));
  if (t.device.device_id != device)
    throw Error(ErrorCode::invalid_input,
                fmt::format("{} is on cuda:{}, the session runs on cuda:{}", what, t.device.device_id, device));
  const DType dt = from_dlpack_dtype(t.dtype);
  if (dt != info.dtype)
    throw Error(ErrorCode::invalid_input,
                fmt::format("{} has dtype {}, the model expects {}", what,
                            dt == DType::undefined ? fmt::format("(DLPack code {}, {} bits, {} lanes)", t.dtype.code,
                                                                 t.dtype.bits, t.dtype.lanes)
                                                   : std::string(dtype_name(dt)),
                            dtype_name(info.dtype)));
  for (auto d : info.dims)
    if (d < 0)
      throw Error(ErrorCode::invalid_option,
                  fmt::format("{}: the program's shape {} has symbolic dims; device tensors need a session compiled "
                              "for static shapes (pass shapes=...)",
                              what, shape_text(info.dims)));
  std::vector<int64_t> shape(t.shape, t.shape + std::max(t.ndim, 0));
  if (shape != info.dims)
    throw Error(ErrorCode::invalid_input, fmt::format("{} has shape {}, the model expects {}", what, shape_text(shape),
                                                      shape_text(info.dims)));
  if (t.strides) {
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && t.strides[i] != expect) {
        std::vector<int64_t> strides(t.strides, t.strides + t.ndim);
        throw Error(ErrorCode::invalid_input,
                    fmt::format("{} is not contiguous (strides {} elements); pass a contiguous tensor "
                                "(e.g. x.contiguous())",
                                what, shape_text(strides)));
      }
      expect *= shape[i];
    }
  }
  int64_t n = 1;
  for (auto d : shape) n *= d;
  DeviceTensor out;
  out.ptr = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
  out.bytes = static_cast<size_t>(n) * dtype_size(dt);
  return out;
}

}  // namespace kiln::py

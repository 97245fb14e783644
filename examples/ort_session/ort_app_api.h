// The application side of ONNX Runtime's C API that this example calls,
// and a thin Ort:: layer over it shaped like ORT's C++ API (Ort::Env,
// Ort::SessionOptions, Ort::Session), so that the example reads the way
// users write ORT code.
//
// Why not ORT's own onnxruntime_cxx_api.h: ORT's headers ship in no Debian
// package and in no PyPI wheel (the wheel has libonnxruntime.so.1.x only),
// and kiln copies no ORT source. The example therefore declares the few
// OrtApi slots it calls (indices from ORT's API reference; the C API only
// appends, so they hold for every version >= 1.24) and opens the wheel's
// libonnxruntime with dlopen. With ORT's real headers, the same program is
// written with their Ort:: classes instead of this file.
#pragma once
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

extern "C" {
struct OrtStatus;
struct OrtEnv;
struct OrtSession;
struct OrtSessionOptions;
struct OrtValue;
struct OrtMemoryInfo;
struct OrtRunOptions;
struct OrtEpDevice;
struct OrtTensorTypeAndShapeInfo;

/// OrtApi of ORT >= 1.24, as far as this example uses it.
struct OrtAppApi {
  void* unused_0_1[2];
  /// [2] The message of a status.
  const char* (*GetErrorMessage)(const OrtStatus* status);
  /// [3] New environment (logging level 0 = verbose).
  OrtStatus* (*CreateEnv)(int log_severity_level, const char* logid, OrtEnv** out);
  void* unused_4_6[3];
  /// [7] New session on a model file.
  OrtStatus* (*CreateSession)(const OrtEnv* env, const char* model_path, const OrtSessionOptions* options,
                              OrtSession** out);
  void* unused_8;
  /// [9] Runs a session.
  OrtStatus* (*Run)(OrtSession* session, const OrtRunOptions* run_options, const char* const* input_names,
                    const OrtValue* const* inputs, size_t input_len, const char* const* output_names,
                    size_t output_names_len, OrtValue** outputs);
  /// [10] New session options.
  OrtStatus* (*CreateSessionOptions)(OrtSessionOptions** options);
  /// [11] Where ORT writes the optimized model (SetOptimizedModelFilePath).
  OrtStatus* (*SetOptimizedModelFilePath)(OrtSessionOptions* options, const char* optimized_model_filepath);
  void* unused_12_21[10];
  /// [22] Session log severity (0 = verbose).
  OrtStatus* (*SetSessionLogSeverityLevel)(OrtSessionOptions* options, int session_log_severity_level);
  /// [23] Graph optimization level (99 = ORT_ENABLE_ALL).
  OrtStatus* (*SetSessionGraphOptimizationLevel)(OrtSessionOptions* options, int graph_optimization_level);
  /// [24] Intra-op threads.
  OrtStatus* (*SetIntraOpNumThreads)(OrtSessionOptions* options, int intra_op_num_threads);
  void* unused_25_48[24];
  /// [49] A tensor over caller memory.
  OrtStatus* (*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* p_data, size_t p_data_len,
                                               const int64_t* shape, size_t shape_len, int type, OrtValue** out);
  void* unused_50;
  /// [51] A tensor's data.
  OrtStatus* (*GetTensorMutableData)(OrtValue* value, void** out);
  void* unused_52_63[12];
  /// [64] Element count of a tensor type.
  OrtStatus* (*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo* info, size_t* out);
  /// [65] Type and shape of a tensor value.
  OrtStatus* (*GetTensorTypeAndShape)(const OrtValue* value, OrtTensorTypeAndShapeInfo** out);
  void* unused_66_68[3];
  /// [69] CPU memory info (allocator type 0 = device, mem type 0 = default).
  OrtStatus* (*CreateCpuMemoryInfo)(int allocator_type, int mem_type, OrtMemoryInfo** out);
  void* unused_70_91[22];
  /// [92] .. [96], [99], [100]: releases.
  void (*ReleaseEnv)(OrtEnv*);
  void (*ReleaseStatus)(OrtStatus*);
  void (*ReleaseMemoryInfo)(OrtMemoryInfo*);
  void (*ReleaseSession)(OrtSession*);
  void (*ReleaseValue)(OrtValue*);
  void* unused_97_98[2];
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo*);
  void (*ReleaseSessionOptions)(OrtSessionOptions*);
  void* unused_101_300[200];
  /// [301] Loads a plugin EP library (kiln's libkiln_ort_ep.so).
  OrtStatus* (*RegisterExecutionProviderLibrary)(OrtEnv* env, const char* registration_name, const char* path);
  void* unused_302;
  /// [303] Every (EP, device) pair the registered EPs offer.
  OrtStatus* (*GetEpDevices)(const OrtEnv* env, const OrtEpDevice* const** ep_devices, size_t* num_ep_devices);
  /// [304] Appends an EP for the given devices with its options.
  OrtStatus* (*SessionOptionsAppendExecutionProvider_V2)(OrtSessionOptions* options, OrtEnv* env,
                                                         const OrtEpDevice* const* ep_devices, size_t num_ep_devices,
                                                         const char* const* keys, const char* const* values,
                                                         size_t num_options);
  void* unused_305_311[7];
  /// [312] The EP name of an EP device.
  const char* (*EpDevice_EpName)(const OrtEpDevice* ep_device);
};
static_assert(offsetof(OrtAppApi, GetErrorMessage) == 2 * sizeof(void*));
static_assert(offsetof(OrtAppApi, CreateSession) == 7 * sizeof(void*));
static_assert(offsetof(OrtAppApi, SetIntraOpNumThreads) == 24 * sizeof(void*));
static_assert(offsetof(OrtAppApi, CreateTensorWithDataAsOrtValue) == 49 * sizeof(void*));
static_assert(offsetof(OrtAppApi, CreateCpuMemoryInfo) == 69 * sizeof(void*));
static_assert(offsetof(OrtAppApi, ReleaseEnv) == 92 * sizeof(void*));
static_assert(offsetof(OrtAppApi, ReleaseSessionOptions) == 100 * sizeof(void*));
static_assert(offsetof(OrtAppApi, RegisterExecutionProviderLibrary) == 301 * sizeof(void*));
static_assert(offsetof(OrtAppApi, EpDevice_EpName) == 312 * sizeof(void*));

struct OrtAppApiBase {
  const OrtAppApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)();
};
}

namespace Ort {

/// The OrtApi of the libonnxruntime opened by Ort::Load.
inline const OrtAppApi*& api() {
  static const OrtAppApi* a = nullptr;
  return a;
}

/// An error from ORT, with ORT's message (the C++ API's Ort::Exception).
struct Exception : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void ThrowOnError(OrtStatus* st) {
  if (!st) return;
  std::string msg = api()->GetErrorMessage(st);
  api()->ReleaseStatus(st);
  throw Exception(msg);
}

/// Opens libonnxruntime (a path, e.g. the PyPI wheel's
/// onnxruntime/capi/libonnxruntime.so.1.32.0) and takes its API version 24.
inline void Load(const std::string& libonnxruntime) {
  void* h = dlopen(libonnxruntime.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) throw Exception(std::string("cannot open ") + libonnxruntime + ": " + dlerror());
  auto get_base = reinterpret_cast<const OrtAppApiBase* (*)()>(dlsym(h, "OrtGetApiBase"));
  if (!get_base) throw Exception(libonnxruntime + " has no OrtGetApiBase");
  api() = get_base()->GetApi(24);
  if (!api()) throw Exception(std::string("ONNX Runtime ") + get_base()->GetVersionString() + " is older than 1.24");
}

class Env {
 public:
  explicit Env(int log_level, const char* logid) { ThrowOnError(api()->CreateEnv(log_level, logid, &p_)); }
  ~Env() { api()->ReleaseEnv(p_); }
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  OrtEnv* get() const { return p_; }
  /// The plugin EP's (EP, device) pairs named `ep_name`.
  std::vector<const OrtEpDevice*> GetEpDevices(const std::string& ep_name) const {
    const OrtEpDevice* const* devs = nullptr;
    size_t n = 0;
    ThrowOnError(api()->GetEpDevices(p_, &devs, &n));
    std::vector<const OrtEpDevice*> out;
    for (size_t i = 0; i < n; ++i)
      if (ep_name == api()->EpDevice_EpName(devs[i])) out.push_back(devs[i]);
    return out;
  }
  void RegisterExecutionProviderLibrary(const char* name, const std::string& path) {
    ThrowOnError(api()->RegisterExecutionProviderLibrary(p_, name, path.c_str()));
  }

 private:
  OrtEnv* p_ = nullptr;
};

class SessionOptions {
 public:
  SessionOptions() { ThrowOnError(api()->CreateSessionOptions(&p_)); }
  ~SessionOptions() {
    if (p_) api()->ReleaseSessionOptions(p_);
  }
  SessionOptions(SessionOptions&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  SessionOptions& SetIntraOpNumThreads(int n) { return ThrowOnError(api()->SetIntraOpNumThreads(p_, n)), *this; }
  SessionOptions& SetGraphOptimizationLevel(int level) {
    return ThrowOnError(api()->SetSessionGraphOptimizationLevel(p_, level)), *this;
  }
  SessionOptions& SetLogSeverityLevel(int level) { return ThrowOnError(api()->SetSessionLogSeverityLevel(p_, level)), *this; }
  SessionOptions& SetOptimizedModelFilePath(const char* path) {
    return ThrowOnError(api()->SetOptimizedModelFilePath(p_, path)), *this;
  }
  SessionOptions& AppendExecutionProvider_V2(Env& env, const std::vector<const OrtEpDevice*>& devices,
                                             const std::vector<std::pair<std::string, std::string>>& options) {
    std::vector<const char*> k, v;
    for (auto& [key, val] : options) k.push_back(key.c_str()), v.push_back(val.c_str());
    ThrowOnError(api()->SessionOptionsAppendExecutionProvider_V2(p_, env.get(), devices.data(), devices.size(),
                                                                 k.data(), v.data(), k.size()));
    return *this;
  }
  OrtSessionOptions* get() const { return p_; }

 private:
  OrtSessionOptions* p_ = nullptr;
};

class Session {
 public:
  Session(const Env& env, const char* model_path, const SessionOptions& so) {
    ThrowOnError(api()->CreateSession(env.get(), model_path, so.get(), &p_));
  }
  ~Session() {
    if (p_) api()->ReleaseSession(p_);
  }
  Session(Session&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  /// Runs one float input, returns the first output's values.
  std::vector<float> Run(const char* input, std::vector<float>& data, const std::vector<int64_t>& shape,
                         const char* output) {
    OrtMemoryInfo* mi = nullptr;
    ThrowOnError(api()->CreateCpuMemoryInfo(0, 0, &mi));
    OrtValue* in = nullptr;
    OrtStatus* st = api()->CreateTensorWithDataAsOrtValue(mi, data.data(), data.size() * sizeof(float), shape.data(),
                                                          shape.size(), 1 /*float*/, &in);
    api()->ReleaseMemoryInfo(mi);
    ThrowOnError(st);
    OrtValue* out = nullptr;
    st = api()->Run(p_, nullptr, &input, &in, 1, &output, 1, &out);
    api()->ReleaseValue(in);
    ThrowOnError(st);
    OrtTensorTypeAndShapeInfo* info = nullptr;
    size_t n = 0;
    void* p = nullptr;
    ThrowOnError(api()->GetTensorTypeAndShape(out, &info));
    st = api()->GetTensorShapeElementCount(info, &n);
    api()->ReleaseTensorTypeAndShapeInfo(info);
    if (!st) st = api()->GetTensorMutableData(out, &p);
    std::vector<float> result;
    if (!st) result.assign(static_cast<float*>(p), static_cast<float*>(p) + n);
    api()->ReleaseValue(out);
    ThrowOnError(st);
    return result;
  }

 private:
  OrtSession* p_ = nullptr;
};

}  // namespace Ort

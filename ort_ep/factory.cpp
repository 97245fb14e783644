// The plugin's entry points (CreateEpFactories / ReleaseEpFactory) and the
// CPU factory: ORT loads libkiln_ort_ep.so, asks it for factories, and each
// factory offers ORT's devices it serves and makes an OrtEp per session.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <string>

#include "cuda_device.h"
#include "ep.h"
#include "epcontext.h"
#include "ort_util.h"
#include "support/version.h"

namespace kiln::ort_ep {

namespace {

/// The kiln EP's factory: ORT's CPU device (target cpu) and, in a kiln
/// built with CUDA, NVIDIA GPUs (target cuda, the CUDA device found by PCI
/// bus id). One EP name for both: its options are the same.
struct Factory : OrtEpFactory {
  const OrtLogger* default_logger = nullptr;
  Factory();
};

constexpr uint32_t kNvidiaVendorId = 0x10de;

const char* F_GetName(const OrtEpFactory*) {
  mark_callback("OrtEpFactory::GetName");
  return kEpName;
}
const char* F_GetVendor(const OrtEpFactory*) {
  mark_callback("OrtEpFactory::GetVendor");
  return "kiln";
}
uint32_t F_GetVendorId(const OrtEpFactory*) {
  mark_callback("OrtEpFactory::GetVendorId");
  return 0;  // not a hardware vendor
}
const char* F_GetVersion(const OrtEpFactory*) {
  mark_callback("OrtEpFactory::GetVersion");
  return kiln::version();
}

OrtStatus* F_GetSupportedDevices(OrtEpFactory* self, const OrtHardwareDevice* const* devices, size_t num_devices,
                                 OrtEpDevice** ep_devices, size_t max_ep_devices, size_t* num_ep_devices) {
  mark_callback("OrtEpFactory::GetSupportedDevices");
  *num_ep_devices = 0;
  return guarded([&] {
    for (size_t i = 0; i < num_devices && *num_ep_devices < max_ep_devices; ++i) {
      OrtHardwareDeviceType type = ORT_API(HardwareDevice_Type)(devices[i]);
      uint32_t vendor = ORT_API(HardwareDevice_VendorId)(devices[i]);
      bool gpu = type == OrtHardwareDeviceType_GPU && vendor == kNvidiaVendorId && cuda_built();
      if (type != OrtHardwareDeviceType_CPU && !gpu) continue;
      OrtEpDevice* d = nullptr;
      check(ORT_EP_API(CreateEpDevice)(self, devices[i], nullptr, nullptr, &d), "CreateEpDevice");
      ep_devices[(*num_ep_devices)++] = d;
    }
  });
}

/// Every session config entry (EP options arrive as "ep.<ep name>.<key>").
std::map<std::string, std::string> config_entries(const OrtSessionOptions* so) {
  OrtKeyValuePairs* kv = nullptr;
  check(ORT_API(GetSessionOptionsConfigEntries)(so, &kv), "GetSessionOptionsConfigEntries");
  const char* const* keys = nullptr;
  const char* const* values = nullptr;
  size_t n = 0;
  ORT_API(GetKeyValuePairs)(kv, &keys, &values, &n);
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < n; ++i) out[keys[i] ? keys[i] : ""] = values[i] ? values[i] : "";
  ORT_API(ReleaseKeyValuePairs)(kv);
  return out;
}

/// The device a session's EP uses: a GPU when ORT selected one (the CPU is
/// then only the host), else the CPU.
DeviceChoice choose_device(const OrtHardwareDevice* const* devices, size_t n) {
  DeviceChoice c;
  for (size_t i = 0; i < n; ++i)
    if (ORT_API(HardwareDevice_Type)(devices[i]) == OrtHardwareDeviceType_GPU) {
      CudaMatch m = cuda_ordinal(devices[i]);
      c.target = Target::cuda(m.ordinal);
      c.bus_id = m.bus_id;
      c.why = m.why;
      return c;
    }
  return c;
}

OrtStatus* F_CreateEp(OrtEpFactory*, const OrtHardwareDevice* const* devices, const OrtKeyValuePairs* const*,
                      size_t num_devices, const OrtSessionOptions* session_options, const OrtLogger* logger, OrtEp** ep) {
  mark_callback("OrtEpFactory::CreateEp");
  *ep = nullptr;
  return guarded([&] {
    EpOptions o = parse_options(config_entries(session_options), choose_device(devices, num_devices));
    *ep = new KilnEp(std::move(o), logger);
  });
}

void F_ReleaseEp(OrtEpFactory*, OrtEp* ep) {
  mark_callback("OrtEpFactory::ReleaseEp");
  delete static_cast<KilnEp*>(ep);
}

OrtStatus* F_ValidateCompiledModelCompatibilityInfo(OrtEpFactory*, const OrtHardwareDevice* const*, size_t,
                                                    const char* info, OrtCompiledModelCompatibility* out) {
  mark_callback("OrtEpFactory::ValidateCompiledModelCompatibilityInfo");
  return guarded([&] {
    std::string why = compatibility_problem(info ? info : "");
    *out = why.empty() ? OrtCompiledModelCompatibility_EP_SUPPORTED_OPTIMAL : OrtCompiledModelCompatibility_EP_UNSUPPORTED;
  });
}

OrtStatus* F_CreateAllocator(OrtEpFactory*, const OrtMemoryInfo*, const OrtKeyValuePairs*, OrtAllocator** allocator) {
  mark_callback("OrtEpFactory::CreateAllocator");
  *allocator = nullptr;  // CPU memory: ORT's own allocator
  return nullptr;
}

void F_ReleaseAllocator(OrtEpFactory*, OrtAllocator*) {}

OrtStatus* F_CreateDataTransfer(OrtEpFactory*, OrtDataTransferImpl** data_transfer) {
  mark_callback("OrtEpFactory::CreateDataTransfer");
  *data_transfer = nullptr;  // CPU memory only: nothing to copy between devices
  return nullptr;
}

bool F_IsStreamAware(const OrtEpFactory*) {
  mark_callback("OrtEpFactory::IsStreamAware");
  return false;
}

OrtStatus* F_CreateSyncStreamForDevice(OrtEpFactory*, const OrtMemoryDevice*, const OrtKeyValuePairs*,
                                       OrtSyncStreamImpl** stream) {
  *stream = nullptr;
  return nullptr;
}

Factory::Factory() : OrtEpFactory{} {
  ort_version_supported = kKilnOrtApiVersion;
  GetName = F_GetName;
  GetVendor = F_GetVendor;
  GetSupportedDevices = F_GetSupportedDevices;
  CreateEp = F_CreateEp;
  ReleaseEp = F_ReleaseEp;
  GetVendorId = F_GetVendorId;
  GetVersion = F_GetVersion;
  ValidateCompiledModelCompatibilityInfo = F_ValidateCompiledModelCompatibilityInfo;
  CreateAllocator = F_CreateAllocator;
  ReleaseAllocator = F_ReleaseAllocator;
  // Never null (ORT 1.31 crashed calling a null CreateDataTransfer).
  CreateDataTransfer = F_CreateDataTransfer;
  IsStreamAware = F_IsStreamAware;
  CreateSyncStreamForDevice = F_CreateSyncStreamForDevice;
}

}  // namespace

}  // namespace kiln::ort_ep

extern "C" {

/// Called by ORT when the library is registered: sets up the API tables of
/// the loading ORT (it must offer API version 24, i.e. ORT 1.24 or later)
/// and returns the kiln factory.
__attribute__((visibility("default"))) OrtStatus* CreateEpFactories(const char* registered_name,
                                                                     const OrtApiBase* ort_api_base,
                                                                     const OrtLogger* default_logger,
                                                                     OrtEpFactory** factories, size_t max_factories,
                                                                     size_t* num_factories) {
  using namespace kiln::ort_ep;
  *num_factories = 0;
  const OrtApi* api = ort_api_base->GetApi(kKilnOrtApiVersion);
  if (!api) return nullptr;  // older than 1.24: nothing can be reported through an API it lacks; no factory
  g_api = api;
  int major = 0, minor = 0;
  if (std::sscanf(ort_api_base->GetVersionString(), "%d.%d", &major, &minor) == 2) g_ort_version = major * 1000 + minor;
  g_ep_api = ORT_API(GetEpApi)();
  g_editor_api = ORT_API(GetModelEditorApi)();
  if (max_factories < 1) return make_status(ORT_INVALID_ARGUMENT, "kiln: ORT allows no factory");
  auto* f = new Factory();
  f->default_logger = default_logger;
  log_to(default_logger, ORT_LOGGING_LEVEL_INFO,
         fmt::format("kiln {} plugin EP registered as '{}' in ONNX Runtime {}", kiln::version(),
                     registered_name ? registered_name : "", ort_api_base->GetVersionString()));
  factories[0] = f;
  *num_factories = 1;
  return nullptr;
}

/// Called by ORT to free a factory from CreateEpFactories.
__attribute__((visibility("default"))) OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  delete static_cast<kiln::ort_ep::Factory*>(factory);
  return nullptr;
}

/// Test hook: comma-separated ORT ABI slots this header declares (and
/// callbacks kiln fills) that were not called in this process yet; "" when
/// every one was. The ABI test (ort_ep/tests) reads it through ctypes.
__attribute__((visibility("default"))) const char* KilnOrtEpUncalledSlots() {
  static thread_local std::string s;
  s = kiln::ort_ep::uncalled_slots();
  return s.c_str();
}

}  // extern "C"

#include "ort_util.h"

#include <array>
#include <atomic>
#include <mutex>
#include <set>

#include "kiln/errors.h"

namespace kiln::ort_ep {

const OrtApi* g_api = nullptr;
const OrtEpApi* g_ep_api = nullptr;
const OrtModelEditorApi* g_editor_api = nullptr;
int g_ort_version = 0;

namespace {

constexpr size_t kMaxSlots = 512;
std::array<std::atomic<bool>, kMaxSlots> g_called[3];

std::mutex g_cb_mu;
std::set<std::string>& called_callbacks() {
  static std::set<std::string> s;
  return s;
}

/// The callbacks kiln fills in OrtEpFactory, OrtEp and OrtNodeComputeInfo
/// that ORT calls in the flows the ABI test runs (members kiln leaves null
/// are not listed: ORT cannot call them; GetVendorId and CreateAllocator are
/// filled because ORT may call them, but ORT 1.24 and 1.32 call neither for
/// a CPU device that registers no allocator).
constexpr const char* kCallbacks[] = {
    "OrtEpFactory::GetName",         "OrtEpFactory::GetVendor",
    "OrtEpFactory::GetSupportedDevices", "OrtEpFactory::CreateEp",
    "OrtEpFactory::ReleaseEp",
    "OrtEpFactory::GetVersion",      "OrtEpFactory::ValidateCompiledModelCompatibilityInfo",
    "OrtEpFactory::CreateDataTransfer",
    "OrtEpFactory::IsStreamAware",   "OrtEp::GetName",
    "OrtEp::GetCapability",          "OrtEp::Compile",
    "OrtEp::ReleaseNodeComputeInfos", "OrtEp::GetCompiledModelCompatibilityInfo",
    "OrtNodeComputeInfo::CreateState", "OrtNodeComputeInfo::Compute",
    "OrtNodeComputeInfo::ReleaseState",
};

}  // namespace

void mark_slot(Table table, size_t offset) {
  size_t i = offset / sizeof(void*);
  if (i < kMaxSlots) g_called[static_cast<int>(table)][i].store(true, std::memory_order_relaxed);
}

void mark_callback(const char* name) {
  std::lock_guard<std::mutex> lock(g_cb_mu);
  called_callbacks().insert(name);
}

std::string uncalled_slots() {
  std::string out;
  auto add = [&](const char* s) { out += (out.empty() ? "" : ",") + std::string(s); };
#define KILN_ORT_CHECK_CALLED(type, field, index)                                        \
  if (!g_called[static_cast<int>(std::string_view(#type) == "OrtApi"     ? Table::api     \
                                 : std::string_view(#type) == "OrtEpApi" ? Table::ep_api  \
                                                                         : Table::editor_api)][index]) \
    add(#type "::" #field);
  KILN_ORT_API_SLOTS(KILN_ORT_CHECK_CALLED)
  KILN_ORT_EP_API_SLOTS(KILN_ORT_CHECK_CALLED)
  KILN_ORT_EDITOR_API_SLOTS(KILN_ORT_CHECK_CALLED)
#undef KILN_ORT_CHECK_CALLED
  std::lock_guard<std::mutex> lock(g_cb_mu);
  for (const char* cb : kCallbacks)
    if (!called_callbacks().count(cb)) add(cb);
  return out;
}

void check(OrtStatus* status, const char* what) {
  if (!status) return;
  OrtErrorCode code = ORT_API(GetErrorCode)(status);
  std::string msg = std::string(what) + ": " + ORT_API(GetErrorMessage)(status);
  ORT_API(ReleaseStatus)(status);
  throw OrtCallError(code, msg);
}

size_t probe_attr_size(const OrtOpAttr* a, OrtOpAttrType type) {
  size_t need = 0;
  OrtStatus* st = ORT_API(ReadOpAttr)(a, type, nullptr, 0, &need);
  if (st) {
    OrtErrorCode code = ORT_API(GetErrorCode)(st);
    std::string msg = ORT_API(GetErrorMessage)(st);
    ORT_API(ReleaseStatus)(st);
    if (need == 0 && code != ORT_INVALID_ARGUMENT) throw OrtCallError(code, "ReadOpAttr: " + msg);
  }
  return need;
}

OrtStatus* make_status(OrtErrorCode code, const std::string& message) {
  return ORT_API(CreateStatus)(code, message.c_str());
}

OrtStatus* status_from_current_exception() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    OrtErrorCode code = e.code() == ErrorCode::invalid_option ? ORT_INVALID_ARGUMENT : ORT_EP_FAIL;
    return make_status(code, std::string("kiln: ") + e.what());
  } catch (const OrtCallError& e) {
    return make_status(e.code, std::string("kiln: ") + e.what());
  } catch (const std::exception& e) {
    return make_status(ORT_EP_FAIL, std::string("kiln: internal error: ") + e.what());
  } catch (...) {
    return make_status(ORT_EP_FAIL, "kiln: internal error: unknown exception");
  }
}

void log_to(const OrtLogger* logger, OrtLoggingLevel level, const std::string& message) {
  if (!logger) return;
  OrtStatus* st = ORT_API(Logger_LogMessage)(logger, level, message.c_str(), __FILE__, __LINE__, "kiln");
  if (st) ORT_API(ReleaseStatus)(st);
}

}  // namespace kiln::ort_ep

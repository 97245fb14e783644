// Calling ORT from the kiln plugin: the function tables ORT handed over, a
// record of which declared slots were called (the ABI test reads it), and
// OrtStatus <-> C++ exception conversion at the ABI boundary.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

#include "ort_abi.h"

namespace kiln::ort_ep {

/// The tables of the ORT that loaded the plugin (set by CreateEpFactories).
extern const OrtApi* g_api;
extern const OrtEpApi* g_ep_api;
extern const OrtModelEditorApi* g_editor_api;

/// Version of the loading ORT as major * 1000 + minor (1.24.4 -> 1024).
extern int g_ort_version;

/// Which table a slot belongs to (slot_called's first argument).
enum class Table { api, ep_api, editor_api, callback };

/// Records that slot `offset` (bytes) of `table` is about to be called.
void mark_slot(Table table, size_t offset);
/// Records that ORT called kiln's callback `name` (OrtEp / OrtEpFactory /
/// OrtNodeComputeInfo members kiln fills).
void mark_callback(const char* name);
/// Comma-separated "Struct::member" of every declared slot and filled
/// callback not called yet in this process ("" when all were).
std::string uncalled_slots();

/// An ORT call returned an error status; what() is its message.
struct OrtCallError : std::runtime_error {
  OrtErrorCode code;
  OrtCallError(OrtErrorCode c, const std::string& m) : std::runtime_error(m), code(c) {}
};

/// Throws OrtCallError for a non-null status (and frees it); `what` names the call.
void check(OrtStatus* status, const char* what);

/// Bytes ReadOpAttr needs for attribute `a` read as `type`: asked with a
/// zero-length buffer, which ORT answers with an error status carrying the
/// size. A status that carries no size is a real failure (OrtCallError with
/// ORT's message).
size_t probe_attr_size(const OrtOpAttr* a, OrtOpAttrType type);

/// A new OrtStatus for returning an error to ORT.
OrtStatus* make_status(OrtErrorCode code, const std::string& message);

/// Runs `fn` and converts any exception into an OrtStatus: a kiln::Error
/// keeps its message (invalid_option -> ORT_INVALID_ARGUMENT, others
/// ORT_EP_FAIL). Nothing crosses the C ABI as an exception.
template <class F>
OrtStatus* guarded(F&& fn) noexcept;

OrtStatus* status_from_current_exception() noexcept;

template <class F>
OrtStatus* guarded(F&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (...) {
    return status_from_current_exception();
  }
}

/// Logs through an ORT logger (the session's); a null logger does nothing.
void log_to(const OrtLogger* logger, OrtLoggingLevel level, const std::string& message);

}  // namespace kiln::ort_ep

/// Calls OrtApi slot `fn`, recording the call: ORT_API(GetErrorMessage)(status).
#define ORT_API(fn) \
  (::kiln::ort_ep::mark_slot(::kiln::ort_ep::Table::api, offsetof(OrtApi, fn)), ::kiln::ort_ep::g_api->fn)
/// Calls OrtEpApi slot `fn`, recording the call.
#define ORT_EP_API(fn) \
  (::kiln::ort_ep::mark_slot(::kiln::ort_ep::Table::ep_api, offsetof(OrtEpApi, fn)), ::kiln::ort_ep::g_ep_api->fn)
/// Calls OrtModelEditorApi slot `fn`, recording the call.
#define ORT_EDITOR_API(fn)                                                                \
  (::kiln::ort_ep::mark_slot(::kiln::ort_ep::Table::editor_api, offsetof(OrtModelEditorApi, fn)), \
   ::kiln::ort_ep::g_editor_api->fn)

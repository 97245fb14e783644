#include "epcontext_reader.h"

#include <fmt/format.h>

#include <filesystem>

#include "support/error.h"
#include "support/version.h"

namespace kiln::ort_ep {

namespace fs = std::filesystem;

EpContextNode parse_epcontext(const std::string& node_name, const std::map<std::string, int64_t>& ints,
                              const std::map<std::string, std::string>& strings) {
  EpContextNode c;
  c.name = node_name;
  auto where = [&] { return fmt::format("EPContext node '{}'", node_name); };
  if (auto it = ints.find("main_context"); it != ints.end()) c.main_context = it->second;
  if (auto it = ints.find("embed_mode"); it != ints.end()) c.embed_mode = it->second;
  if (c.embed_mode != 0 && c.embed_mode != 1)
    fail(ErrorCode::invalid_model, "{}: attribute 'embed_mode' = {} (expected 0 or 1)", where(), c.embed_mode);
  if (c.main_context != 1)
    fail(ErrorCode::invalid_model, "{}: attribute 'main_context' = {}: kiln writes every partition as a main context",
         where(), c.main_context);
  auto it = strings.find("ep_cache_context");
  if (it == strings.end() || it->second.empty())
    fail(ErrorCode::invalid_model, "{}: attribute 'ep_cache_context' is missing or empty", where());
  c.cache = it->second;
  if (c.embed_mode == 0) {
    fs::path p(c.cache);
    if (p.is_absolute() || c.cache.find('\0') != std::string::npos)
      fail(ErrorCode::invalid_model, "{}: attribute 'ep_cache_context' must name a file beside the model, not '{}'",
           where(), c.cache.substr(0, 200));
    for (auto& part : p)
      if (part == "..")
        fail(ErrorCode::invalid_model, "{}: attribute 'ep_cache_context' = '{}' leaves the model's folder", where(),
             c.cache.substr(0, 200));
  }
  if (auto s = strings.find("source"); s != strings.end()) c.source = s->second;
  if (auto s = strings.find("ep_sdk_version"); s != strings.end()) c.sdk_version = s->second;
  return c;
}

void check_compat_fields(const artifact::CompatInfo& c, const std::string& want_precision, const std::string& what) {
  if (c.kiln_version != kiln::version())
    fail(ErrorCode::incompatible_artifact,
         "{}: field 'kiln_version': the artifact was compiled by kiln {}, this is kiln {}; compile the model again",
         what, c.kiln_version, kiln::version());
  if (!want_precision.empty() && c.precision != want_precision)
    fail(ErrorCode::invalid_option,
         "{}: EP option 'precision' = '{}' contradicts the artifact's field 'precision' = '{}' (it was compiled "
         "that way); set precision={} or compile again",
         what, want_precision, c.precision, c.precision);
}

}  // namespace kiln::ort_ep

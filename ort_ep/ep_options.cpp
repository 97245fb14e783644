#include "ep_options.h"

#include <fmt/format.h>

#include <set>

#include "artifact/artifact.h"
#include "support/error.h"

namespace kiln::ort_ep {

namespace {

namespace fs = std::filesystem;

std::string opt_name(const std::string& key) { return std::string(kOptionPrefix) + key; }

/// A path option: absent -> nullopt; empty -> error naming it.
std::optional<fs::path> path_option(const std::map<std::string, std::string>& kv, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end()) return std::nullopt;
  if (it->second.empty())
    fail(ErrorCode::invalid_option,
         "EP option '{}' ({}) is an empty path; give a path, or leave the option out to not use it", key, opt_name(key));
  return fs::path(it->second);
}

/// The pieces of `text` between `sep`s (empty pieces included).
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(sep, pos);
    out.push_back(text.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    pos = end == std::string::npos ? text.size() + 1 : end + 1;
  }
  return out;
}

/// "NAME=DxDx...;NAME2=..." -> input_shapes.
void parse_shapes(const std::string& text, SessionOptions& so) {
  for (const std::string& item : split(text, ';')) {
    if (item.empty()) continue;
    size_t eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      fail(ErrorCode::invalid_option, "EP option 'shapes': '{}' is not NAME=DxDx... (e.g. input=1x3x224x224)", item);
    std::vector<int64_t> dims;
    for (const std::string& num : split(item.substr(eq + 1), 'x')) {
      try {
        size_t used = 0;
        long long v = std::stoll(num, &used);
        if (used != num.size() || v < 0) throw std::invalid_argument(num);
        dims.push_back(v);
      } catch (const std::exception&) {
        fail(ErrorCode::invalid_option, "EP option 'shapes': '{}': '{}' is not a dimension (a number >= 0)", item, num);
      }
    }
    std::string name = item.substr(0, eq);
    if (!so.input_shapes.emplace(name, dims).second)
      fail(ErrorCode::invalid_option, "EP option 'shapes': input '{}' is given twice", name);
  }
}

/// "NAME=SPEC;NAME2=SPEC" -> dims (DimSpec text forms).
void parse_dims(const std::string& text, SessionOptions& so) {
  for (const std::string& item : split(text, ';')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorCode::invalid_option, "EP option 'dims': '{}' is not NAME=SPEC (e.g. batch=1,2,4,8 or seq=1..512)", item);
    std::string name = item.substr(0, eq);
    if (so.dims.count(name)) fail(ErrorCode::invalid_option, "EP option 'dims': dim '{}' is given twice", name);
    so.dims[name] = DimSpec::parse(item.substr(eq + 1), fmt::format("EP option 'dims' ('{}')", item));
  }
}

bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  fail(ErrorCode::invalid_option, "option '{}' = '{}': expected 0 or 1", key, v);
}

const std::set<std::string> kKnown = {"precision", "cache_dir",       "tuning",          "device_id",
                                      "fallback",  "shapes",          "dims",            "load_model_path",
                                      "save_model_path", "reference_nodes", "use_cache"};

}  // namespace

EpOptions parse_options(const std::map<std::string, std::string>& entries, const DeviceChoice& device) {
  const Target& target = device.target;
  EpOptions o;
  std::map<std::string, std::string> kv;
  const std::string prefix = kOptionPrefix;
  for (auto& [k, v] : entries)
    if (k.rfind(prefix, 0) == 0) {
      std::string key = k.substr(prefix.size());
      if (!kKnown.count(key))
        fail(ErrorCode::invalid_option,
             "unknown EP option '{}' ({}); the kiln EP takes: precision, cache_dir, tuning, device_id, fallback, "
             "shapes, dims, load_model_path, save_model_path, reference_nodes, use_cache",
             key, k);
      kv[key] = v;
    }
  SessionOptions& so = o.kiln;
  so.target = target;
  if (auto it = kv.find("device_id"); it != kv.end()) {
    int id = -1;
    try {
      size_t used = 0;
      id = std::stoi(it->second, &used);
      if (used != it->second.size()) id = -1;
    } catch (const std::exception&) {
    }
    if (id < 0) fail(ErrorCode::invalid_option, "EP option 'device_id' = '{}': expected a device index >= 0", it->second);
    if (target.kind == Target::Kind::cpu && id != 0)
      fail(ErrorCode::invalid_option, "EP option 'device_id' = {}: the kiln EP on the CPU device has only device 0", id);
    if (target.kind == Target::Kind::cuda) {
      // The option wins over ORT's device only when they agree: a conflict is
      // a configuration error, never a silent choice.
      if (target.device >= 0 && id != target.device)
        fail(ErrorCode::invalid_option,
             "EP option 'device_id' = {} contradicts the GPU ONNX Runtime selected for the kiln EP (PCI bus id {}), "
             "which is CUDA device {}",
             id, device.bus_id.empty() ? "unknown" : device.bus_id, target.device);
      so.target.device = id;
    }
  } else if (target.kind == Target::Kind::cuda && target.device < 0) {
    fail(ErrorCode::invalid_option,
         "cannot tell which CUDA device the GPU ONNX Runtime selected is ({}); set EP option 'device_id'", device.why);
  }
  if (auto it = kv.find("precision"); it != kv.end()) {
    try {
      so.precision = parse_precision(it->second);
    } catch (const Error&) {
      fail(ErrorCode::invalid_option, "EP option 'precision' = '{}': expected fp32, fp16 or bf16", it->second);
    }
    o.precision_given = true;
  }
  if (auto it = kv.find("tuning"); it != kv.end()) {
    try {
      so.tuning = parse_tuning(it->second);
    } catch (const Error&) {
      fail(ErrorCode::invalid_option, "EP option 'tuning' = '{}': expected heuristic, fast or exhaustive", it->second);
    }
  }
  if (auto it = kv.find("fallback"); it != kv.end()) {
    if (it->second != "host" && it->second != "error")
      fail(ErrorCode::invalid_option, "EP option 'fallback' = '{}': expected host or error", it->second);
    so.fallback = parse_fallback(it->second);
  }
  if (auto it = kv.find("reference_nodes"); it != kv.end()) {
    if (it->second != "claim" && it->second != "decline")
      fail(ErrorCode::invalid_option, "EP option 'reference_nodes' = '{}': expected decline (default) or claim",
           it->second);
    o.claim_reference = it->second == "claim";
  }
  if (auto it = kv.find("use_cache"); it != kv.end()) so.use_cache = parse_bool("use_cache", it->second);
  if (auto p = path_option(kv, "cache_dir")) so.cache_dir = *p;
  if (auto it = kv.find("shapes"); it != kv.end()) parse_shapes(it->second, so);
  if (auto it = kv.find("dims"); it != kv.end()) parse_dims(it->second, so);
  o.load_model_path = path_option(kv, "load_model_path");
  o.save_model_path = path_option(kv, "save_model_path");
  if (o.load_model_path && o.save_model_path)
    fail(ErrorCode::invalid_option,
         "EP options 'load_model_path' and 'save_model_path' are both set: a loaded artifact is never compiled, so "
         "there is nothing to save");
  // A precision that contradicts the artifact to load is the user's real
  // mistake (not that the device lacks it): said first, with both values.
  if (o.load_model_path && o.precision_given) {
    artifact::CompatInfo c = artifact::read_compat(*o.load_model_path);  // Error(io / corrupt_artifact) naming the file
    std::string want = precision_text(so.precision, so.allow_tf32);
    if (c.precision != want)
      fail(ErrorCode::invalid_option,
           "EP option 'precision' = '{}' contradicts the artifact '{}' named by 'load_model_path', which was compiled "
           "with precision '{}'; set precision={} (or leave it out) or compile the model again",
           want, o.load_model_path->string(), c.precision, c.precision);
  }
  // kiln's own checks (precision the target lacks, tuning on cpu, ...) name the field.
  try {
    so.validate();
  } catch (const Error& e) {
    fail(ErrorCode::invalid_option, "EP option: {}", e.what());
  }
  // ORT's EPContext entries.
  if (auto it = entries.find("ep.context_enable"); it != entries.end())
    o.context_enable = parse_bool("ep.context_enable", it->second);
  if (auto it = entries.find("ep.context_embed_mode"); it != entries.end())
    o.context_embed = parse_bool("ep.context_embed_mode", it->second);
  if (auto it = entries.find("ep.context_file_path"); it != entries.end()) o.context_file = it->second;
  return o;
}

std::string options_digest_text(const EpOptions& o) {
  std::string s = fmt::format("target={};precision={};tuning={};fallback={}", o.kiln.target.name(),
                              precision_name(o.kiln.precision),
                              o.kiln.tuning ? tuning_name(*o.kiln.tuning) : "default", fallback_name(o.kiln.fallback));
  for (auto& [n, d] : o.kiln.input_shapes) {
    s += ";shape:" + n + "=";
    for (auto v : d) s += std::to_string(v) + "x";
  }
  for (auto& [n, d] : o.kiln.dims) s += ";dim:" + n + "=" + d.str();
  return s;
}

}  // namespace kiln::ort_ep

#include "runtime/compile.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/cache.h"
#include "onnx/importer.h"
#include "passes/passes.h"
#include "support/hash.h"
#include "support/log.h"
#include "support/version.h"
#include "targets/host.h"
#include "targets/pipeline.h"

namespace kiln {

std::string options_text(const SessionOptions& opt) {
  std::string s = fmt::format("target={};precision={};tuning=none", opt.target.name(), precision_name(opt.precision));
  for (auto& [name, dims] : opt.input_shapes) s += fmt::format(";shape:{}={}", name, fmt::join(dims, "x"));
  return s;
}

std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt) {
  auto host = targets::host_facts(opt.target);
  Hasher128 h;
  h.field(options_text(opt));
  std::string libs;
  for (auto& [k, v] : host.library_versions) libs += k + "=" + v + ";";
  return {
      {"model_digest", model_digest},
      {"target", opt.target.name()},
      {"device_arch", host.device_arch},
      {"cpu_isa", fmt::format("{}", fmt::join(targets::required_isa(opt.target), ","))},
      {"library_versions", libs},
      {"precision", precision_name(opt.precision)},
      {"tuning", "none"},
      {"options_digest", h.hex_digest()},
      {"kiln_version", KILN_VERSION_STRING},
      {"format_version", std::to_string(artifact::kFormatVersion)},
  };
}

namespace {
std::string signature(const ir::Model& m) {
  std::string s;
  for (auto id : m.main.inputs) {
    auto& v = m.value(id);
    s += fmt::format("{}{}:{}{}", s.empty() ? "" : ";", v.name, dtype_name(v.dtype), ir::shape_str(v.shape));
  }
  return s;
}
}  // namespace

artifact::CompiledProgram compile_program(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                                          const std::string& model_digest, const std::string& cache_key,
                                          CompileResult* report) {
  Stopwatch sw;
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_file(onnx_path);
  int imported = static_cast<int>(cp.model.main.nodes.size());
  passes::bind_input_shapes(cp.model, opt.input_shapes);
  auto stats = targets::run_pipeline(cp, opt.target);

  auto fields = key_fields(model_digest, opt);
  auto host = targets::host_facts(opt.target);
  cp.compat.kiln_version = KILN_VERSION_STRING;
  cp.compat.target = opt.target.name();
  cp.compat.device_arch = host.device_arch;
  cp.compat.device_name = host.device_name;
  cp.compat.cpu_isa = targets::required_isa(opt.target);
  cp.compat.library_versions = host.library_versions;
  cp.compat.precision = precision_name(opt.precision);
  cp.compat.tuning = "none";
  for (auto& [k, v] : fields)
    if (k == "options_digest") cp.compat.options_digest = v;
  cp.compat.model_digest = model_digest;
  cp.compat.input_signature = signature(cp.model);
  cp.compat.cache_key = cache_key;

  nlohmann::json meta = {
      {"model_file", onnx_path.filename().string()},  // a name, never an absolute path
      {"producer", cp.model.producer},
      {"opset", cp.model.opset},
      {"options", options_text(opt)},
      {"nodes_imported", imported},
      {"nodes_compiled", cp.model.main.nodes.size()},
      {"nodes_folded", stats.folded},
      {"nodes_dead", stats.dead},
      {"arena_bytes", cp.plan.arena_bytes},
      {"naive_bytes", cp.plan.naive_bytes},
  };
  cp.metadata_json = meta.dump();
  if (report) {
    report->compile_ms = sw.ms();
    report->nodes_imported = imported;
    report->nodes_compiled = static_cast<int>(cp.model.main.nodes.size());
    report->nodes_folded = stats.folded;
    report->arena_bytes = cp.plan.arena_bytes;
    report->naive_bytes = cp.plan.naive_bytes;
    report->model_digest = model_digest;
    report->cache_key = cache_key;
  }
  log().info("compiled '{}' for {} in {:.1f} ms ({} nodes -> {})", onnx_path.string(), opt.target.name(), sw.ms(),
             imported, cp.model.main.nodes.size());
  return cp;
}

CompileResult compile(const std::filesystem::path& onnx_path, const std::filesystem::path& out, const SessionOptions& opt) {
  opt.validate();
  CompileResult r;
  std::string digest = onnx_import::model_digest(onnx_path);
  std::string key = cache::derive_key(key_fields(digest, opt));
  auto cp = compile_program(onnx_path, opt, digest, key, &r);
  Stopwatch sw;
  artifact::write_file(out, cp);
  r.write_ms = sw.ms();
  std::error_code ec;
  r.artifact_bytes = std::filesystem::file_size(out, ec);
  return r;
}

}  // namespace kiln

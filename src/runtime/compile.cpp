#include "runtime/compile.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/cache.h"
#include "cache/model_digest.h"
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

artifact::CompatInfo build_facts(const Target& target) {
  artifact::CompatInfo host = targets::host_facts(target);
  artifact::CompatInfo f;
  f.kiln_version = KILN_VERSION_STRING;
  f.format_version = artifact::kFormatVersion;
  f.target = target.name();
  f.device_arch = host.device_arch;
  f.device_name = host.device_name;
  f.cpu_isa = targets::required_isa(target);
  f.library_versions = host.library_versions;
  return f;
}

artifact::CompatInfo request_compat(const std::string& model_digest, const SessionOptions& opt,
                                    const artifact::CompatInfo& facts) {
  artifact::CompatInfo c = facts;
  c.target = opt.target.name();
  c.precision = precision_name(opt.precision);
  c.tuning = "none";
  Hasher128 h;
  h.field(options_text(opt));
  c.options_digest = h.hex_digest();
  c.model_digest = model_digest;
  c.input_signature.clear();
  c.cache_key.clear();
  return c;
}

std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt,
                                                            const artifact::CompatInfo& facts) {
  return cache::key_fields(request_compat(model_digest, opt, facts));
}

std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt) {
  return key_fields(model_digest, opt, build_facts(opt.target));
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
                                          const artifact::CompatInfo& request, const std::string& cache_key,
                                          CompileResult* report) {
  Stopwatch sw;
  artifact::CompiledProgram cp;
  cp.model = onnx_import::import_file(onnx_path);
  int imported = static_cast<int>(cp.model.main.nodes.size());
  passes::bind_input_shapes(cp.model, opt.input_shapes);
  auto stats = targets::run_pipeline(cp, opt.target);

  cp.compat = request;
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
    report->model_digest = request.model_digest;
    report->cache_key = cache_key;
  }
  log().info("compiled '{}' for {} in {:.1f} ms ({} nodes -> {})", onnx_path.string(), opt.target.name(), sw.ms(),
             imported, cp.model.main.nodes.size());
  return cp;
}

CompileResult compile(const std::filesystem::path& onnx_path, const std::filesystem::path& out, const SessionOptions& opt) {
  opt.validate();
  CompileResult r;
  auto request = request_compat(cache::digest_model(onnx_path).digest, opt, build_facts(opt.target));
  std::string key = cache::derive_key(cache::key_fields(request));
  auto cp = compile_program(onnx_path, opt, request, key, &r);
  Stopwatch sw;
  artifact::write_file(out, cp);
  r.write_ms = sw.ms();
  std::error_code ec;
  r.artifact_bytes = std::filesystem::file_size(out, ec);
  return r;
}

}  // namespace kiln

// Session from an .onnx file: cache lookup, compile on a miss, publish.
#include <fmt/format.h>

#include "cache/cache.h"
#include "onnx/importer.h"
#include "runtime/compile.h"
#include "runtime/session_internal.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/host.h"

namespace kiln {

namespace {

/// Tries the cache entry; returns null (with a note) when it must be rebuilt.
std::shared_ptr<const Program> try_entry(const cache::Cache& c, const std::string& key, const SessionOptions& opt,
                                         SessionStats& st) {
  auto path = c.entry_path(key);
  try {
    artifact::CompatInfo compat = artifact::read_compat(path);
    std::string why;
    for (auto& m : targets::check_runnable(compat, opt.target)) why += (why.empty() ? "" : "; ") + m.str();
    if (compat.cache_key != key) why += (why.empty() ? "" : "; ") + fmt::format("cache_key: the entry says '{}'", compat.cache_key);
    if (!why.empty()) {
      if (opt.cache_mismatch == MismatchPolicy::error)
        fail(ErrorCode::incompatible_artifact, "cache entry '{}' does not match: {}", path.string(), why);
      st.notes.push_back(fmt::format("cache entry '{}' does not match ({}); recompiling", path.string(), why));
      return nullptr;
    }
    return std::make_shared<const Program>(artifact::read_file(path));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::corrupt_artifact || opt.cache_mismatch == MismatchPolicy::error) throw;
    bool moved = c.quarantine(key);
    st.notes.push_back(fmt::format("cache entry '{}' is damaged ({}); {}recompiling", path.string(), e.what(),
                                   moved ? "moved it aside to .bad and " : ""));
    return nullptr;
  }
}

}  // namespace

Session::Session(const std::filesystem::path& onnx_path, const SessionOptions& opt) {
  opt.validate();
  Stopwatch total;
  std::string digest = onnx_import::model_digest(onnx_path);
  std::string key = cache::derive_key(key_fields(digest, opt));
  std::optional<cache::Cache> c;
  if (opt.use_cache) c.emplace(opt.cache_dir ? *opt.cache_dir : default_cache_dir());

  if (c && c->contains(key)) {
    Stopwatch sw;
    if (auto p = try_entry(*c, key, opt, stats_)) {
      program_ = std::move(p);
      stats_.cache = SessionStats::Cache::hit;
      stats_.load_ms = sw.ms();
      stats_.artifact_path = c->entry_path(key).string();
      for (auto& n : stats_.notes) log().info("{}", n);
      return;
    }
  }

  CompileResult report;
  auto cp = compile_program(onnx_path, opt, digest, c ? key : "", &report);
  stats_.compile_ms = report.compile_ms;
  stats_.cache = SessionStats::Cache::none;
  if (c) {
    std::string why;
    if (!c->writable(&why)) {
      stats_.notes.push_back(fmt::format("cache directory '{}' is not writable ({}): compiled in memory, nothing cached",
                                         c->dir().string(), why));
    } else {
      try {
        c->publish(key, cp);
        stats_.cache = SessionStats::Cache::miss;
        stats_.artifact_path = c->entry_path(key).string();
      } catch (const Error& e) {
        stats_.notes.push_back(fmt::format("could not write the cache entry: {}; compiled in memory, nothing cached", e.what()));
      }
    }
  }
  Stopwatch sw;
  program_ = std::make_shared<const Program>(std::move(cp));
  stats_.load_ms = sw.ms();
  for (auto& n : stats_.notes) log().info("{}", n);
}

}  // namespace kiln

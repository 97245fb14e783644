// kiln cache ls|verify|gc|clear|explain (docs/cache.md, "Maintenance").
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <set>

#include "artifact/artifact.h"
#include "cache/cache.h"
#include "cache/dir.h"
#include "cache/explain.h"
#include "cache/maintenance.h"
#include "cache/model_digest.h"
#include "cli.h"
#include "runtime/compile.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/host.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

struct CacheArgs {
  std::string cache_dir, max_size = "2GiB", model, target = "cpu";
  std::vector<std::string> shapes, dims;
  CodegenArgs codegen;
  PrecisionArgs precision;
  bool cache_dir_given = false;
  size_t limit = 3;
};

fs::path resolve_dir(const CacheArgs& a) {
  if (!a.cache_dir_given) return default_cache_dir();
  if (a.cache_dir.empty()) fail(ErrorCode::invalid_option, "--cache-dir: the cache directory path is empty");
  return a.cache_dir;
}

const char* kind_name(cache::FileKind k) {
  switch (k) {
    case cache::FileKind::entry: return "entry";
    case cache::FileKind::quarantined: return "quarantined";
    case cache::FileKind::temporary: return "temporary";
    case cache::FileKind::lock: return "lock";
    case cache::FileKind::partition: return "partition";
  }
  return "?";
}

std::string iso_time(int64_t ns) {
  std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string age(int64_t ns) {
  auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  int64_t s = std::max<int64_t>(0, now.count() - ns / 1000000000);
  if (s < 120) return fmt::format("{} s ago", s);
  if (s < 7200) return fmt::format("{} min ago", s / 60);
  if (s < 172800) return fmt::format("{} h ago", s / 3600);
  return fmt::format("{} days ago", s / 86400);
}

const char* access_name(cache::DirAccess a) {
  switch (a) {
    case cache::DirAccess::read_write: return "read_write";
    case cache::DirAccess::read_only: return "read_only";
    case cache::DirAccess::unusable: return "missing";
    case cache::DirAccess::untrusted: return "untrusted";
  }
  return "?";
}

/// The directory's state, and a line on stderr when kiln run would not use
/// it as is (maintenance still works on it).
cache::DirState describe_dir(const fs::path& dir) {
  auto st = cache::open_dir(dir, /*trust=*/false, /*create=*/false);
  if (st.access == cache::DirAccess::untrusted)
    std::fprintf(stderr, "kiln: note: '%s' is not trusted (%s): kiln run will not load from it without --trust-cache-dir\n",
                 dir.c_str(), st.why.c_str());
  else if (st.access == cache::DirAccess::read_only)
    std::fprintf(stderr, "kiln: note: '%s' is read-only (%s): nothing can be removed\n", dir.c_str(), st.why.c_str());
  return st;
}

json file_json(const cache::CacheFile& f) {
  json j = {{"kind", kind_name(f.kind)}, {"key", f.key}, {"file", f.path.string()}, {"bytes", f.bytes},
            {"mtime", iso_time(f.mtime_ns)}};
  if (f.kind == cache::FileKind::temporary) j["pid"] = f.pid;
  return j;
}

// The model a compiled entry came from: its metadata's file name (the
// compatibility block holds only the digest).
std::string model_name(const fs::path& entry) {
  try {
    auto meta = json::parse(artifact::read_file(entry).metadata_json);
    return meta.value("model_file", "");
  } catch (const std::exception&) {
    return "";
  }
}

void ls(const CacheArgs& a, bool as_json) {
  fs::path dir = resolve_dir(a);
  auto st = describe_dir(dir);
  auto entries = cache::list_entries(dir);
  std::sort(entries.begin(), entries.end(),
            [](const cache::EntryInfo& x, const cache::EntryInfo& y) { return x.file.mtime_ns > y.file.mtime_ns; });
  uint64_t total = 0;
  json list = json::array(), others = json::array();
  for (auto& e : entries) {
    total += e.file.bytes;
    json j = {{"key", e.file.key}, {"file", e.file.path.string()}, {"model", model_name(e.file.path)},
              {"bytes", e.file.bytes}, {"last_use", iso_time(e.file.mtime_ns)},
              {"last_use_ns", e.file.mtime_ns}};
    if (e.compat) {
      j["target"] = e.compat->target;
      j["precision"] = e.compat->precision;
      j["model_digest"] = e.compat->model_digest;
      j["input_signature"] = e.compat->input_signature;
      j["kiln_version"] = e.compat->kiln_version;
    } else {
      j["error"] = e.error;
    }
    list.push_back(j);
  }
  for (auto& f : cache::scan_dir(dir))
    if (f.kind != cache::FileKind::entry) {
      others.push_back(file_json(f));
      if (f.kind == cache::FileKind::quarantined || f.kind == cache::FileKind::partition) total += f.bytes;
    }
  if (as_json) {
    print_json({{"cache_dir", dir.string()}, {"access", access_name(st.access)}, {"entries", list},
                {"other_files", others}, {"total_bytes", total}});
    return;
  }
  std::printf("%s: %zu entries, %s (%s)\n", dir.c_str(), entries.size(), cache::format_size(total).c_str(),
              access_name(st.access));
  if (!entries.empty())
    std::printf("  %-12s %-24s %-6s %-9s %10s  %s\n", "key", "model", "target", "precision", "size", "last use");
  for (auto& j : list)
    std::printf("  %-12s %-24s %-6s %-9s %10s  %s\n", j["key"].get<std::string>().substr(0, 12).c_str(),
                j["model"].get<std::string>().c_str(), j.value("target", "?").c_str(),
                j.value("precision", "?").c_str(), cache::format_size(j["bytes"].get<uint64_t>()).c_str(),
                j.contains("error") ? ("unreadable: " + j["error"].get<std::string>()).c_str()
                                    : (j["last_use"].get<std::string>() + " (" + age(j["last_use_ns"]) + ")").c_str());
  for (auto& o : others)
    std::printf("  (%s) %s %s\n", o["kind"].get<std::string>().c_str(), o["file"].get<std::string>().c_str(),
                cache::format_size(o["bytes"].get<uint64_t>()).c_str());
}

void verify(const CacheArgs& a, bool as_json) {
  fs::path dir = resolve_dir(a);
  describe_dir(dir);
  auto results = cache::verify_entries(dir);
  int bad = 0;
  json list = json::array();
  for (auto& r : results) {
    bad += !r.ok;
    list.push_back({{"key", r.file.key},
                    {"file", r.file.path.string()},
                    {"ok", r.ok},
                    {"problem", r.problem},
                    {"note", r.note}});
  }
  json others = json::array();
  for (auto& f : cache::scan_dir(dir))
    if (f.kind == cache::FileKind::temporary || f.kind == cache::FileKind::quarantined) others.push_back(file_json(f));
  if (as_json) {
    print_json({{"cache_dir", dir.string()}, {"entries", list}, {"ok", static_cast<int>(results.size()) - bad},
                {"damaged", bad}, {"other_files", others}});
  } else {
    std::printf("%s: %zu entries verified, %zu ok, %d damaged\n", dir.c_str(), results.size(), results.size() - bad,
                bad);
    for (auto& r : results)
      if (!r.ok) std::printf("  DAMAGED %s: %s\n", r.file.path.c_str(), r.problem.c_str());
      else if (!r.note.empty()) std::printf("  ok %s: %s\n", r.file.path.c_str(), r.note.c_str());
    for (auto& o : others)
      std::printf("  (%s, not an entry: gc removes it) %s\n", o["kind"].get<std::string>().c_str(),
                  o["file"].get<std::string>().c_str());
  }
  if (bad) throw Exit{static_cast<int>(ErrorCode::corrupt_artifact)};
}

void print_gc(const fs::path& dir, const cache::GcReport& r, const json& extra, bool as_json) {
  json removed = json::array(), busy = json::array();
  for (auto& f : r.removed) removed.push_back(file_json(f));
  for (auto& f : r.kept_busy) busy.push_back(file_json(f));
  if (as_json) {
    json j = {{"cache_dir", dir.string()}, {"bytes_before", r.bytes_before}, {"bytes_after", r.bytes_after},
              {"removed", removed}, {"kept_busy", busy}, {"memos_removed", r.memos_removed}};
    j.update(extra);
    print_json(j);
    return;
  }
  std::printf("%s: %s -> %s, removed %zu file(s)\n", dir.c_str(), cache::format_size(r.bytes_before).c_str(),
              cache::format_size(r.bytes_after).c_str(), r.removed.size());
  for (auto& f : r.removed)
    std::printf("  removed (%s) %s %s\n", kind_name(f.kind), f.path.c_str(), cache::format_size(f.bytes).c_str());
  for (auto& f : r.kept_busy) std::printf("  kept (%s, in use) %s\n", kind_name(f.kind), f.path.c_str());
}

void gc(const CacheArgs& a, bool as_json) {
  fs::path dir = resolve_dir(a);
  describe_dir(dir);
  uint64_t cap = cache::parse_size(a.max_size, "--max-size");
  print_gc(dir, cache::gc(dir, cap), {{"max_bytes", cap}}, as_json);
}

void clear(const CacheArgs& a, bool as_json) {
  fs::path dir = resolve_dir(a);
  describe_dir(dir);
  print_gc(dir, cache::clear(dir), json::object(), as_json);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (;;) {
    size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next - pos));
    if (next == std::string::npos) return out;
    pos = next + 1;
  }
}

// Option items ("shape:x=2x4") present on one side only.
json options_diff(const std::string& entry, const std::string& request) {
  auto e = split(entry, ';'), r = split(request, ';');
  std::set<std::string> es(e.begin(), e.end()), rs(r.begin(), r.end());
  json only_entry = json::array(), only_request = json::array();
  for (auto& x : e)
    if (!rs.count(x)) only_entry.push_back(x);
  for (auto& x : r)
    if (!es.count(x)) only_request.push_back(x);
  return {{"entry_only", only_entry}, {"request_only", only_request}};
}

void explain_cmd(const CacheArgs& a, bool as_json) {
  fs::path dir = resolve_dir(a);
  SessionOptions opt;
  opt.target = Target::parse(a.target);
  apply_precision(a.precision, opt);
  parse_shapes(a.shapes, opt);
  parse_dims(a.dims, opt);
  apply_codegen(a.codegen, opt);
  opt.validate();
  Stopwatch digest_sw;
  auto md = cache::digest_model(a.model, cache::Cache(dir).memo_dir(), /*write_memo=*/false);
  double digest_ms = digest_sw.ms();
  auto request = request_compat(md.digest, opt, build_facts(opt));
  auto ex = cache::explain(dir, request, a.limit);
  cache::Cache c(dir);

  // The request's own entry: would it load?
  std::string status = "miss";
  std::vector<std::string> problems;
  if (ex.entry_exists) {
    try {
      auto cp = artifact::read_file(c.entry_path(ex.key));
      for (auto& m : targets::check_runnable(cp.compat, opt.target)) problems.push_back(m.str());
      if (cp.compat.cache_key != ex.key) problems.push_back("cache_key: the entry says '" + cp.compat.cache_key + "'");
      status = problems.empty() ? "hit" : "mismatch";
    } catch (const Error& e) {
      status = "damaged";
      problems.push_back(e.what());
    }
  }
  std::string req_options = options_text(opt);
  json nearest = json::array();
  for (auto& cand : ex.nearest) {
    json diffs = json::array();
    for (auto& d : cand.diffs) diffs.push_back({{"field", d.field}, {"entry", d.entry}, {"request", d.request}});
    json j = {{"key", cand.entry.file.key}, {"file", cand.entry.file.path.string()},
              {"last_use", iso_time(cand.entry.file.mtime_ns)}, {"differs", diffs}};
    if (!cand.options.empty())
      j["options"] = {{"entry", cand.options}, {"request", req_options},
                      {"diff", options_diff(cand.options, req_options)}};
    nearest.push_back(j);
  }
  if (as_json) {
    print_json({{"model", a.model}, {"cache_dir", dir.string()}, {"key", ex.key}, {"status", status},
                {"entry", ex.entry_exists ? json(c.entry_path(ex.key).string()) : json(nullptr)},
                {"problems", problems}, {"entries", ex.entries}, {"nearest", nearest}, {"digest_ms", digest_ms},
                {"digest_bytes", md.bytes_hashed}, {"digest_from_memo", md.from_memo}});
    return;
  }
  std::printf("%s: %s (key %s) in %s, %d entries\n", a.model.c_str(), status.c_str(), ex.key.c_str(), dir.c_str(),
              ex.entries);
  for (auto& p : problems) std::printf("  the entry cannot be used: %s\n", p.c_str());
  if (status == "hit") return;
  if (nearest.empty()) std::printf("  no other entry to compare with\n");
  for (auto& n : nearest) {
    std::printf("  nearest: %s (last use %s): %zu field(s) differ\n", n["file"].get<std::string>().c_str(),
                n["last_use"].get<std::string>().c_str(), n["differs"].size());
    for (auto& d : n["differs"])
      std::printf("    %-17s entry '%s', this request '%s'\n", (d["field"].get<std::string>() + ":").c_str(),
                  d["entry"].get<std::string>().c_str(), d["request"].get<std::string>().c_str());
    if (n.contains("options")) {
      auto& od = n["options"]["diff"];
      std::printf("    options only in the entry: %s; only in this request: %s\n", json_text(od["entry_only"]).c_str(),
                  json_text(od["request_only"]).c_str());
    }
  }
}

}  // namespace

void add_cache(CLI::App& app, Common& common) {
  auto* cache_cmd = app.add_subcommand(
      "cache",
      "Inspect and maintain the compiled-program cache: ls, verify, gc, clear, explain (docs/cache.md).");
  cache_cmd->require_subcommand(1);
  auto add = [&](const char* name, const char* help, void (*fn)(const CacheArgs&, bool)) {
    auto a = std::make_shared<CacheArgs>();
    auto* sub = cache_cmd->add_subcommand(name, help);
    sub->add_option("--cache-dir", a->cache_dir, "Cache directory (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)")
        ->each([a](const std::string&) { a->cache_dir_given = true; });
    sub->add_flag("--json", common.json, "Print one JSON object on stdout");
    sub->callback([a, fn, &common] { fn(*a, common.json); });
    return std::make_pair(sub, a);
  };
  add("ls", "List entries: model, target, precision, size, last use (reads only compatibility blocks and metadata).",
      ls);
  add("verify",
      "Read every entry with every checksum. Exit 0 when all are whole, 7 when any is damaged (the next run that "
      "needs it moves it aside and recompiles).",
      verify);
  auto [gc_cmd, gc_args] = add("gc",
                               "Evict least recently used entries down to --max-size (damaged entries moved aside go "
                               "first); remove temporary and lock files left by killed processes.",
                               gc);
  gc_cmd->add_option("--max-size", gc_args->max_size, "Size cap: 2GiB, 500MB, 1.5G or bytes; 0 = no cap")->capture_default_str();
  add("clear", "Remove every entry (a compile in progress in another process is left alone).", clear);
  auto [ex_cmd, ex_args] = add(
      "explain",
      "Why does MODEL miss the cache? Shows the key it needs and the nearest existing entries with the fields in "
      "which each differs (and, for options, which ones).",
      explain_cmd);
  ex_cmd->add_option("model", ex_args->model, "ONNX model (.onnx)")->required()->check(non_empty_path());
  ex_cmd->add_option("--target", ex_args->target, "cpu, ref or cuda[:N], as given to kiln run")->capture_default_str();
  ex_cmd->add_option("--shape", ex_args->shapes, "NAME=DxDx..., as given to kiln run (repeatable)");
  add_precision_flags(ex_cmd, ex_args->precision);
  ex_cmd->add_option("--dim", ex_args->dims, "NAME=SPEC shape buckets, as given to kiln run (repeatable)");
  add_codegen_options(ex_cmd, ex_args->codegen);
  ex_cmd->add_option("--limit", ex_args->limit, "How many nearest entries to show")->capture_default_str();
}

}  // namespace kiln::cli

// Session from an .onnx file: cache lookup, compile on a miss (once across
// processes, under the key's lock), publish, eviction (docs/cache.md).
#include <sys/stat.h>

#include <fmt/format.h>

#include "cache/cache.h"
#include "cache/dir.h"
#include "cache/lock.h"
#include "cache/maintenance.h"
#include "cache/model_digest.h"
#include "runtime/compile.h"
#include "runtime/session_internal.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/host.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

/// Every note goes to stats, to opt.on_note at once, and to the info log.
struct Notes {
  SessionStats& st;
  const SessionOptions& opt;
  void add(std::string n) {
    log().info("{}", n);
    if (opt.on_note) opt.on_note(n);
    st.notes.push_back(std::move(n));
  }
};

/// What a look at the cache entry found.
struct Lookup {
  enum class Verdict { hit, absent, mismatch, damaged, unreadable };
  Verdict verdict = Verdict::absent;
  std::shared_ptr<const Program> program;
  std::string why;
  ino_t ino = 0;  ///< the entry file examined (to tell whether it was replaced since)
  dev_t dev = 0;
};

/// Identity of the file at the entry path now; {0,0} when there is none.
std::pair<ino_t, dev_t> entry_identity(const cache::Cache& c, const std::string& key) {
  struct stat st{};
  if (::stat(c.entry_path(key).c_str(), &st) != 0) return {0, 0};
  return {st.st_ino, st.st_dev};
}

/// Examines and, when it matches, loads the entry. With policy error a
/// mismatch or damage throws; otherwise the verdict says why it must be rebuilt.
Lookup try_entry(const cache::Cache& c, const std::string& key, const SessionOptions& opt) {
  using V = Lookup::Verdict;
  Lookup r;
  fs::path path = c.entry_path(key);
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return r;
  r.ino = st.st_ino;
  r.dev = st.st_dev;
  auto refuse = [&](V v, ErrorCode code, std::string why) {
    if (opt.cache_mismatch == MismatchPolicy::error)
      fail(code, "cache entry '{}' cannot be used: {}", path.string(), why);
    r.verdict = v;
    r.why = std::move(why);
    return r;
  };
  if (!opt.trust_cache_dir)
    if (auto why = cache::ownership_problem(st); !why.empty())
      return refuse(V::mismatch, ErrorCode::incompatible_artifact, "the entry file is not safe to load: " + why);
  try {
    artifact::CompatInfo compat = artifact::read_compat(path);
    std::string why;
    for (auto& m : targets::check_runnable(compat, opt.target)) why += (why.empty() ? "" : "; ") + m.str();
    if (compat.cache_key != key)
      why += (why.empty() ? "" : "; ") + fmt::format("cache_key: the entry says '{}'", compat.cache_key);
    if (!why.empty()) return refuse(V::mismatch, ErrorCode::incompatible_artifact, why);
    r.program = std::make_shared<const Program>(artifact::read_file(path), opt.target.device);
    r.verdict = V::hit;
    return r;
  } catch (const Error& e) {
    if (opt.cache_mismatch == MismatchPolicy::error) throw;
    if (e.code() == ErrorCode::io && !fs::exists(path)) return Lookup{};  // evicted meanwhile
    r.verdict = e.code() == ErrorCode::corrupt_artifact ? V::damaged
                : e.code() == ErrorCode::io             ? V::unreadable
                                                        : V::mismatch;
    r.why = e.what();
    return r;
  }
}

/// Compiles without the cache (no cache, or a directory kiln may not use).
std::shared_ptr<const Program> compile_in_memory(const fs::path& onnx, const SessionOptions& opt,
                                                 const artifact::CompatInfo& request, SessionStats& st) {
  CompileResult rep;
  auto cp = compile_program(onnx, opt, request, "", &rep);
  st.compile_ms = rep.compile_ms;
  st.cache = SessionStats::Cache::none;
  Stopwatch sw;
  auto p = std::make_shared<const Program>(std::move(cp), opt.target.device);
  st.load_ms = sw.ms();
  return p;
}

bool model_changed(const std::vector<cache::FileStamp>& files) {
  for (auto& f : files) {
    try {
      if (cache::stamp_file(f.path) != f) return true;
    } catch (const Error&) {
      return true;
    }
  }
  return false;
}

std::string rebuild_note(const Lookup& l, const fs::path& path, bool moved_aside) {
  switch (l.verdict) {
    case Lookup::Verdict::damaged:
      return fmt::format("cache entry '{}' is damaged ({}); {}recompiling", path.string(), l.why,
                         moved_aside ? "moved it aside to .bad and " : "");
    case Lookup::Verdict::unreadable:
      return fmt::format("cache entry '{}' cannot be read ({}); recompiling", path.string(), l.why);
    default:
      return fmt::format("cache entry '{}' does not match ({}); recompiling", path.string(), l.why);
  }
}

}  // namespace

std::shared_ptr<const Program> obtain_program(const fs::path& onnx_path, const SessionOptions& opt,
                                              const artifact::CompatInfo& facts, SessionStats& st) {
  Notes notes{st, opt};
  if (!opt.use_cache)
    return compile_in_memory(onnx_path, opt, request_compat(cache::digest_model(onnx_path).digest, opt, facts), st);

  cache::Cache c(opt.cache_dir ? *opt.cache_dir : default_cache_dir());
  cache::DirState dir = cache::open_dir(c.dir(), opt.trust_cache_dir, /*create=*/true);
  if (dir.access == cache::DirAccess::untrusted || dir.access == cache::DirAccess::unusable) {
    if (dir.access == cache::DirAccess::untrusted)
      notes.add(fmt::format(
          "cache directory '{}' is not used: {}, so another user could plant a program in it. Fix it (chmod go-w, "
          "chown) or, if you trust it, pass --trust-cache-dir (SessionOptions::trust_cache_dir); compiled in memory, "
          "nothing cached",
          c.dir().string(), dir.why));
    else
      notes.add(fmt::format("cache directory '{}' is not writable ({}): compiled in memory, nothing cached",
                            c.dir().string(), dir.why));
    return compile_in_memory(onnx_path, opt, request_compat(cache::digest_model(onnx_path).digest, opt, facts), st);
  }
  const bool writable = dir.access == cache::DirAccess::read_write;
  if (!writable)
    notes.add(fmt::format("cache directory '{}' is read-only ({}): entries are loaded from it, nothing is written "
                          "(no new entries, no last-use times)",
                          c.dir().string(), dir.why));

  cache::ModelDigest md = cache::digest_model(onnx_path, c.memo_dir(), writable);
  artifact::CompatInfo request = request_compat(md.digest, opt, facts);
  std::string key = cache::derive_key(cache::key_fields(request));
  auto hit = [&](Lookup& l, const Stopwatch& sw) {
    st.cache = SessionStats::Cache::hit;
    st.load_ms = sw.ms();
    st.artifact_path = c.entry_path(key).string();
    if (writable) c.touch(key);
    return std::move(l.program);
  };

  Stopwatch sw;
  Lookup found = try_entry(c, key, opt);
  if (found.verdict == Lookup::Verdict::hit) return hit(found, sw);
  if (!writable) {
    if (found.verdict != Lookup::Verdict::absent) notes.add(rebuild_note(found, c.entry_path(key), false));
    return compile_in_memory(onnx_path, opt, request, st);
  }

  // Compile once across processes: the first one takes the key's lock, the
  // others wait for it and then load what it published.
  std::string lock_problem;
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(opt.cache_lock_timeout_s * 1000));
  cache::KeyLock lock = cache::KeyLock::acquire(
      c.lock_path(key), timeout,
      [&] {
        notes.add(fmt::format("waiting for another process that is compiling this model (lock '{}')",
                              c.lock_path(key).string()));
      },
      &lock_problem);
  if (!lock.held()) notes.add(fmt::format("compiling without the cache lock: {}", lock_problem));
  if (lock.waited() && lock.held())
    notes.add(fmt::format("waited {:.0f} ms for the other process", lock.waited_ms()));
  if (entry_identity(c, key) != std::pair{found.ino, found.dev}) {
    Stopwatch sw2;
    found = try_entry(c, key, opt);  // published or replaced while we waited
    if (found.verdict == Lookup::Verdict::hit) return hit(found, sw2);
  }
  if (found.verdict != Lookup::Verdict::absent) {
    // Under the lock no publisher can swap the file, so this moves exactly
    // the damaged file aside.
    bool moved = found.verdict == Lookup::Verdict::damaged && c.quarantine(key);
    notes.add(rebuild_note(found, c.entry_path(key), moved));
  }

  CompileResult rep;
  auto cp = compile_program(onnx_path, opt, request, key, &rep);
  st.compile_ms = rep.compile_ms;
  st.cache = SessionStats::Cache::none;
  if (model_changed(md.files)) {
    notes.add(fmt::format("'{}' changed while it was being compiled: the program is used but not cached",
                          onnx_path.string()));
  } else {
    try {
      c.publish(key, cp);
      st.cache = SessionStats::Cache::miss;
      st.artifact_path = c.entry_path(key).string();
    } catch (const Error& e) {
      notes.add(fmt::format("could not write the cache entry: {}; compiled in memory, nothing cached", e.what()));
    }
  }
  lock.release();
  if (st.cache == SessionStats::Cache::miss && opt.cache_max_bytes > 0) {
    cache::GcReport gc = cache::gc(c.dir(), opt.cache_max_bytes, key);
    int evicted = 0;
    uint64_t bytes = 0;
    for (auto& f : gc.removed)
      if (f.kind == cache::FileKind::entry || f.kind == cache::FileKind::quarantined) {
        ++evicted;
        bytes += f.bytes;
      }
    if (evicted)
      notes.add(fmt::format("evicted {} least recently used cache file(s), {}, to stay under the {} cap", evicted,
                            cache::format_size(bytes), cache::format_size(opt.cache_max_bytes)));
  }
  Stopwatch sw3;
  auto program = std::make_shared<const Program>(std::move(cp), opt.target.device);
  st.load_ms = sw3.ms();
  return program;
}

Session::Session(const fs::path& onnx_path, const SessionOptions& opt) {
  opt.validate();
  program_ = obtain_program(onnx_path, opt, build_facts(opt.target), stats_);
}

}  // namespace kiln

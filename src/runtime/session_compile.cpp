// Session from an .onnx file: cache lookup, compile on a miss (once across
// processes, under the key's lock), publish, eviction (docs/cache.md).
#include <sys/stat.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

#include "artifact/entry.h"
#include "cache/cache.h"
#include "cache/dir.h"
#include "cache/lock.h"
#include "cache/maintenance.h"
#include "cache/model_digest.h"
#include "targets/kernels.h"
#include "runtime/bucket_plan.h"
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
  std::shared_ptr<const ProgramSet> program;
  std::string why;
  std::string note;  ///< hit: why part of the entry was ignored (a torn append), or ""
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
Lookup try_entry(const cache::Cache& c, const std::string& key, const SessionOptions& opt,
                 const ProgramSet::Grow& grow) {
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
    // The key covers the precision; an entry whose block says other math
    // (TF32, 16-bit) than the request is never run in its place.
    if (std::string want = precision_text(opt.precision, opt.allow_tf32); compat.precision != want)
      why += (why.empty() ? "" : "; ") +
             fmt::format("precision: the entry was compiled for '{}', the request is '{}'", compat.precision, want);
    if (compat.cache_key != key)
      why += (why.empty() ? "" : "; ") + fmt::format("cache_key: the entry says '{}'", compat.cache_key);
    if (!why.empty()) return refuse(V::mismatch, ErrorCode::incompatible_artifact, why);
    artifact::EntryRead entry = artifact::read_entry(path);
    if (!entry.ignored.empty())
      r.note = fmt::format("cache entry '{}': {}: ignored (a program append that did not complete); the {} "
                           "program(s) before it are used, and a program it held is compiled again when a run needs it",
                           path.string(), entry.ignored, entry.program.more.size() + 1);
    r.program = std::make_shared<const ProgramSet>(std::move(entry.program), grow, opt.out_of_bucket,
                                                   opt.target.device, opt.max_loaded_programs);
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

/// A bucketed set with no program yet: each bucket is compiled by `grow`
/// when a run first needs it (so compiles == buckets used).
std::shared_ptr<const ProgramSet> lazy_set(const fs::path& onnx, const SessionOptions& opt,
                                           const artifact::CompatInfo& request, ProgramSet::Grow grow,
                                           SessionStats& st, BucketSkeleton sk) {
  Stopwatch sw;
  sk.model.reset();  // each program is imported again when compiled: the session does not hold a copy of the weights
  artifact::CompatInfo compat = request;
  compat.input_signature = sk.signature;
  auto p = std::make_shared<const ProgramSet>(std::move(compat), std::move(sk.set), std::move(sk.inputs),
                                              std::move(sk.outputs), std::move(grow), opt.out_of_bucket,
                                              opt.target.device, opt.max_loaded_programs);
  st.load_ms = sw.ms();
  return p;
}

/// Compiles without the cache (no cache, or a directory kiln may not use).
ProgramSet::Grow memory_grow(const fs::path& onnx, const SessionOptions& opt, const artifact::CompatInfo& request) {
  return [onnx, opt, request](const std::vector<int64_t>& sizes, const artifact::BucketSet& set,
                               const ir::Model* reference, bool& compiled) {
    auto cp = compile_program(onnx, opt, request, "", nullptr, sizes, reference, &set);
    compiled = true;
    return artifact::ProgramVariant{sizes, std::move(cp.model), std::move(cp.plan)};
  };
}

std::shared_ptr<const ProgramSet> compile_in_memory(const fs::path& onnx, const SessionOptions& opt,
                                                    const artifact::CompatInfo& request, SessionStats& st) {
  st.cache = SessionStats::Cache::none;
  Stopwatch import_sw;
  BucketSkeleton sk = bucket_skeleton(onnx, opt);
  const double import_ms = import_sw.ms();
  if (!sk.set.empty()) return lazy_set(onnx, opt, request, memory_grow(onnx, opt, request), st, std::move(sk));
  CompileResult rep;
  // One program: compiled from the skeleton's import (the file is read once).
  auto cp = compile_program(onnx, opt, request, "", &rep, {}, nullptr, &sk.set, &*sk.model);
  st.compile_ms = import_ms + rep.compile_ms;
  for (auto& n : rep.notes) st.notes.push_back(n);
  Stopwatch sw;
  auto p = std::make_shared<const ProgramSet>(std::move(cp), nullptr, opt.out_of_bucket, opt.target.device,
                                                 opt.max_loaded_programs);
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

/// The cache entry `key` as it is now (a torn append at its end ignored),
/// when it is a valid artifact of this key that can run here; nothing otherwise.
std::optional<artifact::EntryRead> current_entry(const cache::Cache& c, const std::string& key, const Target& target) {
  try {
    auto path = c.entry_path(key);
    if (!fs::exists(path)) return std::nullopt;
    artifact::CompatInfo compat = artifact::read_compat(path);
    if (compat.cache_key != key || !targets::check_runnable(compat, target).empty()) return std::nullopt;
    return artifact::read_entry(path);
  } catch (const Error&) {
    return std::nullopt;  // damaged or replaced meanwhile: rebuilt from what this process compiles
  }
}

/// Grow for a bucketed Session on a writable cache: under the key's lock,
/// take the bucket from the entry if another process added it, else compile
/// it and append it to the entry (artifact::append_program: the entry's
/// constants and earlier programs are not rewritten). The entry is written
/// whole instead when there is none yet, when the lock could not be taken,
/// when max_cached_programs makes it drop its oldest added program, or when
/// the append fails.
ProgramSet::Grow cache_grow(fs::path onnx, SessionOptions opt, artifact::CompatInfo request, fs::path dir,
                            std::string key, std::vector<cache::FileStamp> files) {
  opt.on_note = nullptr;  // notes of later runs go to the log only
  return [=](const std::vector<int64_t>& sizes, const artifact::BucketSet& set, const ir::Model* reference,
             bool& compiled) -> artifact::ProgramVariant {
    cache::Cache c(dir);
    std::string problem;
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(opt.cache_lock_timeout_s * 1000));
    cache::KeyLock lock = cache::KeyLock::acquire(c.lock_path(key), timeout, [] {}, &problem);
    std::optional<artifact::EntryRead> entry = current_entry(c, key, opt.target);
    if (entry && entry->program.sizes == sizes) {
      compiled = false;
      return {sizes, std::move(entry->program.model), std::move(entry->program.plan)};
    }
    if (entry)
      for (auto& v : entry->program.more)
        if (v.sizes == sizes) {
          compiled = false;
          return std::move(v);
        }
    if (entry && !entry->ignored.empty())
      log().info("cache entry '{}': {}; the next program appended overwrites them", c.entry_path(key).string(),
                 entry->ignored);
    bool rewrite = !entry || !lock.held();
    // Bound the entry: the oldest added programs go first (the first program
    // stays: it fixes the weight layouts the others reuse).
    if (entry && opt.max_cached_programs > 0)
      while (!entry->program.more.empty() &&
             entry->program.more.size() + 2 > static_cast<size_t>(opt.max_cached_programs)) {
        log().info("cache entry holds {} programs (max_cached_programs {}): dropping the oldest added one ({})",
                   entry->program.more.size() + 1, opt.max_cached_programs,
                   fmt::join(entry->program.more.front().sizes, "x"));
        entry->program.more.erase(entry->program.more.begin());
        rewrite = true;
      }
    // The entry's first program fixes the weight layouts (constants stored once).
    artifact::CompiledProgram cp =
        compile_program(onnx, opt, request, key, nullptr, sizes, entry ? &entry->program.model : reference, &set);
    compiled = true;
    artifact::ProgramVariant out{sizes, cp.model, cp.plan};  // shallow: constants are shared buffers
    if (model_changed(files)) {
      log().warn("'{}' changed since the session was created: bucket {} is used but not cached", onnx.string(),
                 fmt::join(sizes, "x"));
      return out;
    }
    if (!rewrite) {
      try {
        Stopwatch sw;
        uint64_t written = artifact::append_program(c.entry_path(key), *entry, sizes, cp.model, cp.plan);
        log().info("bucket {} appended to cache entry '{}': {} bytes written in {:.1f} ms (its {} bytes of "
                   "constants and {} program(s) not rewritten)",
                   fmt::join(sizes, "x"), c.entry_path(key).string(), written, sw.ms(),
                   entry->const_regions.front().size, entry->program.more.size() + 1);
      } catch (const Error& e) {
        log().warn("could not append bucket {} to the cache entry ({}): rewriting it whole", fmt::join(sizes, "x"),
                   e.what());
        rewrite = true;
      }
    }
    if (rewrite) {
      if (entry) entry->program.more.push_back({sizes, std::move(cp.model), std::move(cp.plan)});
      try {
        c.publish(key, entry ? entry->program : cp);
      } catch (const Error& e) {
        log().warn("could not add bucket {} to the cache entry: {}", fmt::join(sizes, "x"), e.what());
      }
    }
    lock.release();
    if (opt.cache_max_bytes > 0) cache::gc(c.dir(), opt.cache_max_bytes, key);
    return out;
  };
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

std::shared_ptr<const ProgramSet> obtain_program(const fs::path& onnx_path, const SessionOptions& opt,
                                              const artifact::CompatInfo& facts, SessionStats& st) {
  Notes notes{st, opt};
  if (log().should_log(spdlog::level::debug))
    log().debug("session for '{}' starts {:.0f} ms after the process started", onnx_path.string(),
                ms_since_process_start());
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
  if (log().should_log(spdlog::level::debug))
    log().debug("model digest and cache key ready {:.0f} ms after the process started", ms_since_process_start());
  std::string key = cache::derive_key(cache::key_fields(request));
  // Used only by a set with buckets, specialized dims or value guards (a
  // program the entry lacks is compiled when a run first needs it).
  ProgramSet::Grow grow = writable ? cache_grow(onnx_path, opt, request, c.dir(), key, md.files)
                                   : memory_grow(onnx_path, opt, request);
  auto hit = [&](Lookup& l, const Stopwatch& sw) {
    st.cache = SessionStats::Cache::hit;
    st.load_ms = sw.ms();
    st.artifact_path = c.entry_path(key).string();
    if (!l.note.empty()) notes.add(l.note);
    if (writable) c.touch(key);
    if (log().should_log(spdlog::level::debug))
      log().debug("cache hit: loaded in {:.1f} ms, ready {:.0f} ms after the process started", st.load_ms,
                  ms_since_process_start());
    return std::move(l.program);
  };

  Stopwatch sw;
  Lookup found = try_entry(c, key, opt, grow);
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
    found = try_entry(c, key, opt, grow);  // published or replaced while we waited
    if (found.verdict == Lookup::Verdict::hit) return hit(found, sw2);
  }
  if (found.verdict != Lookup::Verdict::absent) {
    // Under the lock no publisher can swap the file, so this moves exactly
    // the damaged file aside.
    bool moved = found.verdict == Lookup::Verdict::damaged && c.quarantine(key);
    notes.add(rebuild_note(found, c.entry_path(key), moved));
  }

  Stopwatch import_sw;
  BucketSkeleton sk = bucket_skeleton(onnx_path, opt);
  const double import_ms = import_sw.ms();
  if (!sk.set.empty()) {
    // Bucketed or specialized: nothing is compiled now; each program is
    // compiled (and added to the entry) when a run first needs it.
    lock.release();
    bool declared = false;
    for (auto& d : sk.set.dims) declared |= d.kind == artifact::DimKind::declared;
    auto p = lazy_set(onnx_path, opt, request, grow, st, std::move(sk));
    notes.add(fmt::format("{} ({}): no program is cached yet; each is compiled when a run first needs it and added "
                          "to '{}'",
                          declared ? "bucketed" : "specialized to the shapes and values given", describe(p->bucket_set()),
                          c.entry_path(key).string()));
    st.cache = SessionStats::Cache::miss;
    st.artifact_path = c.entry_path(key).string();
    return p;
  }
  CompileResult rep;
  // One program: compiled from the skeleton's import (the file is read once).
  auto cp = compile_program(onnx_path, opt, request, key, &rep, {}, nullptr, &sk.set, &*sk.model);
  st.compile_ms = import_ms + rep.compile_ms;
  for (auto& n : rep.notes) notes.add(n);
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
  auto program = std::make_shared<const ProgramSet>(std::move(cp), nullptr, opt.out_of_bucket, opt.target.device,
                                                 opt.max_loaded_programs);
  st.load_ms = sw3.ms();
  return program;
}

Session::Session(const fs::path& onnx_path, const SessionOptions& opt) {
  opt.validate();
  // A cuda session needs its CUDA context whether it loads or compiles: it is
  // created in the background, started before build_facts so that the
  // driver's initialisation there and opening cuBLASLt overlap.
  targets::DevicePrewarmSettler settle;  // nothing it started still running when this returns or throws
  if (opt.target.kind == Target::Kind::cuda) settle.active = targets::prewarm_device("cuda", opt.target.device);
  program_ = obtain_program(onnx_path, opt, build_facts(opt), stats_);
}

}  // namespace kiln

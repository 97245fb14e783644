#include "cache/maintenance.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <regex>

#include "artifact/entry.h"
#include "cache/lock.h"
#include "support/error.h"
#include "support/file.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Recognises kiln's own file names; anything else in the directory is not
// ours. `partitions`: a file of the ort-partitions folder.
std::optional<CacheFile> classify(const fs::path& path, bool partitions) {
  static const std::regex entry("([0-9a-f]{32})\\.kiln"), bad("([0-9a-f]{32})\\.kiln\\.bad"),
      tmp("\\.([0-9a-f]{32})\\.kiln\\.tmp-([0-9]{1,9})-[0-9a-f]{8}"), lock("([0-9a-f]{32})\\.lock"),
      part("([0-9a-f]{32})\\.onnx"), part_tmp("\\.([0-9a-f]{32})\\.onnx\\.tmp-([0-9]{1,9})-[0-9a-f]{8}");
  std::string name = path.filename().string();
  std::smatch m;
  CacheFile f;
  f.path = path;
  if (partitions) {
    if (std::regex_match(name, m, part)) f.kind = FileKind::partition;
    else if (std::regex_match(name, m, part_tmp)) {
      f.kind = FileKind::temporary;
      f.pid = std::stoi(m[2].str());
    } else {
      return std::nullopt;
    }
  } else if (std::regex_match(name, m, entry)) f.kind = FileKind::entry;
  else if (std::regex_match(name, m, bad)) f.kind = FileKind::quarantined;
  else if (std::regex_match(name, m, lock)) f.kind = FileKind::lock;
  else if (std::regex_match(name, m, tmp)) {
    f.kind = FileKind::temporary;
    f.pid = std::stoi(m[2].str());
  } else {
    return std::nullopt;
  }
  f.key = m[1].str();
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  f.bytes = static_cast<uint64_t>(st.st_size);
  f.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return f;
}

bool process_exists(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// Removes a file we listed; false when it was already gone (another gc).
bool remove_file(const fs::path& p) { return ::unlink(p.c_str()) == 0; }

}  // namespace

std::vector<CacheFile> scan_dir(const fs::path& dir) {
  std::vector<CacheFile> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (auto f = classify(it->path(), false)) out.push_back(*f);
  ec.clear();
  for (fs::directory_iterator it(dir / kPartitionDir, ec), end; !ec && it != end; it.increment(ec))
    if (auto f = classify(it->path(), true)) out.push_back(*f);
  std::sort(out.begin(), out.end(), [](const CacheFile& a, const CacheFile& b) {
    return std::tie(a.kind, a.key, a.path) < std::tie(b.kind, b.key, b.path);
  });
  return out;
}

bool stale_temporary(const fs::path& dir, const CacheFile& tmp, int64_t now) {
  if (lock_held(dir / (tmp.key + ".lock"))) return false;
  return !process_exists(tmp.pid) || now - tmp.mtime_ns > int64_t{3600} * 1000000000;
}

std::vector<EntryInfo> list_entries(const fs::path& dir) {
  std::vector<EntryInfo> out;
  for (auto& f : scan_dir(dir)) {
    if (f.kind != FileKind::entry) continue;
    EntryInfo e{f, std::nullopt, ""};
    try {
      e.compat = artifact::read_compat(f.path);
    } catch (const Error& err) {
      e.error = err.what();
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<VerifyResult> verify_entries(const fs::path& dir) {
  std::vector<VerifyResult> out;
  for (auto& f : scan_dir(dir)) {
    if (f.kind != FileKind::entry) continue;
    VerifyResult r{f, false, ""};
    try {
      // As loads read it: a torn append at its end is ignored (and reported),
      // every other damage makes the entry damaged.
      auto e = artifact::read_entry(f.path);
      if (e.program.compat.cache_key != f.key)
        r.problem = fmt::format("published under key '{}', not the key in its file name", e.program.compat.cache_key);
      else
        r.ok = true;
      r.note = e.ignored;
    } catch (const std::exception& e) {
      r.problem = e.what();
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Temporary files, locks and memos: the part gc and clear share.
void sweep(const fs::path& dir, GcReport& rep) {
  int64_t now = now_ns();
  for (auto& f : scan_dir(dir)) {
    if (f.kind == FileKind::temporary) {
      if (stale_temporary(dir, f, now) && remove_file(f.path)) rep.removed.push_back(f);
      else if (fs::exists(f.path)) rep.kept_busy.push_back(f);
    } else if (f.kind == FileKind::lock) {
      if (remove_stale_lock(f.path)) rep.removed.push_back(f);
      else if (fs::exists(f.path)) rep.kept_busy.push_back(f);
    }
  }
  // A memo whose model file is gone can never match again.
  std::error_code ec;
  for (fs::directory_iterator it(dir / "digests", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".json") continue;
    try {
      auto bytes = read_file(it->path());
      auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
      if (fs::exists(j.at("model").get<std::string>())) continue;
    } catch (const std::exception&) {
      // unreadable memo: remove it too
    }
    if (remove_file(it->path())) ++rep.memos_removed;
  }
}

uint64_t stored_bytes(const std::vector<CacheFile>& files) {
  uint64_t n = 0;
  for (auto& f : files)
    if (f.kind == FileKind::entry || f.kind == FileKind::quarantined || f.kind == FileKind::partition) n += f.bytes;
  return n;
}

}  // namespace

GcReport gc(const fs::path& dir, uint64_t max_bytes, const std::string& keep_key) {
  GcReport rep;
  try {
    sweep(dir, rep);
    auto files = scan_dir(dir);
    rep.bytes_before = rep.bytes_after = stored_bytes(files);
    if (max_bytes == 0 || rep.bytes_after <= max_bytes) return rep;
    std::vector<CacheFile> order;
    for (auto& f : files)
      if (f.kind == FileKind::quarantined || f.kind == FileKind::partition ||
          (f.kind == FileKind::entry && f.key != keep_key))
        order.push_back(f);
    // Quarantined files first (never loaded), then entries and partitions,
    // least recently used (written) first.
    std::stable_sort(order.begin(), order.end(), [](const CacheFile& a, const CacheFile& b) {
      const bool qa = a.kind == FileKind::quarantined, qb = b.kind == FileKind::quarantined;
      if (qa != qb) return qa;
      return a.mtime_ns < b.mtime_ns;
    });
    for (auto& f : order) {
      if (rep.bytes_after <= max_bytes) break;
      bool removed = remove_file(f.path);
      if (removed) rep.removed.push_back(f);
      if (removed || errno == ENOENT) rep.bytes_after -= std::min(rep.bytes_after, f.bytes);
    }
  } catch (const std::exception&) {
    // gc is best effort: a failure leaves the cache larger, never broken.
  }
  return rep;
}

GcReport clear(const fs::path& dir) {
  GcReport rep;
  try {
    auto files = scan_dir(dir);
    rep.bytes_before = stored_bytes(files);
    for (auto& f : files)
      if ((f.kind == FileKind::entry || f.kind == FileKind::quarantined || f.kind == FileKind::partition) &&
          remove_file(f.path))
        rep.removed.push_back(f);
    sweep(dir, rep);
    std::error_code ec;
    fs::remove_all(dir / "digests", ec);
    rep.bytes_after = stored_bytes(scan_dir(dir));
  } catch (const std::exception&) {
  }
  return rep;
}

uint64_t parse_size(const std::string& text, const std::string& option) {
  static const std::regex rx("\\s*([0-9]+(?:\\.[0-9]+)?)\\s*([KMGT]?)(i?)(B?)\\s*", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, rx) || (!m[3].str().empty() && m[4].str().empty()) ||
      (m[2].str().empty() && !m[3].str().empty()))
    fail(ErrorCode::invalid_option, "{}: '{}' is not a size (examples: 2GiB, 500MB, 1.5G, 4096)", option, text);
  double v = std::stod(m[1].str());
  int power = std::string("_KMGT").find(static_cast<char>(std::toupper(m[2].str().empty() ? '_' : m[2].str()[0])));
  // "KB", "MB" are decimal; "K", "KiB" binary (what du -h and ls -h print).
  double base = (!m[4].str().empty() && m[3].str().empty()) ? 1000.0 : 1024.0;
  double bytes = v * std::pow(base, power);
  if (bytes >= 1.8e19) fail(ErrorCode::invalid_option, "{}: '{}' is too large", option, text);
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace kiln::cache

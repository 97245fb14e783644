// Model digest with a stat-checked memo. The wire-format walk follows
// https://protobuf.dev/programming-guides/encoding/ and the field numbers of
// onnx.proto; it only looks at the fields that can hold tensors.
#include "cache/model_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "support/error.h"
#include "support/file.h"
#include "support/hash.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

// onnx.proto field numbers of the messages on the way to a TensorProto.
enum : uint32_t {
  kModelGraph = 7, kModelFunctions = 25, kFunctionNode = 7,
  kGraphNode = 1, kGraphInitializer = 5, kNodeAttribute = 5,
  kAttrTensor = 5, kAttrGraph = 6, kAttrTensors = 10, kAttrGraphs = 11,
  kTensorExternalData = 13, kEntryKey = 1, kEntryValue = 2,
};
// Deeper nesting is refused rather than recursed into (protobuf's own parser
// stops at 100 too); it keeps a hostile file from exhausting the stack.
constexpr int kMaxDepth = 100;

struct Bytes {
  const uint8_t* p;
  const uint8_t* end;
};

// Collects the "location" of every external-data entry of every tensor.
class LocationWalk {
 public:
  explicit LocationWalk(const std::string& what) : what_(what) {}
  std::set<std::string> found;

  void model(Bytes b) {
    fields(b, 0, [&](uint32_t f, Bytes v, int d) {
      if (f == kModelGraph) graph(v, d);
      if (f == kModelFunctions) fields(v, d, [&](uint32_t g, Bytes w, int e) { if (g == kFunctionNode) node(w, e); });
    });
  }

 private:
  void graph(Bytes b, int depth) {
    fields(b, depth, [&](uint32_t f, Bytes v, int d) {
      if (f == kGraphNode) node(v, d);
      if (f == kGraphInitializer) tensor(v, d);
    });
  }
  void node(Bytes b, int depth) {
    fields(b, depth, [&](uint32_t f, Bytes v, int d) {
      if (f != kNodeAttribute) return;
      fields(v, d, [&](uint32_t g, Bytes w, int e) {
        if (g == kAttrTensor || g == kAttrTensors) tensor(w, e);
        if (g == kAttrGraph || g == kAttrGraphs) graph(w, e);
      });
    });
  }
  void tensor(Bytes b, int depth) {
    fields(b, depth, [&](uint32_t f, Bytes entry, int d) {
      if (f != kTensorExternalData) return;
      std::string key, value;
      fields(entry, d, [&](uint32_t g, Bytes w, int) {
        std::string text(reinterpret_cast<const char*>(w.p), static_cast<size_t>(w.end - w.p));
        if (g == kEntryKey) key = std::move(text);
        else if (g == kEntryValue) value = std::move(text);
      });
      if (key == "location") found.insert(value);
    });
  }

  uint64_t varint(const uint8_t*& p, const uint8_t* end) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      uint8_t byte = *p++;
      v |= uint64_t{byte & 0x7fu} << shift;
      if (!(byte & 0x80)) return v;
    }
    damaged("a varint runs past its message");
  }

  // Calls f(field, payload, depth + 1) for every length-delimited field of
  // the message in `b`; other wire types are skipped.
  template <class F>
  void fields(Bytes b, int depth, F&& f) {
    if (depth >= kMaxDepth) damaged(fmt::format("messages are nested more than {} deep", kMaxDepth));
    const uint8_t* p = b.p;
    while (p < b.end) {
      uint64_t tag = varint(p, b.end);
      size_t skip = 0;
      switch (tag & 7) {
        case 0: varint(p, b.end); continue;
        case 1: skip = 8; break;
        case 5: skip = 4; break;
        case 2: {
          uint64_t len = varint(p, b.end);
          if (len > static_cast<uint64_t>(b.end - p)) damaged("a field runs past its message");
          f(static_cast<uint32_t>(tag >> 3), Bytes{p, p + len}, depth + 1);
          p += len;
          continue;
        }
        default: damaged(fmt::format("unexpected protobuf wire type {}", tag & 7));
      }
      if (skip > static_cast<size_t>(b.end - p)) damaged("a field runs past its message");
      p += skip;
    }
  }

  [[noreturn]] void damaged(const std::string& why) {
    fail(ErrorCode::invalid_model, "{}: not a valid ONNX model ({})", what_, why);
  }

  std::string what_;
};

int64_t ns(const struct timespec& t) { return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec; }

FileStamp stamp_of(const fs::path& abs, const struct stat& st) {
  return {abs.string(), static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_ino),
          static_cast<uint64_t>(st.st_dev), ns(st.st_mtim), ns(st.st_ctim)};
}

// Feeds a whole file to `h` in 8 MiB reads, telling the kernel the access is
// sequential so that readahead keeps the disk busy. Returns the byte count.
uint64_t hash_stream(Hasher128& h, const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorCode::io, "cannot open '{}': {}", path.string(), std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<uint8_t> buf(8 << 20);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      fail(ErrorCode::io, "read error on '{}': {}", path.string(), std::strerror(err));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return total;
}

fs::path memo_path(const fs::path& memo_dir, const fs::path& abs) {
  return memo_dir / fmt::format("{:016x}.json", hash64(abs.string().data(), abs.string().size()));
}

nlohmann::json stamp_json(const FileStamp& s) {
  return {{"path", s.path}, {"size", s.size}, {"ino", s.ino}, {"dev", s.dev}, {"mtime_ns", s.mtime_ns},
          {"ctime_ns", s.ctime_ns}};
}

// The memoised digest when the memo exists and every file stamp still
// matches; "" otherwise (a damaged memo is a miss, never an error).
std::string memo_lookup(const fs::path& memo, const fs::path& abs, std::vector<FileStamp>& stamps) {
  std::error_code ec;
  if (!fs::is_regular_file(memo, ec)) return "";
  try {
    auto bytes = read_file(memo);
    auto j = nlohmann::json::parse(bytes.begin(), bytes.end());
    if (j.at("scheme") != "onnx+external/xxh3-128/1" || j.at("model") != abs.string()) return "";
    std::vector<FileStamp> now;
    for (auto& f : j.at("files")) {
      FileStamp want{f.at("path"), f.at("size"), f.at("ino"), f.at("dev"), f.at("mtime_ns"), f.at("ctime_ns")};
      struct stat st{};
      if (::stat(want.path.c_str(), &st) != 0 || stamp_of(want.path, st) != want) return "";
      now.push_back(want);
    }
    if (now.empty() || now[0].path != abs.string()) return "";
    stamps = std::move(now);
    return j.at("digest").get<std::string>();
  } catch (const std::exception&) {
    return "";
  }
}

void memo_store(const fs::path& memo_dir, const fs::path& abs, const ModelDigest& d) {
  // A file changed within the same timestamp tick as our read would keep its
  // stamp: memoise only files that have been quiet for a while.
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& f : d.files)
    if (now - std::max(f.mtime_ns, f.ctime_ns) < int64_t{2'000'000'000}) return;
  nlohmann::json files = nlohmann::json::array();
  for (auto& f : d.files) files.push_back(stamp_json(f));
  std::string text =
      nlohmann::json{{"scheme", "onnx+external/xxh3-128/1"}, {"model", abs.string()}, {"digest", d.digest},
                     {"files", files}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  try {
    std::error_code ec;
    fs::create_directory(memo_dir, ec);
    atomic_write(memo_path(memo_dir, abs), text.data(), text.size());
  } catch (const Error&) {
    // A memo is an optimisation: a full disk or a read-only cache only costs a rehash next time.
  }
}

}  // namespace

std::set<std::string> external_data_locations(const uint8_t* data, size_t size, const std::string& what) {
  LocationWalk walk(what);
  walk.model(Bytes{data, data + size});
  return std::move(walk.found);
}

FileStamp stamp_file(const fs::path& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorCode::io, "cannot stat '{}': {}", path.string(), std::strerror(errno));
  return stamp_of(fs::absolute(path).lexically_normal(), st);
}

ModelDigest digest_model(const fs::path& path, const fs::path& memo_dir, bool write_memo) {
  fs::path abs = fs::absolute(path).lexically_normal();
  ModelDigest out;
  if (!memo_dir.empty()) {
    out.digest = memo_lookup(memo_path(memo_dir, abs), abs, out.files);
    if (!out.digest.empty()) {
      out.from_memo = true;
      return out;
    }
  }
  std::string what = "'" + path.string() + "'";
  out.files.push_back(stamp_file(abs));
  std::set<std::string> locations;
  {
    auto map = MappedFile::open(abs);
    if (map->size() == 0) fail(ErrorCode::invalid_model, "{}: the file is empty, not an ONNX model", what);
    locations = external_data_locations(map->data(), map->size(), what);
  }
  Hasher128 h;
  h.field("onnx");
  out.bytes_hashed = hash_stream(h, abs);
  if (out.bytes_hashed != out.files[0].size)
    fail(ErrorCode::io, "{} changed while it was being read (size {} then {})", what, out.files[0].size,
         out.bytes_hashed);
  for (auto& loc : locations) {
    if (fs::path(loc).is_absolute())
      fail(ErrorCode::invalid_model, "{}: external data location '{}' must be a relative path", what, loc);
    fs::path file = abs.parent_path() / loc;
    out.files.push_back(stamp_file(file));
    h.field(loc);
    out.bytes_hashed += hash_stream(h, file);
  }
  out.digest = h.hex_digest();
  // Stamps taken before the read are checked again after it, so a file that
  // changed while it was hashed is neither trusted by the memo nor silently
  // digested half old, half new.
  for (auto& f : out.files)
    if (stamp_file(f.path) != f) fail(ErrorCode::io, "'{}' changed while it was being read; try again", f.path);
  if (!memo_dir.empty() && write_memo) memo_store(memo_dir, abs, out);
  return out;
}

}  // namespace kiln::cache

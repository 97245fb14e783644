// Model digest: the .onnx bytes plus every external-data file they reference.
// External references are found by walking the protobuf wire format
// (https://protobuf.dev/programming-guides/encoding/) over only the fields
// that can hold tensors, skipping payloads without copying them, so a hit in
// the cache never pays for a full parse.
#include <set>

#include "onnx/importer.h"
#include "support/error.h"
#include "support/file.h"
#include "support/hash.h"

namespace kiln::onnx_import {

namespace fs = std::filesystem;

namespace {

// Field numbers from onnx.proto.
constexpr uint32_t kModelGraph = 7, kModelFunctions = 25;
constexpr uint32_t kFunctionNode = 7;
constexpr uint32_t kGraphNode = 1, kGraphInitializer = 5;
constexpr uint32_t kNodeAttribute = 5;
constexpr uint32_t kAttrT = 5, kAttrG = 6, kAttrTensors = 10, kAttrGraphs = 11;
constexpr uint32_t kTensorExternalData = 13;
constexpr uint32_t kEntryKey = 1, kEntryValue = 2;

struct Span { const uint8_t* p; const uint8_t* end; };

class Scanner {
 public:
  explicit Scanner(std::string what) : what_(std::move(what)) {}
  std::set<std::string> locations;

  void model(Span s) { each(s, [&](uint32_t f, Span v) {
    if (f == kModelGraph) graph(v);
    else if (f == kModelFunctions) each(v, [&](uint32_t g, Span w) { if (g == kFunctionNode) node(w); });
  }); }

 private:
  void graph(Span s) { each(s, [&](uint32_t f, Span v) {
    if (f == kGraphNode) node(v);
    else if (f == kGraphInitializer) tensor(v);
  }); }
  void node(Span s) { each(s, [&](uint32_t f, Span v) { if (f == kNodeAttribute) attr(v); }); }
  void attr(Span s) { each(s, [&](uint32_t f, Span v) {
    if (f == kAttrT || f == kAttrTensors) tensor(v);
    else if (f == kAttrG || f == kAttrGraphs) graph(v);
  }); }
  void tensor(Span s) { each(s, [&](uint32_t f, Span v) {
    if (f != kTensorExternalData) return;
    std::string key, value;
    each(v, [&](uint32_t g, Span w) {
      std::string text(reinterpret_cast<const char*>(w.p), static_cast<size_t>(w.end - w.p));
      if (g == kEntryKey) key = text; else if (g == kEntryValue) value = text;
    });
    if (key == "location") locations.insert(value);
  }); }

  uint64_t varint(const uint8_t*& p, const uint8_t* end) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) truncated();
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    truncated();
  }

  // Calls f(field, payload) for each length-delimited field; skips the rest.
  template <class F>
  void each(Span s, F&& f) {
    const uint8_t* p = s.p;
    while (p < s.end) {
      uint64_t tag = varint(p, s.end);
      uint32_t field = static_cast<uint32_t>(tag >> 3), wire = tag & 7;
      switch (wire) {
        case 0: varint(p, s.end); break;
        case 1: if (s.end - p < 8) truncated(); p += 8; break;
        case 5: if (s.end - p < 4) truncated(); p += 4; break;
        case 2: {
          uint64_t len = varint(p, s.end);
          if (len > static_cast<uint64_t>(s.end - p)) truncated();
          f(field, Span{p, p + len});
          p += len;
          break;
        }
        default:
          fail(ErrorCode::invalid_model, "{}: not a valid ONNX model (unexpected protobuf wire type {})", what_, wire);
      }
    }
  }

  [[noreturn]] void truncated() {
    fail(ErrorCode::invalid_model, "{}: not a valid ONNX model (the protobuf is truncated or damaged)", what_);
  }

  std::string what_;
};

}  // namespace

std::string model_digest(const fs::path& path) {
  auto map = MappedFile::open(path);
  std::string what = "'" + path.string() + "'";
  if (map->size() == 0) fail(ErrorCode::invalid_model, "{}: the file is empty, not an ONNX model", what);
  Hasher128 h;
  h.field("onnx");
  h.update(map->data(), map->size());
  Scanner sc(what);
  sc.model(Span{map->data(), map->data() + map->size()});
  fs::path base = path.has_parent_path() ? path.parent_path() : fs::path(".");
  for (auto& loc : sc.locations) {
    h.field(loc);
    fs::path rel(loc);
    if (rel.is_absolute()) fail(ErrorCode::invalid_model, "{}: external data location '{}' must be a relative path", what, loc);
    hash_file_into(h, base / rel);
  }
  return h.hex_digest();
}

}  // namespace kiln::onnx_import

// The binary frame of a .kiln file: fixed header, section table, padding
// rules (docs/file-format.md, "Fixed header" and "Section table").
#include <algorithm>
#include <bit>
#include <cstring>

#include "artifact/artifact.h"
#include "support/error.h"
#include "support/hash.h"

namespace kiln::artifact::detail {

static_assert(std::endian::native == std::endian::little,
              "the .kiln layout is little-endian and read in place (constants are mmap'd)");

namespace {

// Header field offsets (docs/file-format.md, "Fixed header").
constexpr size_t kOffVersion = 8, kOffHeaderSize = 12, kOffFileSize = 16, kOffCompatOffset = 24,
                 kOffCompatSize = 32, kOffCompatChecksum = 40, kOffTableOffset = 48, kOffTableCount = 56,
                 kOffFlags = 60, kOffTableChecksum = 64, kOffHeaderChecksum = 72;
static_assert(kOffHeaderChecksum + 8 == kHeaderSize);

// Section entry field offsets.
constexpr size_t kEntKind = 0, kEntFlags = 4, kEntOffset = 8, kEntSize = 16, kEntChecksum = 24;
static_assert(kEntChecksum + 8 == kSectionEntrySize);

// True when [r.offset, r.offset + r.size) lies inside [lo, file_size), without overflow.
bool inside(const Region& r, uint64_t lo, uint64_t file_size) {
  return r.offset >= lo && r.offset <= file_size && r.size <= file_size - r.offset;
}

std::string hex(uint64_t v) { return fmt::format("0x{:016x}", v); }

}  // namespace

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

const char* section_name(SectionKind k) {
  switch (k) {
    case SectionKind::program: return "program";
    case SectionKind::memory_plan: return "memory_plan";
    case SectionKind::kernels: return "kernels";
    case SectionKind::tuning: return "tuning";
    case SectionKind::constants: return "constants";
    case SectionKind::metadata: return "metadata";
    case SectionKind::buckets: return "buckets";
  }
  return "unknown";
}

void corrupt(const std::string& what, const std::string& region, const std::string& detail) {
  fail(ErrorCode::corrupt_artifact, "artifact '{}' is corrupt: {}: {}", what, region, detail);
}

uint32_t verifier_max_tables(size_t n) {
  // A table costs at least 4 bytes (its vtable offset), so n/4 bounds an
  // honest buffer's table count; the FlatBuffers default is the floor.
  return static_cast<uint32_t>(std::clamp<size_t>(n / 4 + 16, 1000000, 0x7fffffff));
}

// Every DType kiln defines (include/kiln/dtype.h): 0-13, 16 (bfloat16), 17-20 (float8), 21-22 (4-bit).
bool known_dtype(int32_t d) { return (d >= 0 && d <= 13) || (d >= 16 && d <= 22); }

bool vector_data_aligned(const void* vector, size_t elem_size) {
  auto data = reinterpret_cast<uintptr_t>(vector) + sizeof(uint32_t);
  return data % elem_size == 0;
}

std::vector<uint8_t> encode_header(const Header& h) {
  std::vector<uint8_t> b(kHeaderSize, 0);
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  put32(&b[kOffVersion], h.format_version);
  put32(&b[kOffHeaderSize], h.header_size);
  put64(&b[kOffFileSize], h.file_size);
  put64(&b[kOffCompatOffset], h.compat.offset);
  put64(&b[kOffCompatSize], h.compat.size);
  put64(&b[kOffCompatChecksum], h.compat_checksum);
  put64(&b[kOffTableOffset], h.table_offset);
  put32(&b[kOffTableCount], h.table_count);
  put32(&b[kOffFlags], 0);
  put64(&b[kOffTableChecksum], h.table_checksum);
  put64(&b[kOffHeaderChecksum], hash64(b.data(), kOffHeaderChecksum));
  return b;
}

Header parse_header(const uint8_t* p, size_t avail, uint64_t file_size, const std::string& what) {
  // Magic and version first: for a file that is not an artifact, or one from
  // another format version, the rest of the header cannot be interpreted.
  if (avail < sizeof kMagic || std::memcmp(p, kMagic, sizeof kMagic) != 0)
    fail(ErrorCode::corrupt_artifact, "'{}' is not a kiln artifact: header: it does not start with the magic bytes "
         "\"KILNART\\0\"{}", what, avail < sizeof kMagic ? fmt::format(" (the file is only {} bytes)", avail) : "");
  if (avail < kOffVersion + 4) corrupt(what, "header", fmt::format("truncated: the file is only {} bytes", avail));
  Header h;
  h.format_version = get32(p + kOffVersion);
  if (h.format_version < kOldestFormatVersion || h.format_version > kFormatVersion)
    fail(ErrorCode::corrupt_artifact,
         "artifact '{}' has format version {}, but this kiln reads only format versions {} to {}: header: "
         "recompile the model with this kiln",
         what, h.format_version, kOldestFormatVersion, kFormatVersion);
  if (avail < kHeaderSize)
    corrupt(what, "header", fmt::format("truncated: the file is {} bytes, the header alone needs {}", avail, kHeaderSize));
  uint64_t stored = get64(p + kOffHeaderChecksum), computed = hash64(p, kOffHeaderChecksum);
  if (stored != computed)
    corrupt(what, "header", fmt::format("checksum mismatch (stored {}, computed {})", hex(stored), hex(computed)));

  h.header_size = get32(p + kOffHeaderSize);
  h.file_size = get64(p + kOffFileSize);
  h.compat = {get64(p + kOffCompatOffset), get64(p + kOffCompatSize)};
  h.compat_checksum = get64(p + kOffCompatChecksum);
  h.table_offset = get64(p + kOffTableOffset);
  h.table_count = get32(p + kOffTableCount);
  h.table_checksum = get64(p + kOffTableChecksum);
  uint32_t flags = get32(p + kOffFlags);

  if (h.header_size != kHeaderSize)
    corrupt(what, "header", fmt::format("header size is {}, format version {} requires {}", h.header_size,
                                        h.format_version, kHeaderSize));
  if (flags != 0) corrupt(what, "header", fmt::format("reserved flags are {}, must be 0", flags));
  // Format 5: file_size is the base artifact's size; appended program
  // blocks (checked by the reader) may follow it. Earlier formats: the file.
  if (h.format_version >= kFirstAppendVersion ? h.file_size > file_size : h.file_size != file_size)
    corrupt(what, "header",
            fmt::format("the file is {} bytes but the header records {} ({})", file_size, h.file_size,
                        h.format_version >= kFirstAppendVersion ? "truncated" : "truncated or appended to"));
  file_size = h.file_size;  // every region below lies in the base artifact
  if (!inside(h.compat, kHeaderSize, file_size) || h.compat.offset % kAlign != 0 || h.compat.size == 0 ||
      h.compat.size > kMaxCompatSize)
    corrupt(what, "header",
            fmt::format("compatibility block [{}, +{}) is out of bounds, unaligned or too large (file is {} bytes)",
                        h.compat.offset, h.compat.size, file_size));
  if (h.table_count != section_count(h.format_version))
    corrupt(what, "header", fmt::format("section count is {}, format version {} has {}", h.table_count,
                                        h.format_version, section_count(h.format_version)));
  Region table{h.table_offset, uint64_t{h.table_count} * kSectionEntrySize};
  if (!inside(table, kHeaderSize, file_size) || table.offset % kAlign != 0)
    corrupt(what, "header",
            fmt::format("section table [{}, +{}) is out of bounds or unaligned (file is {} bytes)", table.offset,
                        table.size, file_size));
  return h;
}

std::vector<uint8_t> encode_section_table(const std::vector<SectionEntry>& entries) {
  std::vector<uint8_t> b(entries.size() * kSectionEntrySize, 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    uint8_t* e = &b[i * kSectionEntrySize];
    put32(e + kEntKind, static_cast<uint32_t>(entries[i].kind));
    put32(e + kEntFlags, 0);
    put64(e + kEntOffset, entries[i].region.offset);
    put64(e + kEntSize, entries[i].region.size);
    put64(e + kEntChecksum, entries[i].checksum);
  }
  return b;
}

std::vector<SectionEntry> parse_section_table(const uint8_t* file, uint64_t file_size, const Header& h,
                                              const std::string& what) {
  const uint8_t* t = file + h.table_offset;
  size_t bytes = size_t{h.table_count} * kSectionEntrySize;
  uint64_t computed = hash64(t, bytes);
  if (computed != h.table_checksum)
    corrupt(what, "section table",
            fmt::format("checksum mismatch (header records {}, computed {})", hex(h.table_checksum), hex(computed)));
  std::vector<SectionEntry> out;
  for (uint32_t i = 0; i < h.table_count; ++i) {
    const uint8_t* e = t + size_t{i} * kSectionEntrySize;
    uint32_t kind = get32(e + kEntKind);
    if (kind != i + 1)
      corrupt(what, "section table", fmt::format("entry {} has kind {}, expected {}", i, kind, i + 1));
    SectionEntry s;
    s.kind = static_cast<SectionKind>(kind);
    std::string name = fmt::format("section '{}'", section_name(s.kind));
    if (get32(e + kEntFlags) != 0) corrupt(what, "section table", fmt::format("{} has non-zero reserved flags", name));
    s.region = {get64(e + kEntOffset), get64(e + kEntSize)};
    s.checksum = get64(e + kEntChecksum);
    if (!inside(s.region, kHeaderSize, file_size) || s.region.offset % kAlign != 0)
      corrupt(what, "section table",
              fmt::format("{} [{}, +{}) is out of bounds or unaligned (file is {} bytes)", name, s.region.offset,
                          s.region.size, file_size));
    out.push_back(s);
  }
  return out;
}

void check_padding(const uint8_t* file, uint64_t file_size, const Header& h,
                   const std::vector<SectionEntry>& sections, const std::string& what) {
  struct Named {
    Region r;
    std::string name;
  };
  std::vector<Named> regions{{{0, kHeaderSize}, "header"},
                             {h.compat, "compatibility block"},
                             {{h.table_offset, uint64_t{h.table_count} * kSectionEntrySize}, "section table"}};
  for (auto& s : sections)
    if (s.region.size) regions.push_back({s.region, fmt::format("section '{}'", section_name(s.kind))});
  std::stable_sort(regions.begin(), regions.end(), [](auto& a, auto& b) { return a.r.offset < b.r.offset; });
  uint64_t cursor = 0;
  std::string prev = "start of file";
  auto check_gap = [&](uint64_t end, const std::string& next) {
    for (uint64_t i = cursor; i < end; ++i)
      if (file[i] != 0)
        corrupt(what, fmt::format("padding between {} and {}", prev, next),
                fmt::format("byte at offset {} is 0x{:02x}, must be 0", i, file[i]));
  };
  for (auto& n : regions) {
    if (n.r.offset < cursor) corrupt(what, n.name, fmt::format("overlaps {}", prev));
    check_gap(n.r.offset, n.name);
    cursor = n.r.offset + n.r.size;
    prev = n.name;
  }
  check_gap(file_size, "end of file");
}

}  // namespace kiln::artifact::detail

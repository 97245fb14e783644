// Reading a .kiln file: the compatibility block alone (pread), or the whole
// artifact through mmap with every region validated before use
// (docs/file-format.md, "Reading").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "artifact/artifact.h"
#include "artifact/entry.h"
#include "support/error.h"
#include "support/file.h"
#include "support/hash.h"

namespace kiln::artifact {

using namespace detail;

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to n bytes at `offset`; returns how many were read (fewer only at end of file).
size_t pread_all(int fd, uint8_t* dst, size_t n, uint64_t offset, const std::filesystem::path& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(ErrorCode::io, "read error on '{}': {}", path.string(), std::strerror(errno));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

std::string hex(uint64_t v) { return fmt::format("0x{:016x}", v); }

void check_checksum(const uint8_t* p, uint64_t n, uint64_t stored, const std::string& what,
                    const std::string& region) {
  uint64_t computed = hash64(p, n);
  if (computed != stored)
    corrupt(what, region, fmt::format("checksum mismatch (recorded {}, computed {})", hex(stored), hex(computed)));
}

}  // namespace

namespace detail {

CompiledProgram read_view(const uint8_t* file, uint64_t size, const std::shared_ptr<const void>& keepalive,
                          const std::string& what, EntryRead* entry) {
  Header h = parse_header(file, size, size, what);
  const uint64_t base = h.file_size;  // the base artifact; appended blocks (format 5) follow it
  check_checksum(file + h.compat.offset, h.compat.size, h.compat_checksum, what, "compatibility block");
  std::vector<SectionEntry> sections = parse_section_table(file, base, h, what);
  check_padding(file, base, h, sections, what);
  for (auto& s : sections)
    check_checksum(file + s.region.offset, s.region.size, s.checksum, what,
                   fmt::format("section '{}'", section_name(s.kind)));

  auto at = [&](SectionKind k) { return file + sections[static_cast<size_t>(k) - 1].region.offset; };
  auto len = [&](SectionKind k) { return static_cast<size_t>(sections[static_cast<size_t>(k) - 1].region.size); };
  CompiledProgram out;
  out.compat = decode_compat(file + h.compat.offset, h.compat.size, h.format_version, what);
  // Version 1: the program and memory_plan sections hold one program each.
  std::vector<ProgramSlot> slots{{{}, {0, len(SectionKind::program)}, {0, len(SectionKind::memory_plan)}}};
  if (h.format_version >= 2)
    decode_buckets(at(SectionKind::buckets), len(SectionKind::buckets), len(SectionKind::program),
                   len(SectionKind::memory_plan), out.buckets, slots, what);
  BlockScan scan;
  scan.valid_end = base;
  const uint64_t tag = get64(file + kHeaderSize - 8);  // the header checksum
  if (h.format_version >= kFirstAppendVersion) scan = scan_blocks(file, size, h, tag, what);
  if (!scan.torn.empty() && !entry)
    corrupt(what, fmt::format("appended block at offset {}", align_up(scan.valid_end)), scan.torn);
  const size_t total = slots.size() + scan.blocks.size();
  if (total > kMaxPrograms) corrupt(what, "appended blocks", fmt::format("{} programs (at most {})", total, kMaxPrograms));
  // Name the program in errors only when there are several.
  auto where = [&](size_t i) { return total > 1 ? fmt::format("{} (program {})", what, i) : what; };
  auto keep = [&](size_t i, std::vector<int64_t> sizes, ir::Model model, ir::MemoryPlan plan) {
    if (i == 0) {
      out.model = std::move(model);
      out.plan = std::move(plan);
      out.sizes = std::move(sizes);
    } else {
      out.more.push_back({std::move(sizes), std::move(model), std::move(plan)});
    }
  };
  for (size_t i = 0; i < slots.size(); ++i) {
    const ProgramSlot& s = slots[i];
    ir::Model model = decode_program(at(SectionKind::program) + s.program.offset, s.program.size,
                                     at(SectionKind::constants), len(SectionKind::constants), keepalive, where(i));
    ir::MemoryPlan plan = decode_memory_plan(at(SectionKind::memory_plan) + s.plan.offset, s.plan.size,
                                             model.values.size(), where(i));
    keep(i, s.sizes, std::move(model), std::move(plan));
  }
  // Appended programs: constant offsets count from the base's constants
  // section, and a constant lies in it or in the constants of a block up to
  // the program's own (never in the bytes between).
  const uint64_t consts_at = sections[static_cast<size_t>(SectionKind::constants) - 1].region.offset;
  std::vector<Region> allowed{{0, len(SectionKind::constants)}};
  std::set<std::vector<int64_t>> seen;
  for (auto& s : slots) seen.insert(s.sizes);
  for (size_t b = 0; b < scan.blocks.size(); ++b) {
    const Block& k = scan.blocks[b];
    const size_t i = slots.size() + b;
    const std::string region = fmt::format("appended block at offset {}", k.offset);
    if (out.buckets.empty()) corrupt(where(i), region, "the artifact has no bucket set, so no program can be added");
    if (auto why = sizes_problem(out.buckets, k.sizes); !why.empty()) corrupt(where(i), region, "the program " + why);
    if (!seen.insert(k.sizes).second) corrupt(where(i), region, "the program repeats the sizes of an earlier one");
    allowed.push_back({k.consts.offset - consts_at, k.consts.size});
    const uint64_t visible = k.consts.offset + k.consts.size - consts_at;
    ir::Model model = decode_program(file + k.program.offset, k.program.size, file + consts_at, visible, keepalive,
                                     where(i), &allowed);
    ir::MemoryPlan plan = decode_memory_plan(file + k.plan.offset, k.plan.size, model.values.size(), where(i));
    keep(i, k.sizes, std::move(model), std::move(plan));
  }
  out.kernels.assign(at(SectionKind::kernels), at(SectionKind::kernels) + len(SectionKind::kernels));
  out.tuning.assign(at(SectionKind::tuning), at(SectionKind::tuning) + len(SectionKind::tuning));
  out.metadata_json.assign(reinterpret_cast<const char*>(at(SectionKind::metadata)), len(SectionKind::metadata));
  if (auto why = metadata_problem(out.metadata_json); !why.empty()) corrupt(what, "section 'metadata'", why);
  if (entry) {
    entry->base_bytes = base;
    entry->file_bytes = size;
    entry->valid_end = scan.valid_end;
    entry->appended = scan.blocks.size();
    entry->ignored = scan.torn;
    entry->consts_offset = consts_at;
    entry->const_regions = std::move(allowed);
    entry->base_tag = tag;
  }
  return out;
}

}  // namespace detail

CompatInfo read_compat(const std::filesystem::path& path) {
  // O_NONBLOCK: a FIFO in an artifact's place must not block the open (it is refused below).
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) fail(ErrorCode::io, "cannot open '{}': {}", path.string(), std::strerror(errno));
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) fail(ErrorCode::io, "cannot stat '{}': {}", path.string(), std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(ErrorCode::io, "'{}' is a directory, not a file", path.string());
  if (!S_ISREG(st.st_mode)) fail(ErrorCode::io, "'{}' is not a regular file (a device, FIFO or socket)", path.string());
  std::string what = path.string();
  uint8_t head[kHeaderSize];
  size_t got = pread_all(f.fd, head, kHeaderSize, 0, path);
  Header h = parse_header(head, got, static_cast<uint64_t>(st.st_size), what);
  std::vector<uint8_t> compat(h.compat.size);  // bounded by kMaxCompatSize in parse_header
  if (pread_all(f.fd, compat.data(), compat.size(), h.compat.offset, path) != compat.size())
    corrupt(what, "compatibility block", "the file ended while reading it (changed while being read?)");
  check_checksum(compat.data(), compat.size(), h.compat_checksum, what, "compatibility block");
  return decode_compat(compat.data(), compat.size(), h.format_version, what);
}

CompiledProgram read_file(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> m = MappedFile::open(path);
  return read_view(m->data(), m->size(), m, path.string(), nullptr);
}

CompiledProgram read_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& what) {
  if (!bytes) fail(ErrorCode::internal, "read_bytes('{}') was given no buffer", what);
  return read_view(bytes->data(), bytes->size(), bytes, what, nullptr);
}

}  // namespace kiln::artifact

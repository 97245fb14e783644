// Reading a .kiln file: the compatibility block alone (pread), or the whole
// artifact through mmap with every region validated before use
// (docs/file-format.md, "Reading").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "artifact/artifact.h"
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

// Validates and decodes a whole artifact held in memory at `file`.
CompiledProgram read_view(const uint8_t* file, uint64_t size, const std::shared_ptr<const void>& keepalive,
                          const std::string& what) {
  Header h = parse_header(file, size, size, what);
  check_checksum(file + h.compat.offset, h.compat.size, h.compat_checksum, what, "compatibility block");
  std::vector<SectionEntry> sections = parse_section_table(file, size, h, what);
  check_padding(file, size, h, sections, what);
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
  for (size_t i = 0; i < slots.size(); ++i) {
    const ProgramSlot& s = slots[i];
    // Name the program in errors only when there are several.
    std::string where = slots.size() > 1 ? fmt::format("{} (program {})", what, i) : what;
    ir::Model model = decode_program(at(SectionKind::program) + s.program.offset, s.program.size,
                                     at(SectionKind::constants), len(SectionKind::constants), keepalive, where);
    ir::MemoryPlan plan = decode_memory_plan(at(SectionKind::memory_plan) + s.plan.offset, s.plan.size,
                                             model.values.size(), where);
    if (i == 0) {
      out.model = std::move(model);
      out.plan = std::move(plan);
      out.sizes = s.sizes;
    } else {
      out.more.push_back({s.sizes, std::move(model), std::move(plan)});
    }
  }
  out.kernels.assign(at(SectionKind::kernels), at(SectionKind::kernels) + len(SectionKind::kernels));
  out.tuning.assign(at(SectionKind::tuning), at(SectionKind::tuning) + len(SectionKind::tuning));
  out.metadata_json.assign(reinterpret_cast<const char*>(at(SectionKind::metadata)), len(SectionKind::metadata));
  if (auto why = metadata_problem(out.metadata_json); !why.empty()) corrupt(what, "section 'metadata'", why);
  return out;
}

}  // namespace

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
  return read_view(m->data(), m->size(), m, path.string());
}

CompiledProgram read_bytes(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& what) {
  if (!bytes) fail(ErrorCode::internal, "read_bytes('{}') was given no buffer", what);
  return read_view(bytes->data(), bytes->size(), bytes, what);
}

}  // namespace kiln::artifact

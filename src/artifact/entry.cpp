// Appended program blocks (format version 5): a cache entry grows by one
// block per program compiled after it was published, and the base artifact,
// its constants included, is never rewritten (docs/file-format.md,
// "Appended programs").
#include "artifact/entry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "support/error.h"
#include "support/hash.h"

namespace kiln::artifact {

using namespace detail;

namespace {

// Block header field offsets (docs/file-format.md, "Appended programs").
constexpr size_t kBVersion = 8, kBSizesCount = 12, kBSize = 16, kBBaseTag = 24, kBConstsSize = 32,
                 kBSizesOffset = 40, kBProgramOffset = 48, kBProgramSize = 56, kBPlanOffset = 64, kBPlanSize = 72,
                 kBBodyChecksum = 80, kBReserved = 88, kBHeaderChecksum = 120;
static_assert(kBHeaderChecksum + 8 == kBlockHeaderSize);
constexpr uint32_t kMaxBlockDims = 64;

// Where the regions of a block with `consts` constant bytes and `ndims`
// sizes lie, relative to the block's start: the one layout writers produce.
struct Layout {
  Region consts, sizes, program, plan;
};
Layout layout(uint64_t consts, uint32_t ndims, uint64_t program, uint64_t plan) {
  Layout l;
  l.consts = {kBlockHeaderSize, consts};
  l.sizes = {align_up(l.consts.offset + consts), uint64_t{ndims} * 8};
  l.program = {align_up(l.sizes.offset + l.sizes.size), program};
  l.plan = {align_up(l.program.offset + program), plan};
  return l;
}

bool all_zero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

namespace detail {

BlockScan scan_blocks(const uint8_t* file, uint64_t file_size, const Header& h, uint64_t base_tag,
                      const std::string& what) {
  BlockScan s;
  s.valid_end = h.file_size;
  while (s.valid_end < file_size) {
    const uint64_t end = s.valid_end, at = align_up(end);
    // Trailing zeros are no block: what a rewrite over a longer torn tail leaves.
    if (all_zero(file + end, file_size - end)) return s;
    auto torn = [&](std::string why) {
      s.torn = fmt::format("{} bytes from offset {} are not a complete program block ({})", file_size - end, end,
                           why);
      return s;
    };
    if (at > file_size || !all_zero(file + end, at - end)) return torn("non-zero padding before it");
    const uint8_t* b = file + at;
    if (file_size - at < kBlockHeaderSize)
      return torn(fmt::format("its header is cut short: {} of {} bytes", file_size - at, kBlockHeaderSize));
    if (std::memcmp(b, kBlockMagic, sizeof kBlockMagic) != 0) return torn("no block magic \"KILNADD\\0\"");
    if (hash64(b, kBHeaderChecksum) != get64(b + kBHeaderChecksum)) return torn("header checksum mismatch");
    // The header is whole and as written: from here on a wrong field is damage, not a torn write.
    const std::string region = fmt::format("appended block at offset {}", at);
    if (get32(b + kBVersion) != h.format_version)
      corrupt(what, region, fmt::format("format version {}, the file's is {}", get32(b + kBVersion), h.format_version));
    if (get64(b + kBBaseTag) != base_tag)
      corrupt(what, region, "it was appended to another base artifact (base tag mismatch)");
    if (!all_zero(b + kBReserved, kBHeaderChecksum - kBReserved)) corrupt(what, region, "reserved bytes are not zero");
    const uint32_t ndims = get32(b + kBSizesCount);
    if (ndims > kMaxBlockDims) corrupt(what, region, fmt::format("{} sizes (at most {})", ndims, kMaxBlockDims));
    const uint64_t consts = get64(b + kBConstsSize), size = get64(b + kBSize);
    const uint64_t program = get64(b + kBProgramSize), plan = get64(b + kBPlanSize);
    if (consts > file_size || program > file_size || plan > file_size)
      corrupt(what, region, "a region is larger than the file");
    Layout l = layout(consts, ndims, program, plan);
    if (get64(b + kBSizesOffset) != l.sizes.offset || get64(b + kBProgramOffset) != l.program.offset ||
        get64(b + kBPlanOffset) != l.plan.offset || size != l.plan.offset + l.plan.size)
      corrupt(what, region, "its regions are not laid out as the format requires");
    if (size > file_size - at)
      return torn(fmt::format("the block is {} bytes, the file holds {} of them", size, file_size - at));
    if (hash64(b + kBlockHeaderSize, size - kBlockHeaderSize) != get64(b + kBBodyChecksum))
      return torn("body checksum mismatch");
    Block k;
    k.offset = at;
    k.size = size;
    for (uint32_t i = 0; i < ndims; ++i) k.sizes.push_back(static_cast<int64_t>(get64(b + l.sizes.offset + 8 * i)));
    k.consts = {at + l.consts.offset, consts};
    k.program = {at + l.program.offset, program};
    k.plan = {at + l.plan.offset, plan};
    s.blocks.push_back(std::move(k));
    s.valid_end = at + size;
  }
  return s;
}

std::vector<uint8_t> encode_block(uint64_t at, uint64_t consts_offset, uint64_t base_tag,
                                  const std::vector<int64_t>& sizes, const ir::Model& model, const ir::MemoryPlan& plan,
                                  const ConstPool::Existing& existing) {
  if (at % kAlign != 0 || at < consts_offset)
    fail(ErrorCode::internal, "cannot place an appended block at offset {}", at);
  if (sizes.size() > kMaxBlockDims) fail(ErrorCode::internal, "cannot append a program of {} sizes", sizes.size());
  // The block's own constants start right after its header; offsets in the
  // program count from the base's constants section.
  ConstPool pool(at + kBlockHeaderSize - consts_offset, existing);
  std::vector<uint8_t> prog = encode_program(model, pool);
  std::vector<uint8_t> pl = encode_memory_plan(plan, model.values.size());
  const auto ndims = static_cast<uint32_t>(sizes.size());
  Layout l = layout(pool.size(), ndims, prog.size(), pl.size());
  std::vector<uint8_t> out(l.plan.offset + l.plan.size, 0);
  for (auto& c : pool.placements())
    if (c.tensor->nbytes()) std::memcpy(out.data() + l.consts.offset + c.offset, c.tensor->raw(), c.tensor->nbytes());
  for (uint32_t i = 0; i < ndims; ++i) put64(out.data() + l.sizes.offset + 8 * i, static_cast<uint64_t>(sizes[i]));
  std::memcpy(out.data() + l.program.offset, prog.data(), prog.size());
  if (!pl.empty()) std::memcpy(out.data() + l.plan.offset, pl.data(), pl.size());
  uint8_t* h = out.data();
  std::memcpy(h, kBlockMagic, sizeof kBlockMagic);
  put32(h + kBVersion, kFormatVersion);
  put32(h + kBSizesCount, ndims);
  put64(h + kBSize, out.size());
  put64(h + kBBaseTag, base_tag);
  put64(h + kBConstsSize, pool.size());
  put64(h + kBSizesOffset, l.sizes.offset);
  put64(h + kBProgramOffset, l.program.offset);
  put64(h + kBProgramSize, prog.size());
  put64(h + kBPlanOffset, l.plan.offset);
  put64(h + kBPlanSize, pl.size());
  put64(h + kBBodyChecksum, hash64(out.data() + kBlockHeaderSize, out.size() - kBlockHeaderSize));
  put64(h + kBHeaderChecksum, hash64(h, kBHeaderChecksum));
  return out;
}

}  // namespace detail

EntryRead read_entry(const std::filesystem::path& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) fail(ErrorCode::io, "cannot stat '{}': {}", path.string(), std::strerror(errno));
  std::shared_ptr<MappedFile> m = MappedFile::open(path);
  EntryRead e;
  e.program = read_view(m->data(), m->size(), m, path.string(), &e);
  e.mapping = m;
  e.inode = st.st_ino;
  e.device = st.st_dev;
  return e;
}

uint64_t append_program(const std::filesystem::path& path, const EntryRead& entry, const std::vector<int64_t>& sizes,
                        const ir::Model& model, const ir::MemoryPlan& plan) {
  if (!entry.mapping || entry.program.compat.format_version < kFirstAppendVersion)
    fail(ErrorCode::internal, "append_program: '{}' was not read as a format {} entry", path.string(),
         kFirstAppendVersion);
  // A constant the compile took from the entry (a view of the mapping, at an
  // aligned offset inside a constants region) is referred to where it is.
  const auto base = reinterpret_cast<uintptr_t>(entry.mapping->data());
  const uint64_t mapped = entry.mapping->size();
  auto stored_at = [&](const Tensor& t) -> std::optional<uint64_t> {
    const auto p = reinterpret_cast<uintptr_t>(t.raw());
    if (t.nbytes() == 0 || !base || p < base + entry.consts_offset || p >= base + mapped) return std::nullopt;
    const uint64_t off = p - base - entry.consts_offset;
    if (off % kAlign != 0) return std::nullopt;
    for (auto& r : entry.const_regions)
      if (off >= r.offset && off - r.offset <= r.size && t.nbytes() <= r.size - (off - r.offset)) return off;
    return std::nullopt;
  };
  // Equal bytes found elsewhere (a compile imports the weights again, so
  // they equal the entry's without being its buffers): the entry's stored
  // constants keyed by size and the XXH3-64 of their first bytes (cheap to
  // index over hundreds of MB; a candidate is then compared in full), built
  // on first need.
  auto key = [](const Tensor& t) {
    return std::pair{t.nbytes(), hash64(t.raw(), std::min<size_t>(t.nbytes(), 4096))};
  };
  std::multimap<std::pair<size_t, uint64_t>, std::pair<uint64_t, Tensor>> stored;
  bool indexed = false;
  auto index = [&] {
    std::set<const void*> seen;
    auto add = [&](const ir::Model& m) {
      for (auto& v : m.values)
        if (v.constant && v.constant->defined() && seen.insert(v.constant->raw()).second)
          if (auto off = stored_at(*v.constant)) stored.emplace(key(*v.constant), std::pair{*off, *v.constant});
    };
    add(entry.program.model);
    for (auto& v : entry.program.more) add(v.model);
    indexed = true;
  };
  ConstPool::Existing existing = [&](const Tensor& t) -> std::optional<uint64_t> {
    if (auto off = stored_at(t)) return off;
    if (t.nbytes() == 0) return std::nullopt;
    if (!indexed) index();
    for (auto [it, end] = stored.equal_range(key(t)); it != end; ++it) {
      const Tensor& c = it->second.second;
      if (c.nbytes() == t.nbytes() && std::memcmp(c.raw(), t.raw(), t.nbytes()) == 0) return it->second.first;
    }
    return std::nullopt;
  };
  const uint64_t at = align_up(entry.valid_end);
  std::vector<uint8_t> block = encode_block(at, entry.consts_offset, entry.base_tag, sizes, model, plan, existing);
  // One write from the end of the last valid block: zero padding, the block,
  // and zeros over whatever is left of an ignored torn tail.
  const uint64_t end = std::max(at + block.size(), entry.file_bytes);
  std::vector<uint8_t> bytes(end - entry.valid_end, 0);
  std::memcpy(bytes.data() + (at - entry.valid_end), block.data(), block.size());

  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) fail(ErrorCode::io, "cannot open '{}' to append a program: {}", path.string(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) fail(ErrorCode::io, "cannot stat '{}': {}", path.string(), std::strerror(errno));
  if (st.st_ino != entry.inode || st.st_dev != entry.device || static_cast<uint64_t>(st.st_size) != entry.file_bytes)
    fail(ErrorCode::io, "'{}' changed since it was read (replaced, or {} bytes instead of {}): not appended to",
         path.string(), st.st_size, entry.file_bytes);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(entry.valid_end + done));
    if (w < 0 && errno == EINTR) continue;
    // A short write leaves a torn block: readers ignore it, the next append overwrites it.
    if (w <= 0) fail(ErrorCode::io, "cannot append a program to '{}': {}", path.string(), std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  if (::fdatasync(fd) != 0) fail(ErrorCode::io, "cannot sync '{}': {}", path.string(), std::strerror(errno));
  return bytes.size();
}

}  // namespace kiln::artifact

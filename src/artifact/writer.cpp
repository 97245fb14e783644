// Assembles a .kiln file: header, compatibility block, section table,
// sections, each at a 64-byte boundary (docs/file-format.md, "File layout").
#include <cstring>

#include "artifact/artifact.h"
#include "support/error.h"
#include "support/file.h"
#include "support/hash.h"

namespace kiln::artifact {

using namespace detail;

std::vector<uint8_t> serialize(const CompiledProgram& p) {
  if (auto why = metadata_problem(p.metadata_json); !why.empty())
    fail(ErrorCode::internal, "cannot serialise the program: its metadata is {}", why);
  std::vector<uint8_t> compat = encode_compat(p.compat);
  if (compat.size() > kMaxCompatSize)
    fail(ErrorCode::internal, "cannot serialise the program: the compatibility block is {} bytes, at most {}",
         compat.size(), kMaxCompatSize);
  if (p.sizes.size() != p.buckets.dims.size())
    fail(ErrorCode::internal, "cannot serialise the program: {} bucket sizes for {} bucketed dims", p.sizes.size(),
         p.buckets.dims.size());

  // Every program goes through one constant pool, so the constants section
  // holds each distinct constant once whatever the number of programs. The
  // Program and MemoryPlan FlatBuffers of program i follow those of program
  // i-1 in their sections, each at a 64-byte boundary (zero padding between).
  ConstPool pool;
  std::vector<uint8_t> programs, plans;
  std::vector<ProgramSlot> slots;
  auto append = [](std::vector<uint8_t>& sec, const std::vector<uint8_t>& bytes) {
    Region r{sec.empty() ? 0 : align_up(sec.size()), bytes.size()};
    sec.resize(r.offset + r.size, 0);
    if (r.size) std::memcpy(sec.data() + r.offset, bytes.data(), r.size);
    return r;
  };
  auto add_program = [&](const std::vector<int64_t>& sizes, const ir::Model& m, const ir::MemoryPlan& plan) {
    ProgramSlot s;
    s.sizes = sizes;
    s.program = append(programs, encode_program(m, pool));
    s.plan = append(plans, encode_memory_plan(plan, m.values.size()));
    slots.push_back(std::move(s));
  };
  add_program(p.sizes, p.model, p.plan);
  for (auto& v : p.more) add_program(v.sizes, v.model, v.plan);
  std::vector<uint8_t> buckets = encode_buckets(p.buckets, slots);

  // Layout: every region starts at a multiple of kAlign; padding is zero.
  Header h;
  h.compat = {align_up(kHeaderSize), compat.size()};
  h.table_offset = align_up(h.compat.offset + h.compat.size);
  uint64_t cursor = align_up(h.table_offset + kSectionCount * kSectionEntrySize);
  std::vector<SectionEntry> entries;
  auto add = [&](SectionKind k, uint64_t size) {
    entries.push_back({k, {cursor, size}, 0});
    cursor = align_up(cursor + size);
  };
  add(SectionKind::program, programs.size());
  add(SectionKind::memory_plan, plans.size());
  add(SectionKind::kernels, p.kernels.size());
  add(SectionKind::tuning, p.tuning.size());
  add(SectionKind::constants, pool.size());
  add(SectionKind::metadata, p.metadata_json.size());
  add(SectionKind::buckets, buckets.size());
  const Region& last = entries.back().region;
  h.file_size = last.offset + last.size;

  std::vector<uint8_t> out(h.file_size, 0);
  auto put = [&](const Region& r, const void* src) {
    if (r.size) std::memcpy(out.data() + r.offset, src, r.size);
  };
  put(h.compat, compat.data());
  put(entries[0].region, programs.data());
  put(entries[1].region, plans.data());
  put(entries[2].region, p.kernels.data());
  put(entries[3].region, p.tuning.data());
  uint64_t consts_at = entries[4].region.offset;
  for (auto& c : pool.placements())
    if (c.tensor->nbytes()) std::memcpy(out.data() + consts_at + c.offset, c.tensor->raw(), c.tensor->nbytes());
  put(entries[5].region, p.metadata_json.data());
  put(entries[6].region, buckets.data());

  for (auto& e : entries) e.checksum = hash64(out.data() + e.region.offset, e.region.size);
  std::vector<uint8_t> table = encode_section_table(entries);
  std::memcpy(out.data() + h.table_offset, table.data(), table.size());
  h.compat_checksum = hash64(compat.data(), compat.size());
  h.table_checksum = hash64(table.data(), table.size());
  std::vector<uint8_t> header = encode_header(h);
  std::memcpy(out.data(), header.data(), header.size());
  return out;
}

void write_file(const std::filesystem::path& path, const CompiledProgram& p, Links links) {
  std::vector<uint8_t> bytes = serialize(p);
  atomic_write(path, bytes.data(), bytes.size(), links);
}

}  // namespace kiln::artifact

// Section 'buckets' (format version 2; kinds since 3): BucketSet + program slots <->
// FlatBuffers `BucketTable` (docs/file-format.md, "Section 'buckets'"). The
// writer and the reader enforce the same rules, so the writer never produces
// a file its reader refuses.
#include <flatbuffers/flatbuffers.h>

#include <set>

#include "artifact/artifact.h"
#include "artifact/program_generated.h"
#include "support/error.h"

namespace kiln::artifact {

const char* pad_mode_name(PadMode m) {
  switch (m) {
    case PadMode::none: return "none";
    case PadMode::batch: return "batch";
    case PadMode::sequence: return "sequence";
  }
  return "unknown";
}

const char* dim_kind_name(DimKind k) {
  switch (k) {
    case DimKind::declared: return "declared";
    case DimKind::specialized: return "specialized";
    case DimKind::value: return "value";
  }
  return "unknown";
}

namespace detail {

std::string sizes_problem(const BucketSet& set, const std::vector<int64_t>& sizes) {
  if (sizes.size() != set.dims.size()) return fmt::format("has {} sizes for {} dims", sizes.size(), set.dims.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    // A value guard may be any integer; a specialized dim may be empty (0).
    const DimKind kind = set.dims[k].kind;
    if (kind == DimKind::declared ? sizes[k] < 1 : kind == DimKind::specialized ? sizes[k] < 0 : false)
      return fmt::format("has size {} for dim '{}'", sizes[k], set.dims[k].symbol);
  }
  return {};
}

namespace {

// Empty when `set` and `slots` obey the rules of decode_buckets; else why not.
std::string buckets_problem(const BucketSet& set, const std::vector<ProgramSlot>& slots, uint64_t program_bytes,
                            uint64_t plan_bytes) {
  std::set<std::string> names;
  for (auto& d : set.dims) {
    if (d.symbol.empty()) return "a bucketed dim has no name";
    if (!names.insert(d.symbol).second) return fmt::format("dim '{}' is listed twice", d.symbol);
    if (static_cast<uint8_t>(d.kind) > 2) return fmt::format("dim '{}': unknown kind {}", d.symbol, static_cast<int>(d.kind));
    if (d.kind != DimKind::declared) {
      // Specialized dims and value guards declare no sizes: each program's own size is its guard
      // (a specialized dim's max, when not 0, caps the size it may be padded to).
      if (!d.sizes.empty() || d.min != 0 || (d.kind == DimKind::value ? d.max != 0 : d.max < 0))
        return fmt::format("dim '{}' is {} but declares bucket sizes", d.symbol, dim_kind_name(d.kind));
      if (d.kind == DimKind::value && d.pad != PadMode::none)
        return fmt::format("value guard '{}' has a pad mode", d.symbol);
      continue;
    }
    if (d.sizes.empty() || d.sizes.size() > 64) return fmt::format("dim '{}' has {} bucket sizes", d.symbol, d.sizes.size());
    for (size_t i = 0; i < d.sizes.size(); ++i)
      if (d.sizes[i] < 1 || (i && d.sizes[i] <= d.sizes[i - 1]))
        return fmt::format("dim '{}': bucket sizes are not ascending sizes >= 1", d.symbol);
    if (d.min < 1 || d.min > d.sizes.front() || d.max != d.sizes.back())
      return fmt::format("dim '{}': range {}..{} does not match its buckets", d.symbol, d.min, d.max);
    if (static_cast<uint8_t>(d.pad) > 2) return fmt::format("dim '{}': unknown pad mode {}", d.symbol, static_cast<int>(d.pad));
  }
  for (auto* io : {&set.inputs, &set.outputs})
    for (auto& s : *io) {
      if (s.axes.size() > kMaxRank) return fmt::format("'{}' has {} axes", s.name, s.axes.size());
      for (auto& a : s.axes)
        if (!a.empty() && !names.count(a)) return fmt::format("'{}' refers to unknown dim '{}'", s.name, a);
    }
  if (slots.empty() || slots.size() > kMaxPrograms)
    return fmt::format("{} programs (1 .. {} allowed)", slots.size(), kMaxPrograms);
  std::set<std::vector<int64_t>> seen;
  uint64_t prog_end = 0, plan_end = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const ProgramSlot& s = slots[i];
    if (auto why = sizes_problem(set, s.sizes); !why.empty()) return fmt::format("program {} {}", i, why);
    if (!seen.insert(s.sizes).second) return fmt::format("program {} repeats the sizes of an earlier one", i);
    // Programs tile their sections in order, so no byte of either section
    // belongs to no program.
    if (s.program.offset != (i ? align_up(prog_end) : 0) || s.plan.offset != (i ? align_up(plan_end) : 0))
      return fmt::format("program {} does not start where the previous one ends (rounded up to {})", i, kAlign);
    if (s.program.size > program_bytes || s.program.offset > program_bytes - s.program.size ||
        s.plan.size > plan_bytes || s.plan.offset > plan_bytes - s.plan.size)
      return fmt::format("program {} lies outside its sections", i);
    prog_end = s.program.offset + s.program.size;
    plan_end = s.plan.offset + s.plan.size;
  }
  if (prog_end != program_bytes || plan_end != plan_bytes)
    return fmt::format("the programs end at {} and {}, the sections at {} and {}", prog_end, plan_end, program_bytes,
                       plan_bytes);
  return {};
}

}  // namespace

std::vector<uint8_t> encode_buckets(const BucketSet& set, const std::vector<ProgramSlot>& slots) {
  uint64_t prog = slots.empty() ? 0 : slots.back().program.offset + slots.back().program.size;
  uint64_t plan = slots.empty() ? 0 : slots.back().plan.offset + slots.back().plan.size;
  if (auto why = buckets_problem(set, slots, prog, plan); !why.empty())
    fail(ErrorCode::internal, "cannot serialise the bucket table: {}", why);
  flatbuffers::FlatBufferBuilder b(1024);
  b.ForceDefaults(true);
  std::vector<flatbuffers::Offset<fb::BucketDim>> dims;
  for (auto& d : set.dims) {
    auto sym = b.CreateString(d.symbol);
    auto sizes = b.CreateVector(d.sizes);
    dims.push_back(
        fb::CreateBucketDim(b, sym, d.min, d.max, sizes, static_cast<uint8_t>(d.pad), static_cast<uint8_t>(d.kind)));
  }
  auto io = [&](const std::vector<IoSymbols>& v) {
    std::vector<flatbuffers::Offset<fb::IoSymbols>> out;
    for (auto& s : v) {
      auto name = b.CreateString(s.name);
      auto axes = b.CreateVectorOfStrings(s.axes);
      out.push_back(fb::CreateIoSymbols(b, name, axes));
    }
    return b.CreateVector(out);
  };
  auto dims_v = b.CreateVector(dims);
  auto ins = io(set.inputs), outs = io(set.outputs);
  std::vector<flatbuffers::Offset<fb::ProgramSlot>> ps;
  for (auto& s : slots) {
    auto sizes = b.CreateVector(s.sizes);
    ps.push_back(fb::CreateProgramSlot(b, sizes, s.program.offset, s.program.size, s.plan.offset, s.plan.size));
  }
  auto ps_v = b.CreateVector(ps);
  b.Finish(fb::CreateBucketTable(b, dims_v, ins, outs, ps_v));
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

void decode_buckets(const uint8_t* p, size_t n, uint64_t program_bytes, uint64_t plan_bytes, BucketSet& set,
                    std::vector<ProgramSlot>& slots, const std::string& what) {
  const char* region = "section 'buckets'";
  if (n >= FLATBUFFERS_MAX_BUFFER_SIZE) corrupt(what, region, "too large for FlatBuffers");
  flatbuffers::Verifier v(p, n, 64, verifier_max_tables(n));
  if (!v.VerifyBuffer<fb::BucketTable>(nullptr)) corrupt(what, region, "FlatBuffers verification failed");
  const fb::BucketTable* t = flatbuffers::GetRoot<fb::BucketTable>(p);
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  // The FlatBuffers 2.0.8 verifier checks only a vector's length prefix;
  // 8-byte elements must be aligned before they are read.
  auto longs = [&](const flatbuffers::Vector<int64_t>* vec) {
    std::vector<int64_t> out;
    if (!vec) return out;
    if (vec->size() && !vector_data_aligned(vec, 8)) corrupt(what, region, "a vector of 8-byte elements is misaligned");
    if (vec->size() > 64) corrupt(what, region, fmt::format("a list of {} sizes (at most 64)", vec->size()));
    out.assign(vec->begin(), vec->end());
    return out;
  };
  set = {};
  slots.clear();
  if (auto dims = t->dims()) {
    if (dims->size() > 64) corrupt(what, region, fmt::format("{} bucketed dims (at most 64)", dims->size()));
    for (auto d : *dims) {
      BucketDim bd;
      bd.symbol = str(d->symbol());
      bd.min = d->min();
      bd.max = d->max();
      bd.sizes = longs(d->sizes());
      if (d->pad() > 2) corrupt(what, region, fmt::format("dim '{}': unknown pad mode {}", bd.symbol, d->pad()));
      bd.pad = static_cast<PadMode>(d->pad());
      if (d->kind() > 2) corrupt(what, region, fmt::format("dim '{}': unknown kind {}", bd.symbol, d->kind()));
      bd.kind = static_cast<DimKind>(d->kind());
      set.dims.push_back(std::move(bd));
    }
  }
  auto io = [&](const flatbuffers::Vector<flatbuffers::Offset<fb::IoSymbols>>* vec, std::vector<IoSymbols>& out) {
    if (!vec) return;
    for (auto s : *vec) {
      IoSymbols x;
      x.name = str(s->name());
      if (auto axes = s->axes()) {
        if (axes->size() > kMaxRank) corrupt(what, region, fmt::format("'{}' has {} axes", x.name, axes->size()));
        for (auto a : *axes) x.axes.push_back(str(a));
      }
      out.push_back(std::move(x));
    }
  };
  io(t->inputs(), set.inputs);
  io(t->outputs(), set.outputs);
  if (auto ps = t->programs()) {
    if (ps->size() > kMaxPrograms) corrupt(what, region, fmt::format("{} programs (at most {})", ps->size(), kMaxPrograms));
    for (auto s : *ps)
      slots.push_back({longs(s->sizes()), {s->program_offset(), s->program_size()}, {s->plan_offset(), s->plan_size()}});
  }
  if (auto why = buckets_problem(set, slots, program_bytes, plan_bytes); !why.empty()) corrupt(what, region, why);
}

}  // namespace detail
}  // namespace kiln::artifact

// ir::MemoryPlan <-> FlatBuffers `MemoryPlan` (docs/file-format.md,
// "Section 'memory_plan'"). Both directions enforce the same rules, so the
// writer never produces a file its reader refuses.
#include <flatbuffers/flatbuffers.h>

#include "artifact/artifact.h"
#include "artifact/program_generated.h"
#include "support/error.h"

namespace kiln::artifact::detail {

namespace {

// Empty when the plan is usable for a model of `nvalues` values; else why not.
std::string plan_problem(const ir::MemoryPlan& p, size_t nvalues) {
  if (p.offsets.size() != p.sizes.size())
    return fmt::format("{} offsets but {} sizes", p.offsets.size(), p.sizes.size());
  if (!p.offsets.empty() && p.offsets.size() != nvalues)
    return fmt::format("the plan covers {} values, the program has {}", p.offsets.size(), nvalues);
  for (size_t i = 0; i < p.offsets.size(); ++i) {
    int64_t off = p.offsets[i];
    if (off < -1) return fmt::format("value {} has arena offset {}", i, off);
    if (off >= 0 && (static_cast<uint64_t>(off) > p.arena_bytes || p.sizes[i] > p.arena_bytes - static_cast<uint64_t>(off)))
      return fmt::format("value {} at [{}, +{}) lies outside the {}-byte arena", i, off, p.sizes[i], p.arena_bytes);
  }
  return {};
}

}  // namespace

std::vector<uint8_t> encode_memory_plan(const ir::MemoryPlan& plan, size_t nvalues) {
  if (auto why = plan_problem(plan, nvalues); !why.empty())
    fail(ErrorCode::internal, "cannot serialise the memory plan: {}", why);
  flatbuffers::FlatBufferBuilder b(1024);
  b.ForceDefaults(true);
  auto offsets = b.CreateVector(plan.offsets);
  auto sizes = b.CreateVector(plan.sizes);
  b.Finish(fb::CreateMemoryPlan(b, plan.arena_bytes, offsets, sizes, plan.naive_bytes));
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

ir::MemoryPlan decode_memory_plan(const uint8_t* p, size_t n, size_t nvalues, const std::string& what) {
  const char* region = "section 'memory_plan'";
  if (n >= FLATBUFFERS_MAX_BUFFER_SIZE) corrupt(what, region, "too large for FlatBuffers");
  flatbuffers::Verifier v(p, n, 64, verifier_max_tables(n));
  if (!v.VerifyBuffer<fb::MemoryPlan>(nullptr)) corrupt(what, region, "FlatBuffers verification failed");
  const fb::MemoryPlan* mp = flatbuffers::GetRoot<fb::MemoryPlan>(p);
  ir::MemoryPlan out;
  out.arena_bytes = mp->arena_bytes();
  out.naive_bytes = mp->naive_bytes();
  auto o = mp->offsets();
  auto s = mp->sizes();
  // Empty vectors hold nothing to read (and the builder may misalign them).
  if ((o && o->size() && !vector_data_aligned(o, 8)) || (s && s->size() && !vector_data_aligned(s, 8)))
    corrupt(what, region, "a vector of 8-byte elements is misaligned");
  if (o) out.offsets.assign(o->begin(), o->end());
  if (s) out.sizes.assign(s->begin(), s->end());
  if (auto why = plan_problem(out, nvalues); !why.empty()) corrupt(what, region, why);
  return out;
}

}  // namespace kiln::artifact::detail

// Static memory plan (see passes.h for the algorithm's source).
#include <algorithm>
#include <set>

#include "passes/passes.h"

namespace kiln::passes {

namespace {
constexpr uint64_t kAlign = 64;

struct Interval {
  ir::ValueId id;
  int first, last;
  uint64_t size;
};
}  // namespace

ir::MemoryPlan plan_memory(const ir::Model& m, bool lowered_bodies) {
  ir::MemoryPlan plan;
  plan.offsets.assign(m.values.size(), -1);
  plan.sizes.assign(m.values.size(), 0);
  std::set<ir::ValueId> outputs(m.main.outputs.begin(), m.main.outputs.end());
  std::vector<int> first(m.values.size(), -1), last(m.values.size(), -1);
  const auto& nodes = m.main.nodes;
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    for (auto id : nodes[i].outputs)
      if (id != ir::kNoValue) first[id] = last[id] = i;
    auto use = [&](ir::ValueId id) {
      if (id != ir::kNoValue) last[id] = std::max(last[id], i);
    };
    for (auto id : nodes[i].inputs) use(id);
    // Values read inside a subgraph stay live until the node that owns it ends.
    const bool planned_body = lowered_bodies && !nodes[i].domain.empty();
    for (auto& [k, a] : nodes[i].attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a))
        for_each_graph(**sg, [&](ir::Graph& g) {
          for (auto& n : g.nodes) {
            for (auto id : n.inputs) use(id);
            if (planned_body)
              for (auto id : n.outputs)
                if (id != ir::kNoValue && first[id] < 0) first[id] = last[id] = i;
          }
          for (auto id : g.outputs) use(id);
        });
  }
  std::vector<Interval> items;
  for (size_t id = 0; id < m.values.size(); ++id) {
    const auto& v = m.values[id];
    if (first[id] < 0 || v.constant || outputs.count(static_cast<ir::ValueId>(id))) continue;
    if (!v.shape || !ir::is_static(*v.shape) || dtype_size(v.dtype) == 0) continue;
    uint64_t bytes = dtype_size(v.dtype);
    for (auto& d : *v.shape) bytes *= static_cast<uint64_t>(d.value);
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    if (bytes == 0) continue;
    items.push_back({static_cast<ir::ValueId>(id), first[id], last[id], bytes});
    plan.naive_bytes += bytes;
  }
  std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.size > b.size; });
  std::vector<Interval> placed;  // sorted by offset
  std::vector<uint64_t> placed_off;
  for (auto& it : items) {
    // Collect the placed intervals alive at the same time, by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j = 0; j < placed.size(); ++j)
      if (placed[j].first <= it.last && it.first <= placed[j].last)
        busy.push_back({placed_off[j], placed_off[j] + placed[j].size});
    std::sort(busy.begin(), busy.end());
    uint64_t off = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
    for (auto& [b, e] : busy) {
      if (b >= off && b - off >= it.size && b - off < best_gap) {
        best = off;
        best_gap = b - off;
      }
      off = std::max(off, e);
    }
    if (best == UINT64_MAX) best = off;
    placed.push_back(it);
    placed_off.push_back(best);
    plan.offsets[it.id] = static_cast<int64_t>(best);
    plan.sizes[it.id] = it.size;
    plan.arena_bytes = std::max(plan.arena_bytes, best + it.size);
  }
  return plan;
}

}  // namespace kiln::passes

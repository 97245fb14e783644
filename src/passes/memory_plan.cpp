// Static memory plan (see passes.h for the algorithm's source).
#include <algorithm>
#include <functional>
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

/// Values placed inside another value's memory: the inputs of a node with
/// attribute "in_place_offsets" (a cpu Concat) inside its output 0.
///
/// Each group of aliased values has a root (a node output that is no
/// other's part) whose bytes are tiled by its concat's inputs: each range
/// holds one value's data, written by that value's producer when the value
/// lives there, else copied in by the concat. A value lives in one place; a
/// group joins a later concat's output only where that concat's inputs from
/// the group tile the group's whole extent at the offsets they already have,
/// so every byte of a group only ever holds one value's data.
class Aliases {
 public:
  Aliases(size_t nvalues, std::function<uint64_t(ir::ValueId)> bytes)
      : parent_(nvalues, ir::kNoValue), offset_(nvalues, 0), bytes_(std::move(bytes)) {}

  /// The root of v and v's byte offset inside it.
  ir::ValueId root(ir::ValueId v, uint64_t& off) const {
    off = 0;
    while (parent_[v] != ir::kNoValue) {
      off += offset_[v];
      v = parent_[v];
    }
    return v;
  }

  /// Places what it can of node n's inputs inside output y (bytes_ > 0 for
  /// every value that may be placed; 0: not in the plan, copied).
  void concat(const ir::Node& n, ir::ValueId y, const std::vector<int64_t>& offs) {
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      ir::ValueId x = n.inputs[j];
      uint64_t off = static_cast<uint64_t>(offs[j]), o = 0;
      if (x == ir::kNoValue || bytes_(x) == 0) continue;  // copied by the concat
      ir::ValueId r = root(x, o);
      if (r == y) continue;  // already in y (in its slot, or copied to this one)
      // x alone (o = 0, its group is its own extent: this input's range) or
      // a part of group r that y's inputs reproduce in full: r goes into y.
      if (off >= o && covers(n, offs, r, off - o, bytes_(y))) {
        parent_[r] = y;
        offset_[r] = off - o;
      }
    }
  }

  bool aliased(ir::ValueId v) const { return parent_[v] != ir::kNoValue; }

 private:
  /// True when the inputs of n inside group r, each at the offset it has in
  /// r plus `base`, tile r's extent [base, base + bytes(r)) within y.
  bool covers(const ir::Node& n, const std::vector<int64_t>& offs, ir::ValueId r, uint64_t base, uint64_t ybytes) {
    uint64_t rb = bytes_(r), tiled = 0;
    if (base + rb > ybytes) return false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      ir::ValueId x = n.inputs[k];
      uint64_t o = 0;
      if (x == ir::kNoValue || bytes_(x) == 0 || root(x, o) != r) continue;
      uint64_t at = static_cast<uint64_t>(offs[k]);
      if (at != base + o) continue;  // elsewhere in the concat: copied there
      tiled += bytes_(x);
    }
    return tiled == rb;
  }

  std::vector<ir::ValueId> parent_;
  std::vector<uint64_t> offset_;
  std::function<uint64_t(ir::ValueId)> bytes_;
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
  // Exact bytes of each value the plan places (0: not placed).
  std::vector<uint64_t> exact(m.values.size(), 0);
  for (size_t id = 0; id < m.values.size(); ++id) {
    const auto& v = m.values[id];
    if (first[id] < 0 || v.constant || outputs.count(static_cast<ir::ValueId>(id))) continue;
    if (!v.shape || !ir::is_static(*v.shape) || dtype_size(v.dtype) == 0) continue;
    uint64_t bytes = dtype_size(v.dtype);
    for (auto& d : *v.shape) bytes *= static_cast<uint64_t>(d.value);
    exact[id] = bytes;
  }
  Aliases aliases(m.values.size(), [&](ir::ValueId v) { return exact[v]; });
  for (auto& n : nodes) {
    if (!n.has("in_place_offsets") || n.outputs.empty() || n.outputs[0] == ir::kNoValue) continue;
    ir::ValueId y = n.outputs[0];
    auto offs = n.ints("in_place_offsets");
    bool fits = exact[y] > 0 && offs.size() == n.inputs.size();
    for (size_t j = 0; fits && j < offs.size(); ++j)
      fits = offs[j] >= 0 && (n.inputs[j] == ir::kNoValue || exact[n.inputs[j]] <= exact[y] - static_cast<uint64_t>(offs[j]));
    if (fits) aliases.concat(n, y, offs);
  }
  // A group is live from its first member's producer to its last reader.
  for (size_t id = 0; id < m.values.size(); ++id) {
    uint64_t o = 0;
    ir::ValueId r = aliases.root(static_cast<ir::ValueId>(id), o);
    if (r == static_cast<ir::ValueId>(id)) continue;
    first[r] = std::min(first[r], first[id]);
    last[r] = std::max(last[r], last[id]);
  }
  std::vector<Interval> items;
  for (size_t id = 0; id < m.values.size(); ++id) {
    uint64_t bytes = (exact[id] + kAlign - 1) / kAlign * kAlign;
    if (bytes == 0) continue;
    plan.naive_bytes += bytes;
    if (!aliases.aliased(static_cast<ir::ValueId>(id)))
      items.push_back({static_cast<ir::ValueId>(id), first[id], last[id], bytes});
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
  for (size_t id = 0; id < m.values.size(); ++id) {
    uint64_t o = 0;
    ir::ValueId r = aliases.root(static_cast<ir::ValueId>(id), o);
    if (r == static_cast<ir::ValueId>(id)) continue;
    plan.offsets[id] = plan.offsets[r] + static_cast<int64_t>(o);
    plan.sizes[id] = exact[id];
  }
  return plan;
}

}  // namespace kiln::passes

// Dead code elimination: backwards liveness from graph outputs.
#include <vector>

#include "passes/passes.h"

namespace kiln::passes {

namespace {
// Marks values used by g (including by its subgraphs) and drops dead nodes.
int sweep(ir::Graph& g, std::vector<char>& live) {
  int removed = 0;
  for (auto id : g.outputs) live[id] = 1;
  std::vector<ir::Node> kept;
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    bool needed = false;
    for (auto id : it->outputs)
      if (id != ir::kNoValue && live[id]) needed = true;
    if (!needed) {
      ++removed;
      continue;
    }
    for (auto id : it->inputs)
      if (id != ir::kNoValue) live[id] = 1;
    for (auto& [k, a] : it->attrs)
      if (auto* sg = std::get_if<std::shared_ptr<ir::Graph>>(&a)) {
        // A body's own inputs are bound by the node; everything else it reads is live outside.
        removed += sweep(**sg, live);
      }
    kept.push_back(std::move(*it));
  }
  g.nodes.assign(std::make_move_iterator(kept.rbegin()), std::make_move_iterator(kept.rend()));
  return removed;
}
}  // namespace

int eliminate_dead_code(ir::Model& m) {
  std::vector<char> live(m.values.size(), 0);
  int removed = sweep(m.main, live);
  for (size_t i = 0; i < m.values.size(); ++i)
    if (!live[i] && m.values[i].constant) m.values[i].constant.reset();  // drop unused weights
  return removed;
}

}  // namespace kiln::passes

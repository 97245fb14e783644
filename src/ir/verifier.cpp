#include <vector>

#include "ir/graph.h"
#include "support/error.h"

namespace kiln::ir {

namespace {
void verify_graph(const Model& m, const Graph& g, std::vector<int>& defined, int depth) {
  auto check_id = [&](ValueId id, const Node* n) {
    if (id < 0 || static_cast<size_t>(id) >= m.values.size())
      fail(ErrorCode::invalid_model, "{} refers to value id {} which does not exist", n ? n->label() : "graph", id);
  };
  std::vector<ValueId> local;
  for (auto id : g.inputs) {
    check_id(id, nullptr);
    defined[id] = depth;
    local.push_back(id);
  }
  for (auto& n : g.nodes) {
    for (auto id : n.inputs) {
      if (id == kNoValue) continue;
      check_id(id, &n);
      if (defined[id] < 0 && !m.values[id].constant)
        fail(ErrorCode::invalid_model, "{}: input '{}' is used before it is produced (graph is not topologically sorted, or the value has no producer)",
             n.label(), m.values[id].name);
    }
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<Graph>>(&a)) verify_graph(m, **sg, defined, depth + 1);
    for (auto id : n.outputs) {
      if (id == kNoValue) continue;
      check_id(id, &n);
      if (defined[id] >= 0 || m.values[id].constant)
        fail(ErrorCode::invalid_model, "{}: output '{}' is produced more than once", n.label(), m.values[id].name);
      defined[id] = depth;
      local.push_back(id);
    }
  }
  for (auto id : g.outputs) {
    check_id(id, nullptr);
    if (defined[id] < 0 && !m.values[id].constant)
      fail(ErrorCode::invalid_model, "graph '{}' output '{}' is never produced", g.name, m.values[id].name);
  }
  // Values of a subgraph go out of scope when it ends.
  if (depth > 0)
    for (auto id : local) defined[id] = -1;
}
}  // namespace

void verify(const Model& m) {
  std::vector<int> defined(m.values.size(), -1);
  verify_graph(m, m.main, defined, 0);
}

}  // namespace kiln::ir

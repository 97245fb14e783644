#include <fmt/format.h>

#include "ir/graph.h"

namespace kiln::ir {

namespace {
void print_graph(const Model& m, const Graph& g, std::string& out, int indent) {
  std::string pad(static_cast<size_t>(indent) * 2, ' ');
  auto val = [&](ValueId id) {
    if (id == kNoValue) return std::string("<none>");
    auto& v = m.value(id);
    return fmt::format("%{}:{}{}", v.name, dtype_name(v.dtype), shape_str(v.shape));
  };
  for (auto id : g.inputs) out += pad + "input " + val(id) + "\n";
  for (auto& n : g.nodes) {
    std::string ins, outs;
    for (auto id : n.inputs) ins += (ins.empty() ? "" : ", ") + val(id);
    for (auto id : n.outputs) outs += (outs.empty() ? "" : ", ") + val(id);
    out += fmt::format("{}{} = {}({})  # {}\n", pad, outs, n.op_type, ins, n.name);
    for (auto& [k, a] : n.attrs)
      if (auto* sg = std::get_if<std::shared_ptr<Graph>>(&a)) {
        out += fmt::format("{}  {}:\n", pad, k);
        print_graph(m, **sg, out, indent + 2);
      }
  }
  for (auto id : g.outputs) out += pad + "output " + val(id) + "\n";
}
}  // namespace

std::string print(const Model& m) {
  std::string out = fmt::format("model opset {} ({} values)\n", m.opset, m.values.size());
  print_graph(m, m.main, out, 0);
  return out;
}

}  // namespace kiln::ir

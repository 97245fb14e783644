// `kiln inspect --json MODEL.onnx` (runtime/inspect_model.h).
#include "runtime/inspect_model.h"

#include <set>

#include "onnx/importer.h"
#include "runtime/data_dependent.h"
#include "runtime/inspect.h"
#include "runtime/program.h"

namespace kiln {

using json = nlohmann::ordered_json;

json inspect_model(const std::string& path) {
  ir::Model m = onnx_import::import_file(path);
  auto [ops, nodes] = operator_histogram(m.main);
  auto [weights, weight_bytes] = constant_totals(m);
  json ins = json::array(), outs = json::array();
  std::set<std::string> symbols;
  for (auto id : m.main.inputs) {
    TensorInfo t = tensor_info(m.value(id));
    for (size_t k = 0; k < t.dims.size(); ++k)
      if (t.dims[k] < 0) symbols.insert(t.symbols[k].empty() ? t.name + "[" + std::to_string(k) + "]" : t.symbols[k]);
    ins.push_back(info_json(t));
  }
  for (auto id : m.main.outputs) outs.push_back(info_json(tensor_info(m.value(id))));
  json dd = json::array();
  for (auto& d : data_dependent_dims(m))
    dd.push_back({{"node", d.node}, {"op", d.op}, {"value", d.value}, {"axis", d.axis},
                  {"bound", d.bound.empty() ? json(nullptr) : json(d.bound)}, {"max", d.max >= 0 ? json(d.max) : json(nullptr)}});
  return {{"model", path},     {"opset", m.opset},       {"inputs", ins},
          {"outputs", outs},   {"nodes", nodes},         {"operators", ops},
          {"weights", weights}, {"weight_bytes", weight_bytes},
          {"symbolic_dims", std::vector<std::string>(symbols.begin(), symbols.end())},
          {"data_dependent_dims", dd}};
}

json inspect_file(const std::string& path) { return is_artifact(path) ? inspect_artifact(path) : inspect_model(path); }

}  // namespace kiln

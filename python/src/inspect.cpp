// kiln.inspect / kiln.check for the Python module: the same JSON objects as
// `kiln inspect --json` and `kiln check --json` (tools/kiln/cmd_inspect.cpp)
// for the fields they share; python/tests/test_api.py compares the two.
#include "inspect.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "artifact/artifact.h"
#include "kiln/errors.h"
#include "onnx/importer.h"
#include "runtime/program.h"
#include "targets/host.h"

namespace kiln::py {

namespace {

using json = nlohmann::ordered_json;

json info_json(const TensorInfo& t) {
  json shape = json::array();
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (t.dims[i] >= 0) shape.push_back(t.dims[i]);
    else shape.push_back(i < t.symbols.size() && !t.symbols[i].empty() ? t.symbols[i] : "?");
  }
  return {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", shape}};
}

/// Text of `j`; bytes that are not UTF-8 (names come from models) become U+FFFD.
std::string text(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// Operator histogram ("domain.op" for non-default domains) and node count, subgraphs included.
std::pair<json, size_t> operators(ir::Graph& main) {
  std::map<std::string, int> ops;
  size_t nodes = 0;
  for_each_graph(main, [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      ++ops[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type];
      ++nodes;
    }
  });
  json j = json::object();
  for (auto& [k, v] : ops) j[k] = v;
  return {j, nodes};
}

std::string inspect_model(const std::string& path) {
  ir::Model m = onnx_import::import_file(path);
  auto [ops, nodes] = operators(m.main);
  uint64_t weight_bytes = 0;
  int weights = 0;
  for (auto& v : m.values)
    if (v.constant) {
      weight_bytes += v.constant->nbytes();
      ++weights;
    }
  json ins = json::array(), outs = json::array();
  std::set<std::string> symbols;
  for (auto id : m.main.inputs) {
    TensorInfo t = tensor_info(m.value(id));
    for (size_t k = 0; k < t.dims.size(); ++k)
      if (t.dims[k] < 0) symbols.insert(t.symbols[k].empty() ? t.name + "[" + std::to_string(k) + "]" : t.symbols[k]);
    ins.push_back(info_json(t));
  }
  for (auto id : m.main.outputs) outs.push_back(info_json(tensor_info(m.value(id))));
  return text({{"model", path}, {"opset", m.opset}, {"inputs", ins}, {"outputs", outs}, {"nodes", nodes},
               {"operators", ops}, {"weights", weights}, {"weight_bytes", weight_bytes},
               {"symbolic_dims", std::vector<std::string>(symbols.begin(), symbols.end())}});
}

std::string inspect_artifact(const std::string& path) {
  auto cp = artifact::read_file(path);
  auto [ops, nodes] = operators(cp.model.main);
  uint64_t const_bytes = 0;
  int consts = 0;
  for (auto& v : cp.model.values)
    if (v.constant) {
      const_bytes += v.constant->nbytes();
      ++consts;
    }
  // Distinct constant buffers over every program (each is stored once).
  std::set<const void*> seen;
  uint64_t stored_bytes = 0;
  auto count_stored = [&](const ir::Model& m) {
    for (auto& v : m.values)
      if (v.constant && seen.insert(v.constant->raw()).second) stored_bytes += v.constant->nbytes();
  };
  count_stored(cp.model);
  for (auto& v : cp.more) count_stored(v.model);
  json programs = json::array();
  auto program_json = [&](const std::vector<int64_t>& sizes, const ir::Model& m, const ir::MemoryPlan& plan) {
    json sz = json::object();
    bool declared = true;
    for (size_t k = 0; k < sizes.size() && k < cp.buckets.dims.size(); ++k) {
      sz[cp.buckets.dims[k].symbol] = sizes[k];
      auto& ds = cp.buckets.dims[k].sizes;
      declared &= std::find(ds.begin(), ds.end(), sizes[k]) != ds.end();
    }
    programs.push_back({{"sizes", sz}, {"kind", declared ? "bucket" : "exact"}, {"nodes", m.main.nodes.size()},
                        {"arena_bytes", plan.arena_bytes}});
  };
  program_json(cp.sizes, cp.model, cp.plan);
  for (auto& v : cp.more) program_json(v.sizes, v.model, v.plan);
  json dims = json::array();
  for (auto& d : cp.buckets.dims)
    dims.push_back({{"name", d.symbol}, {"min", d.min}, {"max", d.max}, {"sizes", d.sizes},
                    {"pad", artifact::pad_mode_name(d.pad)}});
  json compat = json::object();
  for (auto& [k, v] : cp.compat.fields()) compat[k] = v;
  json ins = json::array(), outs = json::array();
  for (auto id : cp.model.main.inputs) ins.push_back(info_json(tensor_info(cp.model.value(id))));
  for (auto id : cp.model.main.outputs) outs.push_back(info_json(tensor_info(cp.model.value(id))));
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  return text({{"artifact", path},
               {"file_bytes", ec ? 0 : size},
               {"compat", compat},
               {"inputs", ins},
               {"outputs", outs},
               {"nodes", nodes},
               {"operators", ops},
               {"constants", consts},
               {"constant_bytes", const_bytes},
               {"constants_stored_bytes", stored_bytes},
               {"arena_bytes", cp.plan.arena_bytes},
               {"buckets", {{"dims", dims}, {"programs", programs}}},
               {"metadata", json::parse(cp.metadata_json.empty() ? "{}" : cp.metadata_json, nullptr, false)}});
}

}  // namespace

bool is_artifact(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".kiln") return true;
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && std::string(magic, 4) == "KILN";
}

std::string inspect_json(const std::string& path) {
  if (path.empty()) throw Error(ErrorCode::invalid_option, "inspect: the path is empty");
  return is_artifact(path) ? inspect_artifact(path) : inspect_model(path);
}

std::string check_json(const std::string& path, const std::string& target_text) {
  if (path.empty()) throw Error(ErrorCode::invalid_option, "check: the path is empty");
  auto compat = artifact::read_compat(path);
  Target target = Target::parse(target_text.empty() ? compat.target : target_text);
  const artifact::CompatInfo here = targets::host_facts(target);
  auto mismatches = targets::compare_facts(compat, here);
  auto notes = mismatches.empty() ? targets::compat_notes(compat, here) : std::vector<std::string>{};
  json ms = json::array();
  for (auto& m : mismatches) ms.push_back({{"field", m.field}, {"artifact", m.artifact}, {"here", m.here}});
  std::string reason;
  for (auto& m : mismatches) reason += (reason.empty() ? "" : "; ") + m.str();
  return text({{"artifact", path},
               {"runnable", mismatches.empty()},
               {"target", target.name()},
               {"mismatches", ms},
               {"notes", notes},
               {"reason", reason}});
}

}  // namespace kiln::py

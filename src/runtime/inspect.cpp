// `kiln inspect --json ART.kiln` and `kiln check --json` as JSON values
// (runtime/inspect.h): one implementation for the command line and Python.
#include "runtime/inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "artifact/entry.h"
#include "runtime/program.h"
#include "runtime/reference_nodes.h"
#include "support/error.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/run/cuda_ops.h"
#endif

namespace kiln {

using json = nlohmann::ordered_json;

namespace {

/// cuda artifacts: each program's kernels bundle decoded and checked against
/// the cubin digest its Kernel nodes record, so that damage inside a cubin
/// (even with the section checksums rewritten) is found here, not first at a
/// load on a GPU. Throws Error(corrupt_artifact). null for other targets, and
/// in a kiln built without CUDA (which cannot decode bundles).
json cuda_kernels(const std::string& path, const artifact::CompiledProgram& cp) {
  if (cp.compat.target != "cuda") return nullptr;
#ifdef KILN_WITH_CUDA
  std::vector<const ir::Model*> models = {&cp.model};
  for (auto& v : cp.more) models.push_back(&v.model);
  std::set<std::string> digests;
  size_t cubin = 0, ptx = 0;
  std::string arch;
  for (size_t i = 0; i < models.size(); ++i) {
    try {
      auto b = targets::cuda::program_bundle(*models[i], cp.kernels, path);
      targets::cuda::check_bundle_matches(*models[i], b);
      if (digests.insert(targets::cuda::cubin_digest(b)).second) cubin += b.cubin.size(), ptx += b.ptx.size();
      arch = b.arch;
    } catch (const Error& e) {
      fail(ErrorCode::corrupt_artifact, "artifact '{}' is corrupt: program {}'s kernels: {}", path, i, e.what());
    }
  }
  return {{"programs", models.size()}, {"cubins", digests.size()}, {"arch", arch}, {"cubin_bytes", cubin},
          {"ptx_bytes", ptx}};
#else
  (void)path;
  return nullptr;
#endif
}

/// cuda: cuBLASLt / cuDNN decisions stored in the artifact vs left to the
/// load (cross-compiled), the cuDNN graph-API convolutions, and which
/// depthwise convolutions run on kiln's kernel and which on cuDNN.
json library_algorithms(const ir::Model& m) {
  int stored = 0, at_load = 0, graph_convs = 0, fused = 0, serialized = 0, dw_kiln = 0, dw_cudnn = 0;
  for (auto& n : m.main.nodes) {
    if (n.domain != "kiln.cuda") continue;
    // lower_depthwise_convs' kernels: "k12_dwconv", from a Conv.
    if (n.op_type == "Kernel" && n.s("source_op", "") == "Conv" && n.s("fn", "").ends_with("_dwconv")) ++dw_kiln;
    // cuDNN's depthwise convolutions: group == input channels == output channels.
    if (n.op_type == "Conv" && n.has("x_dims") && n.has("y_dims")) {
      const auto x = n.ints("x_dims"), y = n.ints("y_dims");  // NCHW-ordered in every layout
      const int64_t g = n.i("group", 1);
      dw_cudnn += x.size() >= 2 && y.size() >= 2 && g > 1 && g == x[1] && g == y[1];
    }
    if (n.op_type != "Gemm" && n.op_type != "Conv") continue;
    const bool graph = n.op_type == "Conv" && n.s("api", "") == "graph";
    bool deferred = n.op_type == "Gemm" ? n.i("algo_at_load", 0) == 1
                    : graph             ? n.i("engine", -1) < 0 && n.s("plan_json", "").empty()
                                        : n.i("algo", 0) == -1;
    (deferred ? at_load : stored)++;
    if (graph) {
      ++graph_convs;
      fused += n.i("bias", 0) || n.i("residual", 0) || n.i("relu", 0);
      serialized += !n.s("plan_json", "").empty();
    }
  }
  return {{"stored", stored}, {"chosen_at_load", at_load}, {"cudnn_graph_convolutions", graph_convs},
          {"fused_epilogues", fused}, {"serialized_plans", serialized},
          {"depthwise_convolutions", {{"kiln_kernel", dw_kiln}, {"cudnn", dw_cudnn}}}};
}

/// Shape buckets: the declared dims and one entry per program ("bucket": every
/// size declared; "specialized": a dim specialized from a request; "exact":
/// a size outside the declared ones).
json buckets_json(const artifact::CompiledProgram& cp) {
  json programs = json::array();
  auto program_json = [&](const std::vector<int64_t>& sizes, const ir::Model& m, const ir::MemoryPlan& plan) {
    json sz = json::object();
    bool declared = true, specialized = false;
    for (size_t k = 0; k < sizes.size() && k < cp.buckets.dims.size(); ++k) {
      auto& d = cp.buckets.dims[k];
      sz[d.symbol] = sizes[k];
      if (d.kind != artifact::DimKind::declared) {
        specialized = true;
        continue;
      }
      declared &= std::find(d.sizes.begin(), d.sizes.end(), sizes[k]) != d.sizes.end();
    }
    const char* kind = !declared ? "exact" : specialized ? "specialized" : "bucket";
    programs.push_back({{"sizes", sz}, {"kind", kind}, {"nodes", m.main.nodes.size()},
                        {"arena_bytes", plan.arena_bytes},
                        {"reference_nodes", reference_json(reference_nodes(m, cp.compat.target))},
                        {"segments", segments_json(m)}});
  };
  program_json(cp.sizes, cp.model, cp.plan);
  for (auto& v : cp.more) program_json(v.sizes, v.model, v.plan);
  json dims = json::array();
  for (auto& d : cp.buckets.dims)
    dims.push_back({{"name", d.symbol}, {"kind", artifact::dim_kind_name(d.kind)}, {"min", d.min}, {"max", d.max},
                    {"sizes", d.sizes}, {"pad", artifact::pad_mode_name(d.pad)}});
  return {{"dims", dims}, {"programs", programs}};
}

}  // namespace

bool is_artifact(const std::string& path) {
  if (std::filesystem::path(path).extension() == ".kiln") return true;
  std::ifstream f(path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && std::string(magic, 4) == "KILN";
}

json info_json(const TensorInfo& t) {
  json shape = json::array();
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (t.dims[i] >= 0) shape.push_back(t.dims[i]);
    else shape.push_back(i < t.symbols.size() && !t.symbols[i].empty() ? t.symbols[i] : "?");
  }
  return {{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", shape}};
}

std::pair<json, size_t> operator_histogram(ir::Graph& main) {
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

std::pair<int, uint64_t> constant_totals(const ir::Model& m) {
  int count = 0;
  uint64_t bytes = 0;
  for (auto& v : m.values)
    if (v.constant) {
      bytes += v.constant->nbytes();
      ++count;
    }
  return {count, bytes};
}

json segments_json(const ir::Model& m) {
  json out = json::array();
  auto value = [&](ir::ValueId id) {
    const ir::Value& v = m.value(id);
    uint64_t bytes = dtype_size(v.dtype);
    if (v.shape && ir::is_static(*v.shape))
      for (auto d : ir::to_sizes(*v.shape)) bytes *= static_cast<uint64_t>(d);
    return json{{"value", v.name}, {"dtype", dtype_name(v.dtype)}, {"shape", ir::shape_str(v.shape)}, {"bytes", bytes}};
  };
  for (auto& s : m.segments) {
    json seg = {{"device", s.device}, {"first_node", s.first}, {"node_count", s.count}};
    if (s.device == "host") {
      json nodes = json::array(), to_host = json::array(), to_device = json::array();
      for (size_t i = s.first; i < s.first + s.count; ++i) {
        const ir::Node& n = m.main.nodes.at(i);
        nodes.push_back({{"name", n.name.empty() ? fmt::format("{} #{}", n.op_type, i) : n.name}, {"op", n.op_type}});
      }
      for (auto id : s.to_host) to_host.push_back(value(id));
      for (auto id : s.to_device) to_device.push_back(value(id));
      seg["nodes"] = nodes;
      seg["copies_to_host"] = to_host;
      seg["copies_to_device"] = to_device;
    }
    out.push_back(seg);
  }
  return out;
}

json conditionals_json(const ir::Model& m) {
  json out = json::array();
  auto body_json = [&m](const ir::Graph& g) {
    std::map<std::string, int> ops;
    std::set<std::string> floats;  // what a body stores: float32 in any program today (lowering.h, body_options)
    for (auto& inner : g.nodes) {
      ++ops[inner.op_type];
      for (auto v : inner.outputs)
        if (v != ir::kNoValue && dtype_is_float(m.value(v).dtype)) floats.insert(std::string(dtype_name(m.value(v).dtype)));
    }
    return json{{"nodes", g.nodes.size()}, {"operators", ops}, {"float_dtypes", floats}};
  };
  for (size_t i = 0; i < m.main.nodes.size(); ++i) {
    const ir::Node& n = m.main.nodes[i];
    if (n.domain != "kiln.cuda" || (n.op_type != "If" && n.op_type != "Loop")) continue;
    const std::string name = n.name.empty() ? fmt::format("{} #{}", n.op_type, i) : n.name;
    if (n.op_type == "Loop") {  // an ONNX Loop or Scan as a WHILE node
      auto named = [&](size_t k) { return k < n.inputs.size() && n.inputs[k] != ir::kNoValue ? m.value(n.inputs[k]).name : ""; };
      out.push_back({{"node", name}, {"index", i}, {"type", "WHILE"}, {"source_op", n.s("source_op", "Loop")},
                     {"trip_count", n.i("trip_count", -1)}, {"max_trip", named(0)}, {"condition", named(1)},
                     {"carried", n.i("carried", 0)}, {"body", body_json(n.graph("body"))}});
      continue;
    }
    json e = {{"node", name}, {"index", i}, {"type", "IF/else"}, {"condition", m.value(n.inputs.at(0)).name}};
    for (const char* b : {"then_branch", "else_branch"}) e[b] = body_json(n.graph(b));
    out.push_back(e);
  }
  return out;
}

json reference_json(const std::vector<ReferenceNode>& nodes) {
  json out = json::array();
  for (auto& r : nodes) out.push_back({{"node", r.node}, {"op", r.op}, {"reason", r.reason}});
  return out;
}

json inspect_artifact(const std::string& path) {
  // Read as the cache reads an entry: a torn append at the end is reported
  // (appended.ignored), not refused; a program it held is simply absent.
  artifact::EntryRead entry = artifact::read_entry(path);
  artifact::CompiledProgram& cp = entry.program;
  auto [ops, nodes] = operator_histogram(cp.model.main);
  auto [consts, const_bytes] = constant_totals(cp.model);
  // Bytes of distinct constants over every program: each is stored once in
  // the file, so several programs viewing one buffer count it once.
  std::set<const void*> seen;
  uint64_t stored_bytes = 0;
  auto count_stored = [&](const ir::Model& m) {
    for (auto& v : m.values)
      if (v.constant && seen.insert(v.constant->raw()).second) stored_bytes += v.constant->nbytes();
  };
  count_stored(cp.model);
  for (auto& v : cp.more) count_stored(v.model);
  json compat = json::object();
  for (auto& [k, v] : cp.compat.fields()) compat[k] = v;
  json ins = json::array(), outs = json::array();
  for (auto id : cp.model.main.inputs) ins.push_back(info_json(tensor_info(cp.model.value(id))));
  for (auto id : cp.model.main.outputs) outs.push_back(info_json(tensor_info(cp.model.value(id))));
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  // Programs appended to a cache entry after its base (format 5).
  json appended = {{"programs", entry.appended},
                   {"base_bytes", entry.base_bytes},
                   {"bytes", entry.valid_end - entry.base_bytes},
                   {"ignored", entry.ignored}};
  const json meta = json::parse(cp.metadata_json.empty() ? "{}" : cp.metadata_json, nullptr, false);
  return {{"artifact", path},
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
          {"buckets", buckets_json(cp)},
          {"appended", appended},
          {"reference_nodes", reference_json(reference_nodes(cp.model, cp.compat.target))},
          {"segments", segments_json(cp.model)},
          {"conditional_nodes", conditionals_json(cp.model)},
          {"library_algorithms", library_algorithms(cp.model)},
          {"kernels", cuda_kernels(path, cp)},
          // 16-bit cuda artifacts: the precision check (precision_check.h), from the metadata; else null.
          {"precision_check", meta.is_object() && meta.contains("precision_check") ? meta["precision_check"] : json()},
          // 16-bit cuda artifacts: which nodes store 16-bit values (precision_check.h: precision_share_json); else null.
          {"precision_share", meta.is_object() && meta.contains("precision_share") ? meta["precision_share"] : json()},
          {"metadata", meta}};
}

CheckReport check_artifact(const std::string& path, const std::string& target_text) {
  CheckReport r;
  r.path = path;
  r.compat = artifact::read_compat(path);
  r.target = Target::parse(target_text.empty() ? r.compat.target : target_text);
  const artifact::CompatInfo here = targets::host_facts(r.target);
  r.mismatches = targets::compare_facts(r.compat, here);
  if (r.mismatches.empty()) r.notes = targets::compat_notes(r.compat, here);
  return r;
}

json check_json(const CheckReport& r) {
  json ms = json::array();
  std::string reason;
  for (auto& m : r.mismatches) {
    ms.push_back({{"field", m.field}, {"artifact", m.artifact}, {"here", m.here}});
    reason += (reason.empty() ? "" : "; ") + m.str();
  }
  return {{"artifact", r.path},
          {"runnable", r.mismatches.empty()},
          {"target", r.target.name()},
          {"mismatches", ms},
          {"notes", r.notes},
          {"reason", reason}};
}

}  // namespace kiln

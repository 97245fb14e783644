// kiln inspect ART.kiln|MODEL.onnx / kiln check ART.kiln
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <map>
#include <set>

#include "artifact/artifact.h"
#include "cli.h"
#include "runtime/reference_nodes.h"
#include "onnx/importer.h"
#include "runtime/program.h"
#include "support/error.h"
#include "targets/host.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/run/cuda_ops.h"
#endif

namespace kiln::cli {

namespace {

json compat_json(const artifact::CompatInfo& c) {
  json j = json::object();
  for (auto& [k, v] : c.fields()) j[k] = v;
  return j;
}

/// kiln inspect MODEL.onnx: what a user needs before compiling (input names,
/// dtypes, which dims are symbolic and so need --shape or --dim, opset,
/// operators, weight bytes). Imports the model; compiles nothing.
void inspect_model(const std::string& path, bool as_json) {
  ir::Model m = onnx_import::import_file(path);
  std::map<std::string, int> ops;
  size_t nodes = 0;
  for_each_graph(m.main, [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      ++ops[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type];
      ++nodes;
    }
  });
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
  if (as_json) {
    print_json({{"model", path}, {"opset", m.opset}, {"inputs", ins}, {"outputs", outs}, {"nodes", nodes},
                {"operators", ops}, {"weights", weights}, {"weight_bytes", weight_bytes},
                {"symbolic_dims", std::vector<std::string>(symbols.begin(), symbols.end())}});
    return;
  }
  std::printf("%s: ONNX model, default-domain opset %d\n", path.c_str(), m.opset);
  std::printf("inputs:\n");
  for (auto& i : ins) std::printf("  %s\n", json_text(i).c_str());
  std::printf("outputs:\n");
  for (auto& o : outs) std::printf("  %s\n", json_text(o).c_str());
  std::printf("graph: %zu nodes, %d weights (%.2f MiB)\n", nodes, weights, weight_bytes / 1048576.0);
  std::string hist;
  for (auto& [op, n] : ops) hist += fmt::format("{}{} x{}", hist.empty() ? "" : ", ", op, n);
  std::printf("operators: %s\n", hist.c_str());
  if (!symbols.empty()) {
    std::string list;
    for (auto& sym : symbols) list += (list.empty() ? "" : ", ") + sym;
    std::printf("symbolic dims: %s (fix them with --shape NAME=DxDx..., or compile buckets with --dim)\n",
                list.c_str());
  }
}

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

void inspect(const std::string& path, bool as_json) {
  if (!is_artifact(path)) return inspect_model(path, as_json);
  auto cp = artifact::read_file(path);
  std::map<std::string, int> ops;
  size_t nodes = 0;
  for_each_graph(cp.model.main, [&](ir::Graph& g) {
    for (auto& n : g.nodes) {
      ++ops[n.domain.empty() ? n.op_type : n.domain + "." + n.op_type];
      ++nodes;
    }
  });
  uint64_t const_bytes = 0;
  int consts = 0;
  for (auto& v : cp.model.values)
    if (v.constant) {
      const_bytes += v.constant->nbytes();
      ++consts;
    }
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
  json buckets = json::object();
  json programs = json::array();
  auto program_json = [&](const std::vector<int64_t>& sizes, const ir::Model& m, const ir::MemoryPlan& plan) {
    json sz = json::object();
    for (size_t k = 0; k < sizes.size() && k < cp.buckets.dims.size(); ++k) sz[cp.buckets.dims[k].symbol] = sizes[k];
    bool declared = true, specialized = false;
    for (size_t k = 0; k < sizes.size() && k < cp.buckets.dims.size(); ++k) {
      auto& d = cp.buckets.dims[k];
      if (d.kind != artifact::DimKind::declared) {
        specialized = true;
        continue;
      }
      declared &= std::find(d.sizes.begin(), d.sizes.end(), sizes[k]) != d.sizes.end();
    }
    const char* kind = !declared ? "exact" : specialized ? "specialized" : "bucket";
    auto ref = reference_nodes(m, cp.compat.target);
    programs.push_back({{"sizes", sz}, {"kind", kind}, {"nodes", m.main.nodes.size()},
                        {"arena_bytes", plan.arena_bytes}, {"reference_nodes", reference_json(ref)}});
  };
  program_json(cp.sizes, cp.model, cp.plan);
  for (auto& v : cp.more) program_json(v.sizes, v.model, v.plan);
  json dims = json::array();
  for (auto& d : cp.buckets.dims)
    dims.push_back({{"name", d.symbol}, {"kind", artifact::dim_kind_name(d.kind)}, {"min", d.min}, {"max", d.max},
                    {"sizes", d.sizes}, {"pad", artifact::pad_mode_name(d.pad)}});
  buckets = {{"dims", dims}, {"programs", programs}};
  json ins = json::array(), outs = json::array();
  for (auto id : cp.model.main.inputs) ins.push_back(info_json(tensor_info(cp.model.value(id))));
  for (auto id : cp.model.main.outputs) outs.push_back(info_json(tensor_info(cp.model.value(id))));
  // cuda: library decisions stored vs left to the load (cross-compiled).
  int stored = 0, at_load = 0, graph_convs = 0, fused = 0, serialized = 0;
  for (auto& n : cp.model.main.nodes) {
    if (n.domain != "kiln.cuda" || (n.op_type != "Gemm" && n.op_type != "Conv")) continue;
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
  json library = {{"stored", stored}, {"chosen_at_load", at_load}, {"cudnn_graph_convolutions", graph_convs},
                  {"fused_epilogues", fused}, {"serialized_plans", serialized}};
  json kernels = cuda_kernels(path, cp);
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (as_json) {
    print_json({{"artifact", path}, {"file_bytes", size}, {"compat", compat_json(cp.compat)}, {"inputs", ins},
                {"outputs", outs}, {"nodes", nodes}, {"operators", ops}, {"constants", consts},
                {"constant_bytes", const_bytes}, {"constants_stored_bytes", stored_bytes},
                {"arena_bytes", cp.plan.arena_bytes}, {"buckets", buckets},
                {"reference_nodes", reference_json(reference_nodes(cp.model, cp.compat.target))},
                {"library_algorithms", library},
                {"kernels", kernels},
                {"metadata", json::parse(cp.metadata_json.empty() ? "{}" : cp.metadata_json, nullptr, false)}});
    return;
  }
  std::printf("%s: kiln artifact, %.2f MiB\n", path.c_str(), size / 1048576.0);
  for (auto& [k, v] : cp.compat.fields()) std::printf("  %-17s %s\n", (k + ":").c_str(), v.c_str());
  std::printf("inputs:\n");
  for (auto& i : ins) std::printf("  %s\n", json_text(i).c_str());
  std::printf("outputs:\n");
  for (auto& o : outs) std::printf("  %s\n", json_text(o).c_str());
  std::printf("program: %zu nodes, %d constants (%.2f MiB), arena %.2f MiB\n", nodes, consts, const_bytes / 1048576.0,
              cp.plan.arena_bytes / 1048576.0);
  if (!kernels.is_null())
    std::printf("kernels: %s cubin(s) for %s, %s bytes of cubin and %s of PTX over %s program(s); every Kernel node's "
                "cubin digest matches\n",
                json_text(kernels["cubins"]).c_str(), kernels["arch"].get<std::string>().c_str(),
                json_text(kernels["cubin_bytes"]).c_str(), json_text(kernels["ptx_bytes"]).c_str(),
                json_text(kernels["programs"]).c_str());
  if (stored || at_load)
    std::printf("library algorithms (cuBLASLt / cuDNN): %d stored%s\n", stored,
                at_load ? fmt::format(", {} chosen by the libraries' heuristics at the first load (cross-compiled)",
                                      at_load).c_str()
                        : "");
  if (graph_convs)
    std::printf("cuDNN graph-API convolutions: %d, %d with a fused epilogue, %d runtime-compiled with a serialized "
                "plan\n",
                graph_convs, fused, serialized);
  if (cp.buckets.empty()) {
    std::printf("buckets: none (one program)\n");
    auto ref = reference_nodes(cp.model, cp.compat.target);
    if (!ref.empty()) {
      std::printf("nodes on reference kernels: %zu\n", ref.size());
      for (auto& r : ref) std::printf("  %s '%s': %s\n", r.op.c_str(), r.node.c_str(), r.reason.c_str());
    }
  } else {
    std::printf("buckets: %zu program(s), constants stored once (%.2f MiB)\n", programs.size(),
                stored_bytes / 1048576.0);
    for (auto& d : dims) std::printf("  dim %s\n", json_text(d).c_str());
    for (auto& p : programs) {
      json brief = p;
      brief.erase("reference_nodes");
      std::printf("  program %s\n", json_text(brief).c_str());
      for (auto& r : p["reference_nodes"])
        std::printf("    on reference kernels: %s '%s': %s\n", r["op"].get<std::string>().c_str(),
                    r["node"].get<std::string>().c_str(), r["reason"].get<std::string>().c_str());
    }
  }
  std::string hist;
  for (auto& [op, n] : ops) hist += fmt::format("{}{} x{}", hist.empty() ? "" : ", ", op, n);
  std::printf("operators: %s\n", hist.c_str());
  std::printf("metadata: %s\n", cp.metadata_json.c_str());
}

void check(const std::string& path, const std::string& target_text, bool as_json) {
  auto compat = artifact::read_compat(path);
  Target target = Target::parse(target_text.empty() ? compat.target : target_text);
  const artifact::CompatInfo here = targets::host_facts(target);
  auto mismatches = targets::compare_facts(compat, here);
  auto notes = mismatches.empty() ? targets::compat_notes(compat, here) : std::vector<std::string>{};
  if (as_json) {
    json ms = json::array();
    for (auto& m : mismatches) ms.push_back({{"field", m.field}, {"artifact", m.artifact}, {"here", m.here}});
    print_json({{"artifact", path},
                {"runnable", mismatches.empty()},
                {"target", target.name()},
                {"mismatches", ms},
                {"notes", notes}});
  } else if (mismatches.empty()) {
    std::printf("%s: can run here (target %s, %s)\n", path.c_str(), target.name().c_str(), compat.device_arch.c_str());
    for (auto& n : notes) std::printf("  note: %s\n", n.c_str());
  } else {
    std::printf("%s: cannot run here:\n", path.c_str());
    for (auto& m : mismatches) std::printf("  %s\n", m.str().c_str());
  }
  if (!mismatches.empty()) throw Exit{static_cast<int>(ErrorCode::incompatible_artifact)};
}

}  // namespace

void add_inspect(CLI::App& app, Common& common) {
  auto path = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "inspect",
      "Show what an artifact was built from and for (validates every checksum; cuda: checks each program's cubin "
      "against its nodes), or, for an ONNX model, its inputs "
      "and outputs (symbolic dims to fix with --shape / --dim), opset, operators and weights.");
  sub->add_option("artifact", *path, "Compiled artifact (.kiln) or ONNX model (.onnx)")->required()->check(non_empty_path());
  sub->add_flag("--json", common.json, "Print one JSON object on stdout");
  sub->callback([path, &common] { inspect(*path, common.json); });
}

void add_check(CLI::App& app, Common& common) {
  auto path = std::make_shared<std::string>();
  auto target = std::make_shared<std::string>();
  auto* sub = app.add_subcommand(
      "check",
      "Can this artifact run here? Reads only the header and compatibility block. Exit 0 if it can (with notes, "
      "e.g. when an artifact for an older GPU architecture will run through its PTX), 3 and the reason (field, "
      "artifact value, value here) if not, 7 if the header or the block is damaged.");
  sub->add_option("artifact", *path, "Compiled artifact (.kiln)")->required()->check(non_empty_path());
  sub->add_option("--target", *target, "Target it must run on (default: the artifact's own)");
  sub->add_flag("--json", common.json, "Print one JSON object on stdout");
  sub->callback([path, target, &common] { check(*path, *target, common.json); });
}

}  // namespace kiln::cli

// kiln inspect ART.kiln|MODEL.onnx / kiln check ART.kiln
#include <fmt/format.h>

#include <cstdio>

#include "cli.h"
#include "runtime/inspect.h"
#include "runtime/inspect_model.h"

namespace kiln::cli {

namespace {

/// `ops` ({"Conv": 3, ...}) as "Conv x3, Relu x2".
std::string histogram_text(const json& ops) {
  std::string hist;
  for (auto& [op, n] : ops.items()) hist += fmt::format("{}{} x{}", hist.empty() ? "" : ", ", op, n.get<int>());
  return hist;
}

void print_tensors(const json& j) {
  std::printf("inputs:\n");
  for (auto& i : j["inputs"]) std::printf("  %s\n", json_text(i).c_str());
  std::printf("outputs:\n");
  for (auto& o : j["outputs"]) std::printf("  %s\n", json_text(o).c_str());
}

/// kiln inspect MODEL.onnx as text, from inspect_model's JSON: what a user
/// needs before compiling (which dims need --shape or --dim, ...).
void print_model(const json& j) {
  std::printf("%s: ONNX model, default-domain opset %d\n", j["model"].get<std::string>().c_str(), j["opset"].get<int>());
  print_tensors(j);
  std::printf("graph: %zu nodes, %d weights (%.2f MiB)\n", j["nodes"].get<size_t>(), j["weights"].get<int>(),
              j["weight_bytes"].get<uint64_t>() / 1048576.0);
  std::printf("operators: %s\n", histogram_text(j["operators"]).c_str());
  std::string list;
  for (auto& sym : j["symbolic_dims"]) list += (list.empty() ? "" : ", ") + sym.get<std::string>();
  if (!list.empty())
    std::printf("symbolic dims: %s (fix them with --shape NAME=DxDx..., or compile buckets with --dim)\n", list.c_str());
  if (!j["data_dependent_dims"].empty()) {
    std::printf("data-dependent dims (sizes known only at run time): %zu\n", j["data_dependent_dims"].size());
    for (auto& d : j["data_dependent_dims"])
      std::printf("  %s '%s': '%s' axis %d, %s\n", d["op"].get<std::string>().c_str(), d["node"].get<std::string>().c_str(),
                  d["value"].get<std::string>().c_str(), d["axis"].get<int>(),
                  d["bound"].is_null() ? "unbounded" : d["bound"].get<std::string>().c_str());
  }
}

/// The precision check of a 16-bit cuda artifact (inspect_artifact's
/// "precision_check", runtime/precision_check.h) as text: its state, then
/// each node kept in float32 and why. Prints nothing for other artifacts.
void print_precision_check(const json& c) {
  if (!c.is_object()) return;
  const std::string state = c.value("state", ""), precision = c.value("precision", "");
  if (state == "off") {
    std::printf("precision check (%s): off (--precision-check off): every node follows the precision policy\n",
                precision.c_str());
    return;
  }
  if (state == "skipped") {
    std::printf("precision check (%s): skipped: %s\n", precision.c_str(), c.value("reason", "").c_str());
    return;
  }
  const json& kept = c["kept"];
  auto num = [](const json& v) { return v.is_number() ? fmt::format("{:.2e}", v.get<double>()) : std::string("inf"); };
  std::printf("precision check (%s): %zu of %s nodes kept in float32 (%s inputs; %s); output error %s -> %s of "
              "its scale (bound %s, growth %sx, %s runs)\n",
              precision.c_str(), kept.size(), json_text(c["nodes"]).c_str(), c.value("inputs", "").c_str(),
              c.value("method", "").c_str(), num(c["output_error_before"]).c_str(),
              num(c["output_error_after"]).c_str(), json_text(c["bound"]).c_str(), json_text(c["growth"]).c_str(),
              json_text(c["rounds"]).c_str());
  for (auto& k : kept)
    std::printf("  %s (%s): %s\n", k.value("node", "").c_str(), k.value("op", "").c_str(),
                k.value("reason", "").c_str());
  // Optional (artifacts of models with If / Loop / Scan or a selection;
  // absent in older artifacts).
  if (c.contains("control_flow"))
    std::printf("  %s If / Loop / Scan node(s) run with their float32 bodies\n", json_text(c["control_flow"]).c_str());
  if (c.contains("boundaries")) {
    std::printf("  %s selection-dependent values not compared; the check is bounded by the values deciding each "
                "selection:\n",
                json_text(c["selection_dependent"]).c_str());
    for (auto& b : c["boundaries"]) {
      std::string values;
      for (auto& v : b["values"]) values += (values.empty() ? "" : ", ") + v.get<std::string>();
      std::printf("  selection: %s (%s) decided by %s (error %s)\n", b.value("node", "").c_str(),
                  b.value("op", "").c_str(), values.empty() ? "constants" : values.c_str(), num(b["error"]).c_str());
    }
  }
}

/// The 16-bit share of a 16-bit cuda artifact (inspect_artifact's
/// "precision_share") as text: the share, then each float32 node and why.
/// Prints nothing for other artifacts (and those compiled before it was stored).
void print_precision_share(const json& s) {
  if (!s.is_object()) return;
  const int nodes = s.value("float_nodes", 0), half = s.value("nodes_16bit", 0);
  std::printf("16-bit share (%s): %d of %d float nodes store their values in 16 bits (%.1f %%)",
              s.value("precision", "").c_str(), half, nodes, nodes ? 100.0 * half / nodes : 100.0);
  if (int c = s.value("clamped_constants", 0)) std::printf("; %d constant(s) clamped to the 16-bit range", c);
  std::printf("\n");
  for (auto& f : s["fp32"])
    std::printf("  float32: %s (%s): %s\n", f.value("node", "").c_str(), f.value("op", "").c_str(),
                f.value("why", "").c_str());
}

/// " in float32" (the float dtypes conditionals_json found a body storing),
/// or "" when it stores no float value (or an older kiln's JSON).
std::string body_floats(const json& body) {
  std::string list;
  if (body.contains("float_dtypes"))
    for (auto& t : body["float_dtypes"]) list += (list.empty() ? "" : ", ") + t.get<std::string>();
  return list.empty() ? "" : " in " + list;
}

void print_reference_nodes(const json& nodes, const char* indent) {
  for (auto& r : nodes)
    std::printf("%s%s '%s': %s\n", indent, r["op"].get<std::string>().c_str(), r["node"].get<std::string>().c_str(),
                r["reason"].get<std::string>().c_str());
}

/// segments_json's partition as text, indented by `indent`; nothing when empty.
void print_segments(const json& segs, const char* indent) {
  if (segs.empty()) return;
  std::printf("%ssegments: %zu (host fallback: nodes the cuda target cannot lower run on the host)\n", indent,
              segs.size());
  for (auto& s : segs) {
    const size_t first = s["first_node"].get<size_t>(), count = s["node_count"].get<size_t>();
    std::printf("%s  %-4s nodes %zu..%zu (%zu)\n", indent, s["device"].get<std::string>().c_str(), first,
                first + count - 1, count);
    if (s["device"] != "host") continue;
    for (auto& n : s["nodes"])
      std::printf("%s    %s '%s'\n", indent, n["op"].get<std::string>().c_str(), n["name"].get<std::string>().c_str());
    for (const char* way : {"copies_to_host", "copies_to_device"})
      for (auto& c : s[way])
        std::printf("%s    copy %s: '%s' %s%s (%s bytes)\n", indent,
                    std::string(way) == "copies_to_host" ? "device -> host" : "host -> device",
                    c["value"].get<std::string>().c_str(), c["dtype"].get<std::string>().c_str(),
                    c["shape"].get<std::string>().c_str(), json_text(c["bytes"]).c_str());
  }
}

/// kiln inspect ART.kiln as text, from inspect_artifact's JSON.
void print_artifact(const json& j) {
  std::printf("%s: kiln artifact, %.2f MiB\n", j["artifact"].get<std::string>().c_str(),
              j["file_bytes"].get<uint64_t>() / 1048576.0);
  for (auto& [k, v] : j["compat"].items()) std::printf("  %-17s %s\n", (k + ":").c_str(), v.get<std::string>().c_str());
  print_tensors(j);
  std::printf("program: %zu nodes, %d constants (%.2f MiB), arena %.2f MiB\n", j["nodes"].get<size_t>(),
              j["constants"].get<int>(), j["constant_bytes"].get<uint64_t>() / 1048576.0,
              j["arena_bytes"].get<uint64_t>() / 1048576.0);
  const json& kernels = j["kernels"];
  if (!kernels.is_null())
    std::printf("kernels: %s cubin(s) for %s, %s bytes of cubin and %s of PTX over %s program(s); every Kernel node's "
                "cubin digest matches\n",
                json_text(kernels["cubins"]).c_str(), kernels["arch"].get<std::string>().c_str(),
                json_text(kernels["cubin_bytes"]).c_str(), json_text(kernels["ptx_bytes"]).c_str(),
                json_text(kernels["programs"]).c_str());
  const json& lib = j["library_algorithms"];
  const int stored = lib["stored"], at_load = lib["chosen_at_load"], graph_convs = lib["cudnn_graph_convolutions"];
  if (stored || at_load)
    std::printf("library algorithms (cuBLASLt / cuDNN): %d stored%s\n", stored,
                at_load ? fmt::format(", {} chosen by the libraries' heuristics at the first load (cross-compiled)",
                                      at_load).c_str()
                        : "");
  if (graph_convs)
    std::printf("cuDNN graph-API convolutions: %d, %d with a fused epilogue, %d runtime-compiled with a serialized "
                "plan\n",
                graph_convs, lib["fused_epilogues"].get<int>(), lib["serialized_plans"].get<int>());
  if (const json& dw = lib["depthwise_convolutions"]; dw.is_object() && (dw["kiln_kernel"] != 0 || dw["cudnn"] != 0))
    std::printf("depthwise convolutions: %d on kiln's generated kernel (Kernel nodes '*_dwconv'), %d on cuDNN\n",
                dw["kiln_kernel"].get<int>(), dw["cudnn"].get<int>());
  const json& buckets = j["buckets"];
  if (buckets["dims"].empty()) {
    std::printf("buckets: none (one program)\n");
    if (!j["reference_nodes"].empty()) {
      std::printf("nodes on reference kernels: %zu\n", j["reference_nodes"].size());
      print_reference_nodes(j["reference_nodes"], "  ");
    }
    print_segments(j["segments"], "");
  } else {
    std::printf("buckets: %zu program(s), constants stored once (%.2f MiB)\n", buckets["programs"].size(),
                j["constants_stored_bytes"].get<uint64_t>() / 1048576.0);
    for (auto& d : buckets["dims"]) std::printf("  dim %s\n", json_text(d).c_str());
    for (auto& p : buckets["programs"]) {
      json brief = p;
      brief.erase("reference_nodes");
      brief.erase("segments");
      std::printf("  program %s\n", json_text(brief).c_str());
      print_reference_nodes(p["reference_nodes"], "    on reference kernels: ");
      print_segments(p["segments"], "    ");
    }
  }
  // A cache entry's programs added after it was published (format 5 blocks).
  const json& app = j["appended"];
  if (app["programs"].get<int>() > 0)
    std::printf("appended programs: %d (%.2f MiB after the %.2f MiB base)\n", app["programs"].get<int>(),
                app["bytes"].get<uint64_t>() / 1048576.0, app["base_bytes"].get<uint64_t>() / 1048576.0);
  if (!app["ignored"].get<std::string>().empty())
    std::printf("ignored: %s (a torn append; the cache compiles such a program again)\n",
                app["ignored"].get<std::string>().c_str());
  print_precision_check(j["precision_check"]);
  print_precision_share(j["precision_share"]);
  for (auto& c : j["conditional_nodes"]) {
    if (c["type"] == "WHILE") {  // an ONNX Loop / Scan
      const int64_t trips = c["trip_count"].get<int64_t>();
      std::printf("conditional node (in the CUDA graph): WHILE '%s' (%s), %s, %s carried value(s), body %s nodes %s%s\n",
                  c["node"].get<std::string>().c_str(), c["source_op"].get<std::string>().c_str(),
                  trips >= 0 ? ("trip count " + std::to_string(trips)).c_str() : "trip count decided on the device",
                  json_text(c["carried"]).c_str(), json_text(c["body"]["nodes"]).c_str(),
                  json_text(c["body"]["operators"]).c_str(), body_floats(c["body"]).c_str());
      continue;
    }
    std::printf("conditional node (in the CUDA graph): %s '%s' on '%s', then_branch %s nodes %s%s, else_branch %s nodes "
                "%s%s\n",
                c["type"].get<std::string>().c_str(), c["node"].get<std::string>().c_str(),
                c["condition"].get<std::string>().c_str(), json_text(c["then_branch"]["nodes"]).c_str(),
                json_text(c["then_branch"]["operators"]).c_str(), body_floats(c["then_branch"]).c_str(),
                json_text(c["else_branch"]["nodes"]).c_str(), json_text(c["else_branch"]["operators"]).c_str(),
                body_floats(c["else_branch"]).c_str());
  }
  std::printf("operators: %s\n", histogram_text(j["operators"]).c_str());
  std::printf("metadata: %s\n", json_text(j["metadata"]).c_str());
}

void inspect(const std::string& path, bool as_json) {
  if (!is_artifact(path)) {
    json j = inspect_model(path);
    return as_json ? print_json(j) : print_model(j);
  }
  json j = inspect_artifact(path);
  return as_json ? print_json(j) : print_artifact(j);
}

void check(const std::string& path, const std::string& target_text, bool as_json) {
  CheckReport r = check_artifact(path, target_text);
  if (as_json) {
    print_json(check_json(r));
  } else if (r.mismatches.empty()) {
    std::printf("%s: can run here (target %s, %s)\n", path.c_str(), r.target.name().c_str(),
                r.compat.device_arch.c_str());
    for (auto& n : r.notes) std::printf("  note: %s\n", n.c_str());
  } else {
    std::printf("%s: cannot run here:\n", path.c_str());
    for (auto& m : r.mismatches) std::printf("  %s\n", m.str().c_str());
  }
  if (!r.mismatches.empty()) throw Exit{static_cast<int>(ErrorCode::incompatible_artifact)};
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

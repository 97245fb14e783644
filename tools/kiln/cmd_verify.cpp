// kiln verify MODEL.onnx: the compiled program against the ref target, every
// value both programs hold compared on the same inputs (docs/cli.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>

#include "cli.h"
#include "runtime/compile.h"
#include "runtime/reference_nodes.h"
#include "runtime/verify.h"
#include "support/error.h"
#include "support/npy.h"

namespace kiln::cli {

namespace {

/// Exit code of a verification that found values outside the tolerance
/// (docs/cli.md; kiln's error codes end at 8).
constexpr int kVerifyFailed = 9;

/// A CLI11 check for a tolerance: a finite number >= 0.
const CLI::Validator& tolerance_value() {
  static const CLI::Validator v(
      [](std::string& s) {
        try {
          size_t used = 0;
          const double d = std::stod(s, &used);
          if (used == s.size() && std::isfinite(d) && d >= 0) return std::string();
        } catch (const std::exception&) {
        }
        return "'" + s + "' is not a finite non-negative number";
      },
      "TOL");
  return v;
}

struct VerifyArgs {
  std::string model, target = "cpu";
  std::vector<std::string> inputs, shapes;
  uint64_t seed = 0;
  int threads = 0;
  double rtol = -1, atol = -1;
  PrecisionArgs precision;
  CodegenArgs codegen;
};

/// The --input files, and random tensors for the inputs they leave out.
std::map<std::string, Tensor> gather_inputs(const VerifyArgs& a, const SessionOptions& opt, json& info,
                                            std::vector<std::string>& notes) {
  SessionOptions probe = opt;
  probe.specialize_shapes = false;
  BucketSkeleton sk = bucket_skeleton(a.model, probe);
  std::string known;
  for (auto& i : sk.inputs) known += (known.empty() ? "" : ", ") + i.name;
  std::map<std::string, Tensor> in;
  std::set<std::string> from_file;
  for (auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) fail(ErrorCode::invalid_option, "--input '{}': expected NAME=FILE.npy", spec);
    std::string name = spec.substr(0, eq);
    bool exists = false;
    for (auto& i : sk.inputs) exists |= i.name == name;
    if (!exists) fail(ErrorCode::invalid_input, "--input: unknown input '{}' (the model's inputs are: {})", name, known);
    if (in.count(name)) fail(ErrorCode::invalid_option, "--input: input '{}' is given twice", name);
    in[name] = read_npy(spec.substr(eq + 1));
    from_file.insert(name);
  }
  std::mt19937_64 rng(a.seed);
  info = json::array();
  for (auto& i : sk.inputs) {
    if (!in.count(i.name)) in[i.name] = random_input(i, rng, &notes, "kiln verify");
    json j = tensor_json(i.name, in[i.name]);
    j["source"] = from_file.count(i.name) ? "file" : "random";
    info.push_back(j);
  }
  return in;
}

/// A double for JSON: NaN and infinities become null.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json value_json(const verify::ValueResult& v, int index) {
  json j = json::object();
  if (index >= 0) j["index"] = index;
  j.update(json{{"node", v.node_name}, {"op", v.op}, {"value", v.value}, {"ref_value", v.ref_value},
                {"ref_node", v.ref_node}, {"ref_op", v.ref_op}, {"dtype", v.dtype}, {"shape", v.shape},
                {"readback", verify::readback_name(v.readback)}, {"max_abs", number(v.max_abs)},
                {"max_rel", number(v.max_rel)}, {"ref_max_abs", number(v.ref_max_abs)}, {"bad_elements", v.bad},
                {"saturated_elements", v.saturated},
                {"elements", v.elements}, {"exact", v.exact}, {"pass", v.pass}});
  return j;
}

/// Cuts `s` to `w` characters (the end kept: names differ at their ends).
std::string fit(const std::string& s, size_t w) {
  return s.size() <= w ? s : "..." + s.substr(s.size() - (w - 3));
}

std::string sci(double v) { return std::isfinite(v) ? fmt::format("{:.2e}", v) : std::string(v > 0 ? "inf" : "nan"); }

void print_text(const verify::Report& r, const VerifyArgs& a, const std::vector<std::string>& notes) {
  for (auto& n : notes) std::fprintf(stderr, "kiln: note: %s\n", n.c_str());
  std::printf("kiln verify %s: %s (%s) against ref on the same inputs; a value passes when max|got - ref| <= %g + %g * "
              "max|ref|\n",
              a.model.c_str(), r.target.c_str(), r.precision.c_str(), r.tol.atol, r.tol.rtol);
  size_t wn = 4, wo = 2, wv = 5;
  for (auto& v : r.values) {
    wn = std::max(wn, std::min<size_t>(v.node_name.size(), 36));
    wo = std::max(wo, std::min<size_t>(v.op.size(), 26));
    wv = std::max(wv, std::min<size_t>(v.value.size(), 36));
  }
  const int iwn = static_cast<int>(wn), iwo = static_cast<int>(wo), iwv = static_cast<int>(wv);
  std::printf("  %5s  %-*s  %-*s  %-*s  %11s  %11s  %s\n", "#", iwn, "node", iwo, "op", iwv, "value", "max abs err",
              "max rel err", "result");
  for (size_t i = 0; i < r.values.size(); ++i) {
    const auto& v = r.values[i];
    std::string extra;
    if (!v.ref_node.empty() && v.ref_node != v.node_name) extra = fmt::format("  (ref: {} '{}')", v.ref_op, v.ref_node);
    if (v.readback != verify::Readback::same) extra += fmt::format("  [{}]", verify::readback_name(v.readback));
    std::printf("  %5zu  %-*s  %-*s  %-*s  %11s  %11s  %s%s\n", i, iwn, fit(v.node_name, wn).c_str(), iwo,
                fit(v.op, wo).c_str(), iwv, fit(v.value, wv).c_str(), sci(v.max_abs).c_str(), sci(v.max_rel).c_str(),
                v.pass ? "ok" : "FAIL", extra.c_str());
  }
  std::printf("outputs:\n");
  for (auto& v : r.outputs)
    std::printf("  %-*s  max abs err %s  max rel err %s  %s\n", iwv, fit(v.value, wv).c_str(), sci(v.max_abs).c_str(),
                sci(v.max_rel).c_str(), v.pass ? "ok" : "FAIL");
  std::string kinds;
  for (auto& [k, n] : r.skip_counts) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", n, k);
  std::printf("compared %zu values of %d nodes; skipped %zu%s\n", r.values.size(), r.nodes, r.skipped.size(),
              kinds.empty() ? "" : (" (" + kinds + ")").c_str());
  if (!r.skipped.empty() && r.skipped.size() <= 20)
    for (auto& s : r.skipped)
      std::printf("  skipped %s (%s) value '%s': %s\n", s.node.c_str(), s.op.c_str(), s.value.c_str(), s.reason.c_str());
  else if (!r.skipped.empty())
    std::printf("  (--json lists every skipped value and why)\n");
  if (r.first_failure >= 0) {
    const auto& f = r.values[static_cast<size_t>(r.first_failure)];
    std::printf("first failing node: %s (%s), value '%s': max abs error %s, max rel error %s (allowed %s: %g + %g * "
                "max|ref| %s), %lld of %lld elements over\n",
                f.node_name.c_str(), f.op.c_str(), f.value.c_str(), sci(f.max_abs).c_str(), sci(f.max_rel).c_str(),
                sci(r.tol.atol + r.tol.rtol * f.ref_max_abs).c_str(), r.tol.atol, r.tol.rtol,
                sci(f.ref_max_abs).c_str(), static_cast<long long>(f.bad), static_cast<long long>(f.elements));
    const verify::Downstream d = verify::downstream(r);
    std::string outs;
    for (auto& o : r.outputs)
      outs += fmt::format("{}{} {} ({})", outs.empty() ? "" : ", ", o.value, sci(o.max_rel), o.pass ? "ok" : "FAIL");
    if (d.worst >= 0) {
      const auto& w = r.values[static_cast<size_t>(d.worst)];
      std::printf("downstream: %d more values compared, %d fail; largest max rel error %s at %s (value '%s'); "
                  "outputs: %s\n",
                  d.compared, d.failing, sci(d.worst_rel).c_str(), w.node_name.c_str(), w.value.c_str(), outs.c_str());
    } else {
      std::printf("downstream: no value compared after it; outputs: %s\n", outs.c_str());
    }
    std::string chain;
    constexpr size_t kChain = 12;
    const size_t first = static_cast<size_t>(r.first_failure);
    for (size_t i = first; i < r.values.size() && i < first + kChain; ++i)
      chain += fmt::format("{}{} {}", chain.empty() ? "" : " -> ", r.values[i].node_name, sci(r.values[i].max_rel));
    if (r.values.size() > first + kChain) chain += fmt::format(" -> ... ({} more)", r.values.size() - first - kChain);
    std::printf("max rel error from there: %s\n", chain.c_str());
  } else if (!r.ok()) {
    std::printf("every compared intermediate value passes, but an output does not (its last node's value is not "
                "compared, or it differs only after the compared values)\n");
  }
  if (r.ok())
    std::printf("result: ok, every compared value and output within tolerance (compile %.1f ms, runs %.1f ms)\n",
                r.compile_ms, r.run_ms);
  else
    std::printf("result: FAIL (exit %d)\n", kVerifyFailed);
}

void verify_main(const VerifyArgs& a, bool as_json) {
  if (is_artifact(a.model))
    fail(ErrorCode::invalid_option,
         "kiln verify compiles the model for the target and for ref, so it takes the ONNX model, not the artifact '{}'",
         a.model);
  SessionOptions opt;
  opt.target = Target::parse(a.target);
  apply_precision(a.precision, opt);
  parse_shapes(a.shapes, opt);
  apply_codegen(a.codegen, opt);
  opt.use_cache = false;
  opt.threads = a.threads;
  opt.validate();
  if (a.threads < 0) fail(ErrorCode::invalid_option, "--threads must be 0 (all cores) or more, not {}", a.threads);
  verify::Tolerance tol = verify::Tolerance::defaults(opt.precision, opt.allow_tf32);
  if (a.rtol >= 0) tol.rtol = a.rtol;
  if (a.atol >= 0) tol.atol = a.atol;
  json inputs_info;
  std::vector<std::string> notes;
  const auto inputs = gather_inputs(a, opt, inputs_info, notes);
  // A 16-bit program's precision check samples the inputs verified, unless
  // --check-input gave its own (a run's compile with them is what is verified).
  if (opt.target.kind == Target::Kind::cuda && opt.precision != Precision::fp32 &&
      opt.precision_check == PrecisionCheck::on && opt.precision_check_inputs.empty())
    opt.precision_check_inputs = inputs;
  verify::Report r = verify::verify_model(a.model, opt, inputs, tol, a.threads);
  notes.insert(notes.end(), r.notes.begin(), r.notes.end());
  if (std::string n = reference_nodes_note(r.reference_nodes); !n.empty()) notes.push_back(n);
  if (as_json) {
    json values = json::array(), outputs = json::array(), skipped = json::array();
    for (size_t i = 0; i < r.values.size(); ++i) values.push_back(value_json(r.values[i], static_cast<int>(i)));
    for (auto& o : r.outputs) outputs.push_back(value_json(o, -1));
    for (auto& s : r.skipped)
      skipped.push_back({{"node", s.node}, {"op", s.op}, {"value", s.value}, {"reason", s.reason}});
    json first = nullptr, down = nullptr;
    if (r.first_failure >= 0) {
      first = value_json(r.values[static_cast<size_t>(r.first_failure)], r.first_failure);
      const verify::Downstream d = verify::downstream(r);
      down = {{"compared", d.compared}, {"failing", d.failing},
              {"worst_index", d.worst >= 0 ? json(d.worst) : json(nullptr)},
              {"worst_node", d.worst >= 0 ? json(r.values[static_cast<size_t>(d.worst)].node_name) : json(nullptr)},
              {"worst_value", d.worst >= 0 ? json(r.values[static_cast<size_t>(d.worst)].value) : json(nullptr)},
              {"worst_rel", d.worst >= 0 ? number(d.worst_rel) : json(nullptr)}};
    }
    json counts = json::object();
    for (auto& [k, n] : r.skip_counts) counts[k] = n;
    print_json({{"model", a.model}, {"target", r.target}, {"precision", r.precision},
                {"tolerance", {{"rtol", r.tol.rtol}, {"atol", r.tol.atol}}}, {"ok", r.ok()}, {"nodes", r.nodes},
                {"compared", r.values.size()}, {"skipped_count", r.skipped.size()}, {"skip_counts", counts},
                {"first_failure", first}, {"downstream", down}, {"values", values}, {"outputs", outputs},
                {"skipped", skipped}, {"inputs", inputs_info}, {"notes", notes},
                {"reference_nodes", reference_json(r.reference_nodes)}, {"compile_ms", r.compile_ms},
                {"run_ms", r.run_ms}});
  } else {
    print_text(r, a, notes);
  }
  std::fflush(stdout);
  if (!r.ok()) throw Exit{kVerifyFailed};
}

}  // namespace

void add_verify(CLI::App& app, Common& common) {
  auto a = std::make_shared<VerifyArgs>();
  auto* sub = app.add_subcommand(
      "verify",
      "Compare a model compiled for a target with the ref target on the same inputs, value by value: every "
      "intermediate value both programs hold (fused nodes at their boundaries), then the outputs. Reports the first "
      "node whose error exceeds the tolerance and how the error grows from there. Compiles in memory (no cache). "
      "Exit 0 when every compared value passes, 9 when some fail.");
  sub->add_option("model", a->model, "ONNX model (.onnx)")->required()->check(non_empty_path());
  sub->add_option("--target", a->target, "cpu (default), cuda[:N] or ref")->capture_default_str();
  add_precision_flags(sub, a->precision);
  add_codegen_options(sub, a->codegen);
  sub->add_option("--input", a->inputs, "Input tensor NAME=FILE.npy (repeatable; inputs not given are random)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--seed", a->seed, "Seed of the random inputs")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--shape", a->shapes,
                  "Fix an input's shape, NAME=DxDx... (repeatable; other symbolic dims take the --input file's, "
                  "else 1)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--threads", a->threads, "Threads of the host runs (0 = all cores)")->capture_default_str();
  sub->add_option("--rtol", a->rtol,
                  "Relative tolerance, times the value's max|ref| (default: fp32 1e-4, fp32 with --tf32 1e-2, fp16 "
                  "1e-2, bf16 4e-2)")
      ->check(tolerance_value());
  sub->add_option("--atol", a->atol,
                  "Absolute tolerance added to it (default: fp32 1e-5, fp32 with --tf32 1e-4, fp16 1e-3, bf16 4e-3)")
      ->check(tolerance_value());
  sub->add_flag("--json", common.json,
                "Print one JSON object: ok, tolerance, values (per compared value in execution order: node, op, value, "
                "max_abs, max_rel, pass, ...), outputs, skipped, first_failure, downstream");
  sub->callback([a, &common] { verify_main(*a, common.json); });
}

}  // namespace kiln::cli

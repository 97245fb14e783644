// kiln run MODEL.onnx|ART.kiln
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "artifact/artifact.h"
#include "cli.h"
#include "runtime/reference_nodes.h"
#include "support/error.h"
#include "support/log.h"
#include "support/npy.h"

namespace kiln::cli {

namespace {

struct Args {
  std::string model, target, output_dir, cache_dir, on_mismatch;
  std::vector<std::string> inputs, shapes, dims;
  std::string out_of_bucket;
  CodegenArgs codegen;
  bool random_inputs = false, no_cache = false, cache_dir_given = false, output_dir_given = false, trust_cache_dir = false;
  uint64_t seed = 0;
  int threads = 0;
  PrecisionArgs precision;
  SpecializeArgs specialize;
};

std::map<std::string, Tensor> gather_inputs(const Args& a, const Session& s, std::vector<std::string>& notes) {
  std::map<std::string, Tensor> in;
  std::string known;
  for (auto& info : s.inputs()) known += (known.empty() ? "" : ", ") + info.name;
  for (auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      fail(ErrorCode::invalid_option, "--input '{}': expected NAME=FILE.npy", spec);
    std::string name = spec.substr(0, eq);
    bool exists = false;
    for (auto& info : s.inputs()) exists |= info.name == name;
    if (!exists) fail(ErrorCode::invalid_input, "--input: unknown input '{}' (the model's inputs are: {})", name, known);
    if (in.count(name)) fail(ErrorCode::invalid_option, "--input: input '{}' is given twice", name);
    in[name] = read_npy(spec.substr(eq + 1));
  }
  if (a.random_inputs) {
    std::mt19937_64 rng(a.seed);
    for (auto& info : s.inputs())
      if (!in.count(info.name)) in[info.name] = random_input(info, rng, &notes, "--random-inputs");
  } else {
    for (auto& info : s.inputs())
      if (!in.count(info.name))
        fail(ErrorCode::invalid_input, "missing input '{}' ({}): give it with --input {}=FILE.npy, or use --random-inputs",
             info.name, dtype_name(info.dtype), info.name);
  }
  return in;
}

json buckets_json(const BucketStats& b) {
  json programs = json::array();
  for (auto& p : b.programs) {
    json sz = json::object();
    for (size_t k = 0; k < p.size() && k < b.dims.size(); ++k) sz[b.dims[k]] = p[k];
    programs.push_back(sz);
  }
  return {{"dims", b.dims}, {"modes", b.modes}, {"programs", programs}, {"compiled_by_run", b.compiled_by_run},
          {"compile_ms", b.compile_ms}, {"split_runs", b.split_runs}};
}

/// After a cuda run has printed and written everything: ends the process
/// without tearing the CUDA state down. Destroying the program, the cuDNN /
/// cuBLASLt handles and the context takes a noticeable part of a short
/// process's life (the driver frees all of it at exit anyway), and a script
/// waits for the exit, not for the first result. KILN_FAST_EXIT=0 keeps the
/// orderly teardown (a measurement aid; a leak checker wants it too).
void exit_now_if_cuda(const SessionOptions& opt) {
  if (opt.target.kind != Target::Kind::cuda) return;
  const char* e = std::getenv("KILN_FAST_EXIT");
  if (e && std::string(e) == "0") return;
  std::fflush(nullptr);
  std::_Exit(0);
}

void run_command(const Args& a, bool as_json) {
  SessionOptions opt;
  bool artifact_file = is_artifact(a.model);
  if (!a.target.empty()) opt.target = Target::parse(a.target);
  else if (artifact_file) opt.target = Target::parse(artifact::read_compat(a.model).target);
  apply_precision(a.precision, opt);
  parse_shapes(a.shapes, opt);
  parse_dims(a.dims, opt);
  apply_codegen(a.codegen, opt);
  apply_specialize(a.specialize, opt);
  if (a.out_of_bucket == "error") opt.out_of_bucket = OutOfBucket::error;
  opt.threads = a.threads;
  if (a.output_dir_given && a.output_dir.empty())
    fail(ErrorCode::invalid_option, "--output-dir: the directory path is empty");
  if (a.no_cache && a.cache_dir_given)
    fail(ErrorCode::invalid_option, "--cache-dir and --no-cache cannot be used together");
  if (a.cache_dir_given) opt.cache_dir = a.cache_dir;
  opt.use_cache = !a.no_cache;
  if (artifact_file && !a.dims.empty())
    fail(ErrorCode::invalid_option, "--dim applies when compiling; '{}' is already compiled", a.model);
  if (artifact_file && !a.shapes.empty())
    fail(ErrorCode::invalid_option, "--shape applies when compiling; '{}' is already compiled", a.model);
  if (artifact_file && !a.codegen.tuning.empty())
    fail(ErrorCode::invalid_option, "--tuning applies when compiling; '{}' is already compiled", a.model);
  if (artifact_file && !a.codegen.arch.empty())
    fail(ErrorCode::invalid_option, "--arch applies when compiling; '{}' is already compiled", a.model);
  if (artifact_file && !a.codegen.fallback.empty())
    fail(ErrorCode::invalid_option, "--fallback applies when compiling; '{}' is already compiled", a.model);
  if (artifact_file && !a.precision.check_inputs.empty())
    fail(ErrorCode::invalid_option, "--check-input applies when compiling; '{}' is already compiled", a.model);
  if (a.on_mismatch == "recompile" && artifact_file)
    fail(ErrorCode::invalid_option,
         "--on-mismatch recompile: '{}' is an explicit artifact, which is never recompiled (its model is not known); "
         "run the .onnx model to go through the cache",
         a.model);
  opt.cache_mismatch = a.on_mismatch == "error" ? MismatchPolicy::error : MismatchPolicy::recompile;
  opt.trust_cache_dir = a.trust_cache_dir;
  // Notes (e.g. waiting for another process's compile) are printed as they happen.
  opt.on_note = [](const std::string& n) { std::fprintf(stderr, "kiln: note: %s\n", n.c_str()); };

  Session s = artifact_file ? Session::load(a.model, opt) : Session(a.model, opt);
  std::vector<std::string> notes = s.stats().notes, input_notes;
  auto inputs = gather_inputs(a, s, input_notes);
  notes.insert(notes.end(), input_notes.begin(), input_notes.end());
  const BucketStats before = s.buckets();
  Stopwatch sw;
  auto outputs = s.run(inputs);
  double run_ms = sw.ms();
  const double since_start_ms = ms_since_process_start();
  // A specialized or bucketed session compiles inside run() when it first
  // sees a shape or value: that time is compile time, not run time.
  const BucketStats after = s.buckets();
  const int compiled_now = after.compiled_by_run - before.compiled_by_run;
  const double compiled_ms = after.compile_ms - before.compile_ms;
  const std::vector<ReferenceNode> ref_nodes = s.reference_nodes();
  if (std::string n = reference_nodes_note(ref_nodes); !n.empty()) notes.push_back(n);

  std::vector<std::string> names;
  for (auto& o : s.outputs()) names.push_back(o.name);
  auto safe = safe_names(names);
  json outs = json::array();
  if (!a.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.output_dir, ec);
    if (ec) fail(ErrorCode::io, "--output-dir '{}': cannot create it: {}", a.output_dir, ec.message());
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor& t = outputs.at(names[i]);
    json j = tensor_json(names[i], t);
    if (!a.output_dir.empty()) {
      auto file = std::filesystem::path(a.output_dir) / (safe[i] + ".npy");
      write_npy(file, t);
      j["file"] = file.string();
    }
    outs.push_back(j);
  }
  const auto& st = s.stats();
  // A specialized session that missed at construction compiled nothing then;
  // when its run found the program in the entry (another process had just
  // compiled and published it), this process compiled nothing at all: a hit.
  const bool loaded_by_run =
      st.cache == SessionStats::Cache::miss && st.compile_ms == 0 && compiled_now == 0 && !after.programs.empty();
  const char* cache = st.cache == SessionStats::Cache::hit || loaded_by_run ? "hit"
                      : st.cache == SessionStats::Cache::miss              ? "miss"
                                                                           : "none";
  if (as_json) {
    json ins = json::array();
    for (auto& [n, t] : inputs) ins.push_back(tensor_json(n, t));
    print_json({{"model", a.model}, {"target", opt.target.name()}, {"cache", cache}, {"compile_ms", st.compile_ms + compiled_ms},
                {"load_ms", st.load_ms}, {"run_ms", run_ms - compiled_ms}, {"since_process_start_ms", since_start_ms},
                {"artifact", st.artifact_path.empty() ? json(nullptr) : json(st.artifact_path)}, {"notes", notes},
                {"inputs", ins}, {"outputs", outs}, {"buckets", buckets_json(after)},
                {"compiled_by_run", compiled_now}, {"run_compile_ms", compiled_ms},
                {"reference_nodes", reference_json(ref_nodes)}});
    exit_now_if_cuda(opt);
    return;
  }
  for (auto& n : input_notes) std::fprintf(stderr, "kiln: note: %s\n", n.c_str());
  if (std::string n = reference_nodes_note(ref_nodes); !n.empty()) std::fprintf(stderr, "kiln: note: %s\n", n.c_str());
  if (st.cache == SessionStats::Cache::hit && compiled_now == 0)
    std::printf("cache: hit, loaded %s in %.1f ms (no compilation)\n", st.artifact_path.c_str(), st.load_ms);
  else if (loaded_by_run)
    std::printf("cache: hit, loaded %s (another process had just compiled this request's program; no compilation)\n",
                st.artifact_path.c_str());
  else if (st.cache == SessionStats::Cache::hit)
    std::printf("cache: hit, loaded %s in %.1f ms; it had no program for this request's shapes/values: compiled "
                "%d in %.1f ms and added it to the entry\n",
                st.artifact_path.c_str(), st.load_ms, compiled_now, compiled_ms);
  else if (st.cache == SessionStats::Cache::miss)
    std::printf("cache: miss, compiled in %.1f ms and saved %s; ready in %.1f ms more\n", st.compile_ms + compiled_ms,
                st.artifact_path.c_str(), st.load_ms);
  else if (artifact_file)
    std::printf("loaded %s in %.1f ms (no compilation)\n", a.model.c_str(), st.load_ms);
  else
    std::printf("cache: none, compiled in memory in %.1f ms\n", st.compile_ms + compiled_ms);
  std::printf("run: %.1f ms (first result %.0f ms after the process started)\n", run_ms - compiled_ms, since_start_ms);
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("  %s: %s\n", names[i].c_str(), summarize(outputs.at(names[i])).c_str());
    if (!a.output_dir.empty()) std::printf("    -> %s\n", outs[i]["file"].get<std::string>().c_str());
  }
  exit_now_if_cuda(opt);
}

}  // namespace

void add_run(CLI::App& app, Common& common) {
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "run",
      "Run a model. An .onnx goes through the compiled-program cache (compiled on the first run, loaded on later "
      "ones); a .kiln artifact is loaded and never recompiled.");
  sub->add_option("model", a->model, "ONNX model (.onnx) or compiled artifact (.kiln)")->required()->check(non_empty_path());
  sub->add_option("--target", a->target, "cpu, ref or cuda[:N]; default cpu for .onnx, the artifact's own target for .kiln");
  add_precision_flags(sub, a->precision);
  sub->add_option("--input", a->inputs, "Input tensor NAME=FILE.npy (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--output-dir", a->output_dir,
                  "Write each output as DIR/<name>.npy (characters outside [A-Za-z0-9._-] become '_')")
      ->each([a](const std::string&) { a->output_dir_given = true; });
  sub->add_flag("--random-inputs", a->random_inputs,
                "Fill inputs not given with --input with random data (floats in [0,1), integers in [0,9])");
  sub->add_option("--seed", a->seed, "Seed for --random-inputs")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--shape", a->shapes, "Fix an input's shape when compiling, NAME=DxDx... (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--dim", a->dims,
                  "Shape buckets for a symbolic dim when compiling, NAME=SPEC (repeatable; see kiln compile --help); "
                  "each bucket is compiled when first used and added to the cache entry")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_specialize_flags(sub, a->specialize);
  sub->add_option("--out-of-bucket", a->out_of_bucket,
                  "A shape outside every bucket: compile (default; compiled for that exact shape and cached) or "
                  "error (exit 6)")
      ->check(CLI::IsMember({"compile", "error"}));
  sub->add_option("--cache-dir", a->cache_dir, "Cache directory (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)")
      ->each([a](const std::string&) { a->cache_dir_given = true; });
  sub->add_flag("--no-cache", a->no_cache, "Compile in memory; neither read nor write the cache");
  sub->add_option("--on-mismatch", a->on_mismatch,
                  "When the cache entry is damaged or does not match this machine: recompile (default; a damaged "
                  "entry is moved aside to .bad) or error (exit 3, or 7 when damaged). An explicit .kiln always "
                  "errors")
      ->check(CLI::IsMember({"recompile", "error"}));
  sub->add_flag("--trust-cache-dir", a->trust_cache_dir,
                "Use the cache directory even if other users can write to it or another user owns it (by default "
                "kiln then compiles in memory: an artifact holds code)");
  sub->add_option("--threads", a->threads, "Threads for the run (0 = all cores)")->capture_default_str();
  add_codegen_options(sub, a->codegen);
  sub->add_flag("--json", common.json,
                "Print one JSON object: cache (hit|miss|none), compile_ms, load_ms, run_ms, since_process_start_ms "
                "(process start to first result: a warm start's whole cost), inputs, outputs");
  sub->callback([a, &common] { run_command(*a, common.json); });
}

}  // namespace kiln::cli

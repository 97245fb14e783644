// kiln perf MODEL.onnx: compile time, cold-process load time, first-run and
// steady-state latency, throughput and peak memory of one model.
//
// The parent compiles the model into a temporary artifact, then spawns a child
// `kiln perf ARTIFACT --child ...` (this same executable) that loads it in a
// fresh process, runs it and reports as JSON; the parent adds the compile
// facts and prints the result. So load time and first run are those of a cold
// process, and peak memory is that of a process that only loads and runs.
// The child runs with GOMP_SPINCOUNT=10000 unless the caller chose an OpenMP
// wait policy (see run_child).
#include <fmt/format.h>
#include <omp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <fstream>
#include <random>
#include <set>

#include <fmt/ranges.h>

#include "cli.h"
#include "kiln/compile.h"
#include "runtime/compile.h"
#include "runtime/reference_nodes.h"
#include "support/error.h"
#include "support/log.h"
#include "support/npy.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/run/driver.h"
#endif

extern char** environ;

namespace kiln::cli {

namespace {

/// GOMP_SPINCOUNT the child runs with unless the user set a wait policy.
constexpr const char* kChildSpinCount = "10000";

struct PerfArgs {
  std::string model, target = "cpu", keep;
  std::vector<std::string> shapes, inputs;
  int threads = 0, runs = 20, warmup = 3;
  uint64_t seed = 0;
  bool child = false;
  bool profile = false;
  CodegenArgs codegen;
  PrecisionArgs precision;
  SpecializeArgs specialize;
};

/// Shape and value specialization for perf's ahead-of-time compile, as a
/// Session does it on its first run: every input with symbolic dims that
/// --shape leaves open takes the shape of its --input file (else 1 per
/// symbolic dim, as the random inputs use), and every value-guard input
/// (runtime/bucket_plan.h) the value of its --input file.
void specialize_to_inputs(const PerfArgs& a, SessionOptions& opt, std::vector<std::string>& notes) {
  if (!opt.specialize_shapes && !opt.specialize_values) return;
  std::map<std::string, Tensor> given;
  for (auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) fail(ErrorCode::invalid_option, "--input '{}': expected NAME=FILE.npy", spec);
    given[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
  }
  SessionOptions probe = opt;
  probe.specialize_shapes = false;
  BucketSkeleton sk = bucket_skeleton(a.model, probe);
  std::set<std::string> guards;
  for (auto& d : sk.set.dims)
    if (d.kind == artifact::DimKind::value) guards.insert(d.symbol);
  for (auto& info : sk.inputs) {
    auto it = given.find(info.name);
    if (guards.count(info.name) && opt.specialize_values) {
      if (it == given.end())
        fail(ErrorCode::invalid_option,
             "input '{}' holds one integer that the model's control flow or shapes depend on: give it with --input "
             "{}=FILE.npy (kiln perf compiles for that value)",
             info.name, info.name);
      int64_t v = 0;
      switch (it->second.dtype()) {
        case DType::i64: v = *it->second.data<int64_t>(); break;
        case DType::i32: v = *it->second.data<int32_t>(); break;
        case DType::boolean: v = *static_cast<const uint8_t*>(it->second.raw()) != 0; break;
        default: fail(ErrorCode::invalid_input, "input '{}' is {}, expected an integer", info.name, dtype_name(it->second.dtype()));
      }
      opt.values[info.name] = {v};
      continue;
    }
    if (!opt.specialize_shapes || opt.input_shapes.count(info.name)) continue;
    bool symbolic = false;
    for (auto d : info.dims) symbolic |= d < 0;
    if (!symbolic) continue;
    if (it != given.end()) {
      opt.input_shapes[info.name] = it->second.shape();
    } else {
      std::vector<int64_t> shape;
      for (auto d : info.dims) shape.push_back(d >= 0 ? d : 1);
      opt.input_shapes[info.name] = shape;
      notes.push_back(fmt::format("input '{}' has symbolic dims and no --input: compiled and timed with 1 for each",
                                  info.name));
    }
  }
}

/// The class of a reference-node reason: its text up to the first ':' or
/// '(' ("data-dependent shape", "no cpu kernel for TopK" -> "no cpu kernel").
std::string reason_class(const std::string& reason) {
  std::string c = reason.substr(0, reason.find_first_of(":("));
  if (c.rfind("no ", 0) == 0 && c.find(" kernel for ") != std::string::npos) c = c.substr(0, c.find(" for "));
  while (!c.empty() && c.back() == ' ') c.pop_back();
  return c;
}

/// Mean per-node times over `runs` profiled runs, grouped by operator
/// (JSON: by_op sorted by time, top_nodes the 15 slowest nodes, by_reason the
/// time of the nodes on reference kernels per reason class: where a slow
/// path costs).
json profile_runs(const Session& s, const std::map<std::string, Tensor>& in, int runs) {
  std::vector<NodeTime> sum;
  double total = 0;
  for (int r = 0; r < runs; ++r) {
    RunProfile p;
    s.run(in, &p);
    if (sum.empty()) sum = p.nodes;
    else
      for (size_t i = 0; i < sum.size() && i < p.nodes.size(); ++i) sum[i].ms += p.nodes[i].ms;
    total += p.total_ms;
  }
  for (auto& n : sum) n.ms /= runs;
  total /= runs;
  std::map<std::string, std::pair<int, double>> by_op;
  for (auto& n : sum) {
    by_op[n.op].first++;
    by_op[n.op].second += n.ms;
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> ops(by_op.begin(), by_op.end());
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.second > b.second.second; });
  json j_ops = json::array();
  for (auto& [op, cm] : ops)
    j_ops.push_back({{"op", op}, {"nodes", cm.first}, {"ms", cm.second},
                     {"percent", total > 0 ? 100.0 * cm.second / total : 0.0}});
  std::sort(sum.begin(), sum.end(), [](auto& a, auto& b) { return a.ms > b.ms; });
  json j_nodes = json::array();
  for (size_t i = 0; i < sum.size() && i < 15; ++i)
    j_nodes.push_back({{"node", sum[i].node}, {"op", sum[i].op}, {"ms", sum[i].ms}});
  std::map<std::string, std::string> why;
  for (auto& r : s.reference_nodes()) why[r.node] = reason_class(r.reason);
  std::map<std::string, std::pair<int, double>> by_reason;
  for (auto& n : sum) {
    auto it = why.find(n.node);
    auto& slot = by_reason[it != why.end() ? "reference: " + it->second : std::string("target kernels and free nodes")];
    slot.first++;
    slot.second += n.ms;
  }
  json j_reason = json::array();
  for (auto& [r, cm] : by_reason)
    j_reason.push_back({{"reason", r}, {"nodes", cm.first}, {"ms", cm.second},
                        {"percent", total > 0 ? 100.0 * cm.second / total : 0.0}});
  return {{"runs", runs}, {"total_ms", total}, {"by_op", j_ops}, {"top_nodes", j_nodes}, {"by_reason", j_reason}};
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  double pos = p * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

/// Peak resident set of this process: VmHWM from /proc/self/status (the
/// memory map's own high-water mark, which starts afresh at exec), else
/// ru_maxrss (which Linux carries over from the spawning process).
uint64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

/// cuda: the same timed runs through Session::run_device, inputs and outputs
/// already in GPU memory (what a caller whose data lives on the GPU sees):
/// {"latency_device_io_ms_median", "latency_device_io_ms_p90"}; empty for host targets.
json device_io_latency(const Session& s, const std::map<std::string, Tensor>& in, const Target& t, int runs,
                       int warmup) {
#ifdef KILN_WITH_CUDA
  if (t.kind != Target::Kind::cuda) return json::object();
  using targets::cuda::DeviceBuffer;
  const auto& d = targets::cuda::driver();
  targets::cuda::use_device(t.device);
  std::vector<DeviceBuffer> keep;
  std::map<std::string, DeviceTensor> din, dout;
  for (auto& [name, tensor] : in) {
    keep.emplace_back(tensor.nbytes(), "a perf input");
    if (tensor.nbytes()) targets::cuda::check(d.cuMemcpyHtoD(keep.back().get(), tensor.raw(), tensor.nbytes()), "cuMemcpyHtoD");
    din[name] = {keep.back().get(), tensor.nbytes()};
  }
  auto host_out = s.run(in);
  for (auto& [name, tensor] : host_out) {
    keep.emplace_back(tensor.nbytes(), "a perf output");
    dout[name] = {keep.back().get(), tensor.nbytes()};
  }
  std::vector<double> lat;
  try {
    for (int i = 0; i < warmup; ++i) s.run_device(din, dout);
    for (int i = 0; i < std::max(1, runs); ++i) {
      Stopwatch sw;
      s.run_device(din, dout);
      lat.push_back(sw.ms());
    }
  } catch (const Error& e) {
    // e.g. an output computed on the host (host fallback) whose shape
    // depends on the data: the host-I/O figures above still stand.
    return {{"device_io_error", e.what()}};
  }
  return {{"latency_device_io_ms_median", percentile(lat, 0.5)}, {"latency_device_io_ms_p90", percentile(lat, 0.9)}};
#else
  (void)s, (void)in, (void)t, (void)runs, (void)warmup;
  return json::object();
#endif
}

/// The child: load, first run, warm-up, timed runs; one JSON line on stdout.
void child_main(const PerfArgs& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  SessionOptions opt;
  opt.target = Target::parse(a.target);
  opt.threads = a.threads;
  Stopwatch load_sw;
  Session s = Session::load(a.model, opt);
  double load_ms = load_sw.ms();
  std::map<std::string, Tensor> in;
  for (auto& spec : a.inputs) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) fail(ErrorCode::invalid_option, "--input '{}': expected NAME=FILE.npy", spec);
    in[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
  }
  std::mt19937_64 rng(a.seed);
  int64_t batch = 1;
  for (auto& info : s.inputs())
    if (!in.count(info.name)) in[info.name] = random_input(info, rng, nullptr, "kiln perf");
  if (!s.inputs().empty()) {
    const Tensor& first = in.at(s.inputs().front().name);
    batch = first.rank() > 0 ? first.dim(0) : 1;
  }
  Stopwatch first_sw;
  s.run(in);
  double first_ms = first_sw.ms();
  for (int i = 0; i < a.warmup; ++i) s.run(in);
  std::vector<double> lat;
  for (int i = 0; i < std::max(1, a.runs); ++i) {
    Stopwatch sw;
    s.run(in);
    lat.push_back(sw.ms());
  }
  double med = percentile(lat, 0.5);
  json prof = a.profile ? profile_runs(s, in, std::max(1, a.runs)) : json();
  json dev = device_io_latency(s, in, opt.target, a.runs, a.warmup);
  const uint64_t peak = peak_rss_bytes();
  // The same artifact loaded again in this process: the artifact's own part
  // of a load, without the one-time costs a first load pays (the CUDA
  // context, the libraries' initialisation, lazy loading of their kernels).
  // A failure here (say, no memory for a second copy) must not lose the
  // figures above: it is reported as reload_error.
  json reload_ms = nullptr, reload_error = nullptr;
  try {
    Stopwatch reload_sw;
    auto again = std::make_unique<Session>(Session::load(a.model, opt));
    reload_ms = reload_sw.ms();
  } catch (const std::exception& e) {
    reload_error = e.what();
  }
  json out = {{"profile", prof},{"load_ms", load_ms}, {"reload_ms", reload_ms}, {"reload_error", reload_error},
              {"first_run_ms", first_ms},
              {"latency_ms_median", med},
              {"latency_ms_p90", percentile(lat, 0.9)},
              {"latency_ms_min", *std::min_element(lat.begin(), lat.end())},
              {"batch", batch},
              {"throughput_per_s", med > 0 ? 1000.0 * static_cast<double>(batch) / med : 0.0},
              {"peak_bytes", peak},
              {"runs", lat.size()},
              {"threads", a.threads > 0 ? a.threads : omp_get_max_threads()},
              {"omp_wait", std::getenv("OMP_WAIT_POLICY")  ? "OMP_WAIT_POLICY=" + std::string(std::getenv("OMP_WAIT_POLICY"))
                           : std::getenv("GOMP_SPINCOUNT") ? "GOMP_SPINCOUNT=" + std::string(std::getenv("GOMP_SPINCOUNT"))
                                                           : std::string("libgomp default")}};
  for (auto& [k, v] : dev.items()) out[k] = v;
  const std::vector<ReferenceNode> ref = s.reference_nodes();
  out["reference_nodes"] = reference_json(ref);
  if (std::string n = reference_nodes_note(ref); !n.empty()) out["reference_note"] = n;
  print_json(out);
}

/// Runs argv as a child process; returns its stdout. Throws Error(internal) on failure.
std::string run_child(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) fail(ErrorCode::internal, "kiln perf: pipe() failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  std::vector<char*> args;
  for (auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  // libgomp's default spin-wait (300000 spins at every barrier) burns a core
  // per waiting thread while another process holds the CPU the work needs; on
  // a shared machine that slows a 2-thread run several times over. A short
  // spin keeps wake-ups fast and yields under contention. The user's own
  // OMP_WAIT_POLICY / GOMP_SPINCOUNT win.
  std::vector<std::string> env_store;
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    env_store.push_back("GOMP_SPINCOUNT=" + std::string(kChildSpinCount));
    env.push_back(env_store.back().data());
  }
  env.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    fail(ErrorCode::internal, "kiln perf: cannot start '{}': {}", argv[0], std::strerror(rc));
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status))
    fail(ErrorCode::internal, "kiln perf: the loading child process was killed by signal {}; its output: {}",
         WIFSIGNALED(status) ? WTERMSIG(status) : -1, out);
  if (const int code = WEXITSTATUS(status); code != 0) {
    // The child exits with kiln's own codes (an unreadable input is 6, a bad
    // option 2, ...): the same code and its message, not "internal".
    std::string msg;
    try {
      std::string line, last;
      for (std::istringstream lines(out); std::getline(lines, line);)
        if (!line.empty()) last = line;
      json j = json::parse(last);
      if (j.contains("error")) msg = j["error"].value("message", "");
    } catch (const std::exception&) {
    }
    const ErrorCode ec = code >= 2 && code <= 8 ? static_cast<ErrorCode>(code) : ErrorCode::internal;
    fail(ec, "kiln perf: the loading child process failed (exit {}): {}", code,
         msg.empty() ? (out.empty() ? std::string("its error is printed above") : out) : msg);
  }
  return out;
}

/// The --profile tables: time per operator, then the slowest nodes.
void print_profile(const json& p) {
  std::printf("  profile (mean of %d runs, %.2f ms per run)\n", p["runs"].get<int>(), p["total_ms"].get<double>());
  std::printf("    %-28s %6s %10s %7s\n", "operator", "nodes", "ms", "%");
  for (auto& o : p["by_op"])
    std::printf("    %-28s %6d %10.3f %6.1f%%\n", o["op"].get<std::string>().c_str(), o["nodes"].get<int>(),
                o["ms"].get<double>(), o["percent"].get<double>());
  for (auto& r : p["by_reason"])
    std::printf("    %-40s %6d nodes %9.3f ms %6.1f%%\n", r["reason"].get<std::string>().c_str(), r["nodes"].get<int>(),
                r["ms"].get<double>(), r["percent"].get<double>());
  std::printf("    slowest nodes:\n");
  for (auto& n : p["top_nodes"])
    std::printf("    %-40s %-22s %9.3f ms\n", n["node"].get<std::string>().c_str(), n["op"].get<std::string>().c_str(),
                n["ms"].get<double>());
}

void perf_main(const PerfArgs& a, bool as_json) {
  if (a.child) return child_main(a);
  if (is_artifact(a.model))
    fail(ErrorCode::invalid_option,
         "kiln perf measures the compile too, so it takes the ONNX model, not the artifact '{}' (time a compiled "
         "artifact with `kiln run {} --json`)",
         a.model, a.model);
  SessionOptions opt;
  opt.target = Target::parse(a.target);
  apply_precision(a.precision, opt);
  parse_shapes(a.shapes, opt);
  apply_codegen(a.codegen, opt);
  apply_specialize(a.specialize, opt);
  std::vector<std::string> notes;
  specialize_to_inputs(a, opt, notes);
  namespace fs = std::filesystem;
  fs::path art = a.keep.empty() ? fs::temp_directory_path() / fmt::format("kiln-perf-{}.kiln", getpid()) : fs::path(a.keep);
  CompileResult cr = compile(a.model, art, opt);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> argv{self, "perf", art.string(), "--child", "--json", "--target", a.target, "--threads",
                                std::to_string(a.threads), "--runs", std::to_string(a.runs), "--warmup",
                                std::to_string(a.warmup), "--seed", std::to_string(a.seed)};
  for (auto& i : a.inputs) argv.insert(argv.end(), {"--input", i});
  if (a.profile) argv.push_back("--profile");
  std::string out;
  Stopwatch proc_sw;
  try {
    out = run_child(argv);
  } catch (...) {
    if (a.keep.empty()) fs::remove(art);
    throw;
  }
  double proc_ms = proc_sw.ms();
  if (a.keep.empty()) fs::remove(art);
  json c = json::parse(out, nullptr, false);
  if (c.is_discarded() || !c.is_object()) fail(ErrorCode::internal, "kiln perf: the child printed no JSON: {}", out);
  json r = {{"model", a.model}, {"target", opt.target.name()},
            {"tuning", opt.effective_tuning() ? tuning_name(*opt.effective_tuning()) : "none"},
            {"precision", precision_text(opt.precision, opt.allow_tf32)}, {"compile_ms", cr.compile_ms},
            {"write_ms", cr.write_ms}, {"artifact_bytes", cr.artifact_bytes}, {"arena_bytes", cr.arena_bytes},
            {"naive_bytes", cr.naive_bytes}};
  for (auto& [k, v] : c.items())
    if ((k != "profile" && k != "reload_error") || !v.is_null()) r[k] = v;
  r["child_process_ms"] = proc_ms;
  r["notes"] = notes;
  std::string shapes;
  for (auto& [name, dims] : opt.input_shapes) shapes += fmt::format("{}{}={}", shapes.empty() ? "" : " ", name, fmt::join(dims, "x"));
  r["compiled_shapes"] = shapes;
  if (as_json) return print_json(r);
  for (auto& n : notes) std::fprintf(stderr, "kiln: note: %s\n", n.c_str());
  if (c.contains("reference_note") && c["reference_note"].is_string())
    std::fprintf(stderr, "kiln: note: %s\n", c["reference_note"].get<std::string>().c_str());
  std::printf("%s on %s, %d thread(s)\n", a.model.c_str(), opt.target.name().c_str(), r["threads"].get<int>());
  std::printf("  compile        %10.1f ms (artifact %.1f MiB, written in %.1f ms)\n", cr.compile_ms,
              cr.artifact_bytes / 1048576.0, cr.write_ms);
  std::printf("  load (cold)    %10.1f ms (child process %.1f ms in all)\n", r["load_ms"].get<double>(), proc_ms);
  if (r.contains("reload_ms") && r["reload_ms"].is_number())
    std::printf("  load (again)   %10.1f ms (the same artifact loaded again in that process: without the one-time CUDA "
                "context and library initialisation)\n",
                r["reload_ms"].get<double>());
  else if (r.contains("reload_error"))
    std::printf("  load (again)   failed: %s\n", r["reload_error"].get<std::string>().c_str());
  std::printf("  first run      %10.2f ms\n", r["first_run_ms"].get<double>());
  std::printf("  latency        %10.2f ms median, %.2f ms p90, %.2f ms min over %d runs\n",
              r["latency_ms_median"].get<double>(), r["latency_ms_p90"].get<double>(), r["latency_ms_min"].get<double>(),
              r["runs"].get<int>());
  if (r.contains("latency_device_io_ms_median"))
    std::printf("  device I/O     %10.2f ms median, %.2f ms p90 (inputs and outputs in GPU memory: Session::run_device)\n",
                r["latency_device_io_ms_median"].get<double>(), r["latency_device_io_ms_p90"].get<double>());
  std::printf("  throughput     %10.1f /s at batch %lld\n", r["throughput_per_s"].get<double>(),
              static_cast<long long>(r["batch"].get<int64_t>()));
  std::printf("  peak memory    %10.1f MiB (arena %.2f MiB, %.2f MiB without reuse)\n",
              r["peak_bytes"].get<double>() / 1048576.0, cr.arena_bytes / 1048576.0, cr.naive_bytes / 1048576.0);
  if (r.contains("profile")) print_profile(r["profile"]);
}

}  // namespace

void add_perf(CLI::App& app, Common& common) {
  auto a = std::make_shared<PerfArgs>();
  auto* sub = app.add_subcommand(
      "perf",
      "Measure a model: compile time, load time in a fresh process, first-run and steady-state latency (median, "
      "p90), throughput at the input's batch, peak memory of the loading process.");
  sub->add_option("model", a->model, "ONNX model (.onnx)")->required()->check(non_empty_path());
  sub->add_option("--target", a->target, "cpu (default), ref (the reference oracle) or cuda[:N] (NVIDIA GPU N; only in a kiln built with CUDA)")->capture_default_str();
  add_precision_flags(sub, a->precision);
  sub->add_option("--threads", a->threads, "Threads per run (0 = all cores)")->capture_default_str()->check(CLI::Range(0, 4096));
  sub->add_option("--runs", a->runs, "Timed runs after warm-up")->capture_default_str()->check(CLI::Range(1, 100000000));
  sub->add_option("--warmup", a->warmup, "Untimed runs after the first")->capture_default_str()->check(CLI::Range(0, 100000000));
  sub->add_option("--shape", a->shapes, "Fix an input's shape, NAME=DxDx... (repeatable); dim 0 of the first input is the batch")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--input", a->inputs, "Input tensor NAME=FILE.npy (repeatable; others are random)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--seed", a->seed, "Seed of the random inputs")->capture_default_str()->check(CLI::NonNegativeNumber);
  add_codegen_options(sub, a->codegen);
  add_specialize_flags(sub, a->specialize);
  sub->add_option("--keep", a->keep, "Write the artifact here and keep it (default: a temporary file)");
  sub->add_flag("--profile", a->profile,
                "After the timed runs, as many profiled runs: time per operator (kiln.cpu::* are oneDNN primitives, "
                "bare ONNX names run on reference kernels) and the 15 slowest nodes");
  sub->add_flag("--child", a->child, "(internal) load MODEL as an artifact, run and report as JSON")->group("");
  sub->add_flag("--json", common.json,
                "Print one JSON object: compile_ms, load_ms, reload_ms (the artifact loaded again in the same "
                "process), first_run_ms, latency_ms_median, latency_ms_p90, throughput_per_s, peak_bytes and more");
  sub->callback([a, &common] { perf_main(*a, common.json); });
}

}  // namespace kiln::cli

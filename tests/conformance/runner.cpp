// ONNX backend node-test conformance runner.
//
// For every test directory under onnx/backend/test/data/node (a model.onnx and
// test_data_set_*/input_*.pb, output_*.pb), compiles the model for one target,
// runs every data set and compares each output with the stored one the way
// ONNX's own backend runner does (numpy.testing.assert_allclose: |got - want|
// <= atol + rtol * |want|, rtol 1e-3 and atol 1e-7 unless tolerances.txt says
// otherwise; NaN matches NaN; integers, bools and 8-bit floats exactly).
//
// Each test runs in a forked child so a crash is reported as "crash" and the
// run goes on. Results: pass / fail (largest error and where) / unsupported
// (the compile-time error naming operator, domain, opset, attribute or dtype)
// / crash / timeout. Writes a Markdown summary and, against a committed
// baseline of passing tests, fails when a test that passed stops passing.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/session.h"
#include "onnx/onnx_pb.h"
#include "onnx/tensor_proto.h"
#include "support/file.h"
#include "support/float8.h"
#include "support/half.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/run/driver.h"
#endif
#include <atomic>
#include <mutex>
#include <thread>

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct Options {
  fs::path data_dir, out_md, baseline, tolerances;
  std::string target = "ref", filter, onnx_version;
  fs::path list;  ///< --list FILE: only the tests named there (one per line)
  Fallback fallback = Fallback::host;  ///< --fallback: cuda's host fallback (SessionOptions::fallback)
  bool update_baseline = false;
  /// --no-value-specialization: SessionOptions::specialize_values off (an If
  /// on a scalar input is then compiled with both branches, not folded).
  bool specialize_values = true;
  int timeout_s = 120;
  int jobs = 1;  ///< tests run at once (each in its own forked child)
};

struct Result {
  std::string test, op, status, message;
};

struct Tolerance {
  double rtol = 1e-3, atol = 1e-7;
};

Tensor load_pb(const fs::path& p, std::string* name) {
  auto bytes = read_file(p);
  onnx::TensorProto tp;
  if (!tp.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw Error(ErrorCode::invalid_input, "cannot parse " + p.string());
  *name = tp.name();
  return onnx_import::tensor_from_proto(tp, p.parent_path(), p.string());
}

double as_double(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return t.data<float>()[i];
    case DType::f64: return t.data<double>()[i];
    case DType::f16: return half_to_float(t.data<uint16_t>()[i]);
    case DType::bf16: return bf16_to_float(t.data<uint16_t>()[i]);
    case DType::i8: return t.data<int8_t>()[i];
    case DType::i16: return t.data<int16_t>()[i];
    case DType::i32: return t.data<int32_t>()[i];
    case DType::i64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::u8: return t.data<uint8_t>()[i];
    case DType::u16: return t.data<uint16_t>()[i];
    case DType::u32: return t.data<uint32_t>()[i];
    case DType::u64: return static_cast<double>(t.data<uint64_t>()[i]);
    case DType::boolean: return t.data<bool>()[i];
    // The test data's float8 outputs are bit patterns (int32_data / raw_data)
    // and its 4-bit outputs are packed; tensor_from_proto turns them into
    // kiln's float8 bytes and unpacked 4-bit values, so compare their values.
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
      return float8_to_float(t.data<uint8_t>()[i], float8_format(t.dtype()));
    case DType::i4: return t.data<int8_t>()[i];
    case DType::u4: return t.data<uint8_t>()[i];
    default: return NAN;
  }
}

// Empty string when equal within tolerance; else what differs.
std::string compare(const std::string& name, const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.dtype() != want.dtype())
    return fmt::format("output '{}': dtype {} instead of {}", name, dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (got.shape() != want.shape()) return fmt::format("output '{}': shape {} instead of {}", name, got.describe(), want.describe());
  bool exact = !dtype_is_float(want.dtype());
  double worst = 0, worst_got = 0, worst_want = 0;
  int64_t worst_i = -1, bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = as_double(got, i), w = as_double(want, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    double err = std::fabs(g - w);
    bool ok = exact ? g == w : err <= tol.atol + tol.rtol * std::fabs(w);
    if (std::isnan(err)) ok = false;
    if (!ok) {
      ++bad;
      if (worst_i < 0 || err > worst || std::isnan(err)) {
        worst = err;
        worst_i = i;
        worst_got = g;
        worst_want = w;
      }
    }
  }
  if (!bad) return "";
  return fmt::format("output '{}': {} of {} elements differ; largest error {:.3g} at flat index {} (got {:.8g}, want {:.8g})",
                     name, bad, want.numel(), worst, worst_i, worst_got, worst_want);
}

std::string node_op(const fs::path& model, bool* default_domain) {
  auto bytes = read_file(model);
  onnx::ModelProto mp;
  *default_domain = true;
  if (!mp.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || mp.graph().node_size() == 0) return "?";
  for (auto& n : mp.graph().node())
    if (!n.domain().empty() && n.domain() != "ai.onnx") *default_domain = false;
  return mp.graph().node(0).op_type();
}

// Runs one test in this process; returns "status\tmessage".
std::string run_one(const fs::path& dir, const std::string& target, Fallback fallback, bool specialize_values,
                    Tolerance tol) {
  try {
    std::vector<fs::path> sets;
    for (auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    SessionOptions opt;
    opt.target = Target::parse(target);
    opt.fallback = fallback;
    opt.specialize_values = specialize_values;
    opt.use_cache = false;
    // Compile once with the model's own (possibly symbolic) shapes first: an
    // unsupported model is reported before any data file is read (sequence and
    // optional data files are not TensorProtos).
    std::unique_ptr<Session> s = std::make_unique<Session>(dir / "model.onnx", opt);
    bool rebound = false;
    for (auto& set : sets) {
      std::vector<std::pair<std::string, Tensor>> ins, outs;
      for (int i = 0;; ++i) {
        auto p = set / fmt::format("input_{}.pb", i);
        if (!fs::exists(p)) break;
        std::string name;
        Tensor t = load_pb(p, &name);
        ins.emplace_back(name, t);
      }
      for (int i = 0;; ++i) {
        auto p = set / fmt::format("output_{}.pb", i);
        if (!fs::exists(p)) break;
        std::string name;
        Tensor t = load_pb(p, &name);
        outs.emplace_back(name, t);
      }
      if (!rebound) {
        // Recompile for the first data set's shapes, so shapes fold as in real use.
        rebound = true;
        auto infos = s->inputs();
        for (size_t i = 0; i < ins.size() && i < infos.size(); ++i) {
          std::string nm = ins[i].first.empty() ? infos[i].name : ins[i].first;
          bool known = false;
          for (auto& inf : infos) known |= inf.name == nm;
          if (known) opt.input_shapes[nm] = ins[i].second.shape();
        }
        s = std::make_unique<Session>(dir / "model.onnx", opt);
      }
      auto infos = s->inputs();
      std::map<std::string, Tensor> feed;
      for (size_t i = 0; i < ins.size(); ++i) {
        std::string nm = ins[i].first;
        bool known = false;
        for (auto& inf : infos) known |= inf.name == nm;
        if (!known && i < infos.size()) nm = infos[i].name;
        Tensor t = ins[i].second;
        for (auto& inf : infos)
          if (inf.name == nm && inf.dtype == DType::bf16 && t.dtype() == DType::u16)
            t = Tensor::view(DType::bf16, t.shape(), t.raw(), std::make_shared<Tensor>(t));  // numpy has no bfloat16
        feed[nm] = t;
      }
      auto got = s->run(feed);
      auto out_infos = s->outputs();
      for (size_t i = 0; i < outs.size(); ++i) {
        std::string nm = outs[i].first;
        if (!got.count(nm) && i < out_infos.size()) nm = out_infos[i].name;
        if (!got.count(nm)) return fmt::format("fail\toutput '{}' was not produced", nm);
        Tensor want = outs[i].second;
        if (got.at(nm).dtype() == DType::bf16 && want.dtype() == DType::u16)
          want = Tensor::view(DType::bf16, want.shape(), want.raw(), std::make_shared<Tensor>(want));
        std::string diff = compare(nm, got.at(nm), want, tol);
        if (!diff.empty()) return fmt::format("fail\t{}: {}", set.filename().string(), diff);
      }
    }
    return "pass\t";
  } catch (const Error& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::replace(msg.begin(), msg.end(), '\t', ' ');
    if (e.code() == ErrorCode::unsupported) return "unsupported\t" + msg;
    return fmt::format("fail\t{}: {}", error_code_name(e.code()), msg);
  } catch (const std::exception& e) {
    return fmt::format("fail\tstd::exception: {}", e.what());
  }
}

Result run_forked(const fs::path& dir, const Options& o, Tolerance tol) {
  Result r;
  r.test = dir.filename().string();
  int fds[2];
  if (pipe(fds) != 0) return {r.test, "?", "crash", "pipe failed"};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(static_cast<unsigned>(o.timeout_s));
    std::string line = run_one(dir, o.target, o.fallback, o.specialize_values, tol);
    (void)!write(fds[1], line.data(), line.size());
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    r.status = sig == SIGALRM ? "timeout" : "crash";
    r.message = sig == SIGALRM ? fmt::format("did not finish in {} s", o.timeout_s) : fmt::format("killed by signal {} ({})", sig, strsignal(sig));
    return r;
  }
  auto tab = out.find('\t');
  r.status = out.substr(0, tab);
  r.message = tab == std::string::npos ? "" : out.substr(tab + 1);
  if (r.status.empty()) {
    r.status = "crash";
    r.message = "exited without a result";
  }
  return r;
}

std::map<std::string, Tolerance> load_tolerances(const fs::path& p) {
  std::map<std::string, Tolerance> out;
  std::ifstream f(p);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string test;
    Tolerance t;
    if (ss >> test >> t.rtol >> t.atol) out[test] = t;
  }
  return out;
}

std::set<std::string> load_set(const fs::path& p) {
  std::set<std::string> s;
  std::ifstream f(p);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty() && line[0] != '#') s.insert(line);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") o.data_dir = next();
    else if (a == "--target") o.target = next();
    else if (a == "--markdown") o.out_md = next();
    else if (a == "--baseline") o.baseline = next();
    else if (a == "--tolerances") o.tolerances = next();
    else if (a == "--filter") o.filter = next();
    else if (a == "--onnx-version") o.onnx_version = next();
    else if (a == "--timeout") o.timeout_s = std::stoi(next());
    else if (a == "--jobs") o.jobs = std::max(1, std::stoi(next()));
    else if (a == "--fallback") {
      try {
        o.fallback = parse_fallback(next());
      } catch (const Error& e) {  // a bad value is a usage error, not a crash
        std::fprintf(stderr, "conformance: --fallback: %s\n", e.what());
        return 2;
      }
    }
    else if (a == "--list") o.list = next();
    else if (a == "--update-baseline") o.update_baseline = true;
    else if (a == "--no-value-specialization") o.specialize_values = false;
    else {
      std::fprintf(stderr,
                   "usage: %s --data DIR [--target ref|cpu|cuda] [--markdown OUT.md] [--baseline FILE] "
                   "[--tolerances FILE] [--filter SUBSTR] [--list FILE] [--onnx-version V] [--timeout S] [--jobs N] [--fallback host|error] "
                   "[--no-value-specialization] [--update-baseline]\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.data_dir.empty() || !fs::is_directory(o.data_dir)) {
    std::fprintf(stderr, "conformance: --data '%s' is not a directory of ONNX node tests\n", o.data_dir.c_str());
    return 2;
  }
  if (o.target.rfind("cuda", 0) == 0) {
#ifdef KILN_WITH_CUDA
    // Asked in a child: CUDA initialised in this process would not work in
    // the forked children that run the tests.
    pid_t pid = fork();
    if (pid == 0) _exit(targets::cuda::device_present() ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("SKIPPED: conformance on cuda needs a CUDA device; this machine has none\n");
      return 77;
    }
#else
    std::printf("SKIPPED: this kiln was built without CUDA support\n");
    return 77;
#endif
  }
  auto tols = load_tolerances(o.tolerances);
  const std::set<std::string> only = o.list.empty() ? std::set<std::string>{} : load_set(o.list);
  std::vector<fs::path> dirs;
  for (auto& e : fs::directory_iterator(o.data_dir))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx") &&
        (o.filter.empty() || e.path().filename().string().find(o.filter) != std::string::npos) &&
        (o.list.empty() || only.count(e.path().filename().string())))
      dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());

  std::vector<Result> results;
  std::map<std::string, std::map<std::string, int>> per_op;
  std::map<std::string, int> totals;
  int skipped_domain = 0;
  std::vector<std::pair<fs::path, std::string>> todo;  // (test dir, operator)
  for (auto& d : dirs) {
    bool default_domain = true;
    std::string op = node_op(d / "model.onnx", &default_domain);
    if (!default_domain) {
      ++skipped_domain;
      continue;
    }
    todo.emplace_back(d, op);
  }
  // --jobs N: N threads, each forking one child per test (results in test order).
  std::vector<Result> slots(todo.size());
  std::atomic<size_t> next{0};
  std::mutex print_mu;
  auto worker = [&] {
    for (size_t k; (k = next++) < todo.size();) {
      auto it = tols.find(todo[k].first.filename().string());
      Result r = run_forked(todo[k].first, o, it == tols.end() ? Tolerance{} : it->second);
      r.op = todo[k].second;
      if (r.status != "pass" || !o.list.empty()) {  // a --list run names its passes too (a cut-off run keeps them)
        std::lock_guard<std::mutex> lock(print_mu);
        std::printf("%-60s %-11s %s\n", r.test.c_str(), r.status.c_str(), r.message.c_str());
        std::fflush(stdout);
      }
      slots[k] = std::move(r);
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < o.jobs; ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (auto& r : slots) {
    ++per_op[r.op][r.status];
    ++totals[r.status];
    results.push_back(r);
  }
  int total = static_cast<int>(results.size());
  double rate = total ? 100.0 * totals["pass"] / total : 0;
  std::string md = fmt::format(
      "# ONNX node conformance: target `{}`\n\nDataset: ONNX backend node tests from the `onnx` Python package {}, default "
      "domain only ({} tests in other domains not counted).\n\n| total | pass | fail | unsupported | crash | timeout | pass rate |\n"
      "|---|---|---|---|---|---|---|\n| {} | {} | {} | {} | {} | {} | {:.1f}% |\n\n## Per operator\n\n| operator | pass | fail | "
      "unsupported | crash/timeout |\n|---|---|---|---|---|\n",
      o.target, o.onnx_version.empty() ? "(version not given)" : o.onnx_version, skipped_domain, total, totals["pass"],
      totals["fail"], totals["unsupported"], totals["crash"], totals["timeout"], rate);
  for (auto& [op, c] : per_op)
    md += fmt::format("| {} | {} | {} | {} | {} |\n", op, c["pass"], c["fail"], c["unsupported"], c["crash"] + c["timeout"]);
  md += "\n## Not passing\n\n| test | status | reason |\n|---|---|---|\n";
  for (auto& r : results)
    if (r.status != "pass") {
      std::string m = r.message;
      std::replace(m.begin(), m.end(), '|', '/');
      md += fmt::format("| {} | {} | {} |\n", r.test, r.status, m);
    }
  if (!o.out_md.empty()) {
    std::ofstream(o.out_md) << md;
  }
  std::printf("\nconformance %s (onnx %s): %d tests, %d pass, %d fail, %d unsupported, %d crash, %d timeout: %.1f%% pass\n",
              o.target.c_str(), o.onnx_version.c_str(), total, totals["pass"], totals["fail"], totals["unsupported"],
              totals["crash"], totals["timeout"], rate);
  if (!o.out_md.empty()) std::printf("summary written to %s\n", o.out_md.c_str());

  int rc = 0;
  if (!o.baseline.empty()) {
    std::set<std::string> passing;
    for (auto& r : results)
      if (r.status == "pass") passing.insert(r.test);
    if (o.update_baseline) {
      std::ofstream f(o.baseline);
      f << "# Node tests that pass on target " << o.target << " (ratchet: tests/conformance/README.md)\n";
      for (auto& t : passing) f << t << "\n";
      std::printf("baseline updated: %zu passing tests in %s\n", passing.size(), o.baseline.c_str());
    } else {
      auto base = load_set(o.baseline);
      std::vector<std::string> regressed, fresh;
      for (auto& t : base)
        if (!passing.count(t) && std::any_of(results.begin(), results.end(), [&](auto& r) { return r.test == t; }))
          regressed.push_back(t);
      for (auto& t : passing)
        if (!base.count(t)) fresh.push_back(t);
      for (auto& t : regressed) std::printf("REGRESSION: %s passed in the baseline and does not pass now\n", t.c_str());
      if (!fresh.empty())
        std::printf("%zu tests pass that the baseline does not list (run with --update-baseline to ratchet)\n", fresh.size());
      if (!regressed.empty()) rc = 1;
    }
  }
  if (totals["crash"] > 0) {
    std::printf("%d tests crashed: a crash is a bug\n", totals["crash"]);
    rc = 1;
  }
  return rc;
}

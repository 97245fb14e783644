// kiln-stream MODEL.onnx REQUESTS_DIR OUT_DIR [--dim NAME=SPEC]... [--cache-dir DIR] [--target T] [--threads N]
//                                            [--out-of-bucket compile|error]
//
// Runs every request of REQUESTS_DIR (subdirectories 000000, 000001, ... in
// name order, each holding one INPUT.npy per model input) through ONE
// kiln::Session built with the given bucket options, writes each request's
// outputs to OUT_DIR/<request>/<output>.npy, and prints one JSON object:
// session construction, per-request run times (compiles included), and the
// number of programs compiled. Used by bench/buckets_stream.py.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/errors.h"
#include "kiln/session.h"
#include "support/npy.h"

namespace fs = std::filesystem;

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: kiln-stream MODEL.onnx REQUESTS_DIR OUT_DIR [--dim NAME=SPEC]... [--cache-dir DIR] "
                         "[--target T] [--threads N] [--out-of-bucket compile|error]\n");
    return 2;
  }
  try {
    kiln::SessionOptions opt;
    for (int i = 4; i + 1 < argc; i += 2) {
      std::string flag = argv[i], val = argv[i + 1];
      if (flag == "--dim") {
        auto eq = val.find('=');
        opt.dims[val.substr(0, eq)] = kiln::DimSpec::parse(eq == std::string::npos ? "" : val.substr(eq + 1), flag);
      } else if (flag == "--cache-dir") {
        opt.cache_dir = val;
      } else if (flag == "--target") {
        opt.target = kiln::Target::parse(val);
      } else if (flag == "--threads") {
        opt.threads = std::stoi(val);
      } else if (flag == "--out-of-bucket") {
        opt.out_of_bucket = val == "error" ? kiln::OutOfBucket::error : kiln::OutOfBucket::compile;
      } else {
        std::fprintf(stderr, "kiln-stream: unknown flag %s\n", flag.c_str());
        return 2;
      }
    }
    auto t0 = std::chrono::steady_clock::now();
    kiln::Session s(argv[1], opt);
    double construct_ms = ms_since(t0);
    std::vector<fs::path> reqs;
    for (auto& e : fs::directory_iterator(argv[2]))
      if (e.is_directory()) reqs.push_back(e.path());
    std::sort(reqs.begin(), reqs.end());
    nlohmann::json runs = nlohmann::json::array();
    double total = 0;
    for (auto& r : reqs) {
      std::map<std::string, kiln::Tensor> in;
      for (auto& info : s.inputs()) in[info.name] = kiln::read_npy(r / (info.name + ".npy"));
      int before = s.buckets().compiled_by_run;
      auto t = std::chrono::steady_clock::now();
      auto out = s.run(in);
      double ms = ms_since(t);
      total += ms;
      fs::path od = fs::path(argv[3]) / r.filename();
      fs::create_directories(od);
      for (auto& [name, tensor] : out) kiln::write_npy(od / (name + ".npy"), tensor);
      runs.push_back({{"request", r.filename().string()}, {"ms", ms},
                      {"compiled", s.buckets().compiled_by_run - before}});
    }
    auto b = s.buckets();
    nlohmann::json j = {{"construct_ms", construct_ms},
                        {"construct_compile_ms", s.stats().compile_ms},
                        {"cache", s.stats().cache == kiln::SessionStats::Cache::hit    ? "hit"
                                  : s.stats().cache == kiln::SessionStats::Cache::miss ? "miss"
                                                                                       : "none"},
                        {"runs_ms", total},
                        {"compiled_by_run", b.compiled_by_run},
                        {"run_compile_ms", b.compile_ms},
                        {"split_runs", b.split_runs},
                        {"modes", b.modes},
                        {"programs", b.programs},
                        {"dims", b.dims},
                        {"runs", runs}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-stream: error: %s\n", e.what());
    return 1;
  }
}

// kiln inside an existing ONNX Runtime program: the session is made the way
// ORT users make one (8 intra-op threads, ORT_ENABLE_ALL, verbose logging),
// with the kiln plugin EP appended and told to load a precompiled .kiln
// (never compiling at start-up).
//
//   ort_session LIBONNXRUNTIME PLUGIN MODEL.onnx ABSOLUTE.kiln INPUT OUTPUT N,C,H,W
//               [--precision P] [--save-model-path PATH] [--optimized-model-path PATH] [--out FILE]
//
// Runs the model once on a deterministic input (element i = (i % 17) / 17),
// prints the session creation time and writes the output's float32 values
// to --out. An ORT error is printed as "error: <message>" with exit code 1.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "ort_app_api.h"

namespace {

constexpr int ORT_ENABLE_ALL = 99;
constexpr int ORT_LOGGING_LEVEL_VERBOSE = 0;

/// What the application configures.
struct Config {
  std::string precision = "fp32";
  std::string kiln_artifact;                       ///< absolute path of the .kiln to load
  std::optional<std::string> save_model_path;      ///< unset: saving off
  std::optional<std::string> optimized_model_path; ///< ORT's SetOptimizedModelFilePath
};

/// The function users write: session options for their deployment, with the
/// kiln EP on device 0 loading a precompiled artifact. kiln has no separate
/// "save" switch: saving is off while save_model_path is unset.
Ort::Session make_session(Ort::Env& env, const std::string& model_path, const Config& cfg) {
  Ort::SessionOptions so;
  so.SetIntraOpNumThreads(8);
  so.SetGraphOptimizationLevel(ORT_ENABLE_ALL);
  so.SetLogSeverityLevel(ORT_LOGGING_LEVEL_VERBOSE);
  if (cfg.optimized_model_path) so.SetOptimizedModelFilePath(cfg.optimized_model_path->c_str());
  std::vector<std::pair<std::string, std::string>> kiln_options = {
      {"device_id", "0"},
      {"precision", cfg.precision},
      {"load_model_path", cfg.kiln_artifact},
  };
  if (cfg.save_model_path) kiln_options.emplace_back("save_model_path", *cfg.save_model_path);
  so.AppendExecutionProvider_V2(env, env.GetEpDevices("KilnExecutionProvider"), kiln_options);
  return Ort::Session(env, model_path.c_str(), so);
}

std::vector<int64_t> parse_shape(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    out.push_back(std::stoll(s.substr(pos, c == std::string::npos ? std::string::npos : c - pos)));
    pos = c == std::string::npos ? s.size() + 1 : c + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr,
                 "usage: %s LIBONNXRUNTIME PLUGIN MODEL.onnx ABSOLUTE.kiln INPUT OUTPUT N,C,H,W [--precision P] "
                 "[--save-model-path PATH] [--optimized-model-path PATH] [--out FILE]\n",
                 argv[0]);
    return 2;
  }
  Config cfg;
  cfg.kiln_artifact = argv[4];
  std::string out_file;
  for (int i = 8; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--precision") cfg.precision = argv[i + 1];
    else if (flag == "--save-model-path") cfg.save_model_path = argv[i + 1];
    else if (flag == "--optimized-model-path") cfg.optimized_model_path = argv[i + 1];
    else if (flag == "--out") out_file = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  try {
    Ort::Load(argv[1]);
    Ort::Env env(ORT_LOGGING_LEVEL_VERBOSE, "ort_session");
    env.RegisterExecutionProviderLibrary("kiln", argv[2]);
    auto t0 = std::chrono::steady_clock::now();
    Ort::Session session = make_session(env, argv[3], cfg);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("session created in %.1f ms\n", ms);
    std::vector<int64_t> shape = parse_shape(argv[7]);
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 17) / 17.0f;
    std::vector<float> y = session.Run(argv[5], x, shape, argv[6]);
    std::printf("output '%s': %zu values, first %g\n", argv[6], y.size(), y.empty() ? 0.0 : y[0]);
    if (!out_file.empty()) std::ofstream(out_file, std::ios::binary).write(reinterpret_cast<const char*>(y.data()),
                                                                           static_cast<std::streamsize>(y.size() * 4));
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// kiln: compile ONNX models once, load them in milliseconds (docs/cli.md).
#include <cstdio>
#include <iostream>
#include <string>

#include "cli.h"
#include "support/version.h"

namespace {
bool is_subcommand(CLI::App& app, const std::string& name) {
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == name) return true;
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  CLI::App app{
      std::string("kiln ") + version() +
      " - ahead-of-time compiler and runtime for ONNX models.\n"
      "Compiles a model once for a target (cpu: x86-64 with oneDNN; cuda: NVIDIA GPUs, in a build\n"
      "that found the CUDA toolkit; ref: the reference kernels), saves a self-describing .kiln artifact,\n"
      "and loads it in milliseconds on every later start; an artifact that no longer matches\n"
      "the model, options, machine or kiln version is recompiled or refused with the reason.\n\n"
      "Exit codes: 0 ok, 1 internal error, 2 invalid option, 3 incompatible artifact,\n"
      "4 invalid model, 5 unsupported operator/dtype, 6 invalid input, 7 corrupt artifact, 8 I/O error,\n"
      "9 kiln verify: some value is outside the tolerance."};
  // The whole version, build id included: artifacts and cache entries record
  // it, so it is all anyone needs to say which kiln made a program.
  app.set_version_flag("--version", std::string(version()),
                       "Print kiln's version, <release>+<build id> (a hash of the sources it was built from; "
                       "artifacts record it and another build's are recompiled or refused), and exit");
  app.require_subcommand(1);
  cli::Common common;
  bool perf_child = false;
  for (int i = 2; i < argc && std::string(argv[1]) == "perf"; ++i) perf_child |= std::string(argv[i]) == "--child";
  cli::add_compile(app, common);
  cli::add_run(app, common);
  cli::add_inspect(app, common);
  cli::add_check(app, common);
  cli::add_cache(app, common);
  cli::add_perf(app, common);
  cli::add_verify(app, common);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const cli::Exit& e) {
    return e.code;
  } catch (const CLI::ParseError& e) {
    // Usage errors follow the same contract as kiln's own: one line on
    // stderr, and the JSON error object when --json was asked for.
    std::string msg = e.what();
    if (argc > 1 && argv[1][0] != '-' && !is_subcommand(app, argv[1]))
      msg = std::string("unknown subcommand '") + argv[1] + "' (expected compile, run, inspect, check, cache, perf, verify)";
    std::fprintf(stderr, "kiln: error: %s\nRun with --help for more information.\n", msg.c_str());
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "--json") {
        cli::print_json({{"error", {{"code", "invalid_option"}, {"message", msg}}}});
        break;
      }
    return static_cast<int>(ErrorCode::invalid_option);
  } catch (const Error& e) {
    // A `kiln perf` child reports its error as JSON to the parent, which
    // prints it once with the child's exit code (one error line in all).
    if (!perf_child) std::fprintf(stderr, "kiln: error: %s\n", e.what());
    if (common.json)
      cli::print_json({{"error", {{"code", error_code_name(e.code())}, {"message", e.what()}}}});
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: internal error: %s\n", e.what());
    if (common.json) cli::print_json({{"error", {{"code", "internal"}, {"message", e.what()}}}});
    return static_cast<int>(ErrorCode::internal);
  }
  return 0;
}

// kiln: compile ONNX models once, load them in milliseconds (docs/cli.md).
#include <cstdio>
#include <iostream>

#include "cli.h"
#include "support/version.h"

int main(int argc, char** argv) {
  using namespace kiln;
  CLI::App app{
      "kiln " KILN_VERSION_STRING
      " - ahead-of-time compiler and runtime for ONNX models.\n"
      "Compiles a model once for a target (cpu, ref), saves a self-describing .kiln artifact,\n"
      "and loads it in milliseconds on every later start; an artifact that no longer matches\n"
      "the model, options, machine or kiln version is recompiled or refused with the reason.\n\n"
      "Exit codes: 0 ok, 1 internal error, 2 invalid option, 3 incompatible artifact,\n"
      "4 invalid model, 5 unsupported operator/dtype, 6 invalid input, 7 corrupt artifact, 8 I/O error."};
  app.set_version_flag("--version", KILN_VERSION_STRING);
  app.require_subcommand(1);
  cli::Common common;
  cli::add_compile(app, common);
  cli::add_run(app, common);
  cli::add_inspect(app, common);
  cli::add_check(app, common);
  cli::add_cache(app, common);
  cli::add_perf(app, common);
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
    app.exit(e);
    return static_cast<int>(ErrorCode::invalid_option);
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
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

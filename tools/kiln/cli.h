// Shared pieces of the kiln command line (tools/kiln).
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/errors.h"
#include "kiln/options.h"
#include "kiln/session.h"
#include "runtime/inspect.h"  // info_json, reference_json, is_artifact (shared with Python)
#include "runtime/sample_inputs.h"

namespace kiln::cli {

using json = nlohmann::ordered_json;

/// Thrown by a subcommand that has already printed its result and wants a
/// specific exit code (e.g. check: 3).
struct Exit {
  int code;
};

/// Options every subcommand shares.
struct Common {
  bool json = false;
};

/// cuda code-generation flags shared by compile, run, perf and cache explain.
struct CodegenArgs {
  std::string tuning;  ///< --tuning heuristic|fast|exhaustive (empty: the default)
  std::string arch;    ///< --arch sm_XY (empty: the device's)
  std::string fallback;  ///< --fallback host|error (empty: host)
};
/// Adds --tuning, --arch and --fallback to `sub` (their help explains
/// cross-compiling and host fallback).
void add_codegen_options(CLI::App* sub, CodegenArgs& a);
/// Sets opt.tuning / opt.arch / opt.fallback. Throws Error(invalid_option) naming the flag.
void apply_codegen(const CodegenArgs& a, SessionOptions& opt);
/// The numeric-precision flags of every subcommand that compiles.
struct PrecisionArgs {
  std::string precision = "fp32";  ///< --precision fp32|fp16|bf16
  bool tf32 = false;               ///< --tf32
  std::string check = "on";        ///< --precision-check on|off
  std::vector<std::string> check_inputs;  ///< --check-input NAME=FILE.npy (repeatable)
};
/// Adds --precision, --tf32, --precision-check and --check-input to `sub` (docs/cli.md).
void add_precision_flags(CLI::App* sub, PrecisionArgs& a);
/// Writes the flags into opt.precision / opt.allow_tf32 / precision_check /
/// precision_check_inputs (each --check-input file read as .npy).
/// Throws Error(invalid_option) naming "precision" for an unknown precision,
/// "--precision-check" for a value other than on / off, "--check-input" for a
/// spec that is not NAME=FILE.npy or names an input twice (a file that cannot be
/// read is read_npy's error; the target checks come with SessionOptions::validate).
void apply_precision(const PrecisionArgs& a, SessionOptions& opt);

/// Shape / value specialization switches (SessionOptions::specialize_shapes,
/// specialize_values) shared by run, perf and compile.
struct SpecializeArgs {
  bool no_shapes = false;  ///< --no-shape-specialization
  bool no_values = false;  ///< --no-value-specialization
};
/// Adds the flags to `sub`; `shapes` false leaves --no-shape-specialization out (compile).
void add_specialize_flags(CLI::App* sub, SpecializeArgs& a, bool shapes = true);
void apply_specialize(const SpecializeArgs& a, SessionOptions& opt);


/// Parses "NAME=DxDxD" (a rank-0 shape is "NAME=") into opt.input_shapes.
/// Throws Error(invalid_option) naming the flag and the text.
void parse_shapes(const std::vector<std::string>& specs, SessionOptions& opt);

/// Parses "NAME=SPEC" (DimSpec text forms) into opt.dims. Throws
/// Error(invalid_option) naming the flag and the text.
void parse_dims(const std::vector<std::string>& specs, SessionOptions& opt);

/// File-system-safe output file stem: characters outside [A-Za-z0-9._-]
/// become '_', an empty name or one starting with '.' gets a '_' prefix, and
/// repeats get "_2", "_3"... in output order (docs/cli.md).
std::vector<std::string> safe_names(const std::vector<std::string>& names);

/// min / max / mean of a float tensor (or its element count for others), one line.
std::string summarize(const Tensor& t);

json tensor_json(const std::string& name, const Tensor& t);

/// `j` as one line of JSON text. Names come from models and need not be
/// valid UTF-8: such bytes become U+FFFD instead of dump() throwing
/// type_error (which aborted `kiln inspect --json`).
template <class Json>
std::string json_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// A CLI11 check that refuses an empty path (exit 2, "invalid option",
/// naming the option) before anything tries to open or write it.
const CLI::Validator& non_empty_path();

void add_compile(CLI::App& app, Common& common);
void add_run(CLI::App& app, Common& common);
void add_inspect(CLI::App& app, Common& common);
void add_check(CLI::App& app, Common& common);
/// `kiln cache ls|verify|gc|clear|explain` (tools/kiln/cmd_cache.cpp, docs/cache.md).
void add_cache(CLI::App& app, Common& common);
/// `kiln perf MODEL.onnx` (tools/kiln/cmd_perf.cpp): compile/load/latency/memory measurements.
void add_perf(CLI::App& app, Common& common);

/// `kiln verify MODEL.onnx` (tools/kiln/cmd_verify.cpp): the compiled program against the ref target, value by
/// value; exit 9 when some value is outside the tolerance.
void add_verify(CLI::App& app, Common& common);

/// Prints a JSON object on stdout (one line).
void print_json(const json& j);

}  // namespace kiln::cli

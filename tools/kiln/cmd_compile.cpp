// kiln compile MODEL.onnx -o OUT.kiln
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "cli.h"
#include "kiln/compile.h"
#include "support/error.h"

namespace kiln::cli {

void add_compile(CLI::App& app, Common& common) {
  struct Args {
    std::string model, out, target = "cpu";
    std::vector<std::string> shapes, dims;
    CodegenArgs codegen;
    PrecisionArgs precision;
    SpecializeArgs specialize;
    std::vector<std::string> values;
  };
  auto args = std::make_shared<Args>();
  auto* sub = app.add_subcommand("compile", "Compile an ONNX model into a .kiln artifact (no cache involved).");
  sub->add_option("model", args->model, "ONNX model file (.onnx); external data files are read from its directory")
      ->required()
      ->check(non_empty_path());
  sub->add_option("-o,--output", args->out, "Artifact to write; written atomically (never a partial file)")
      ->required()
      ->check(non_empty_path());
  sub->add_option("--target", args->target, "cpu (default), ref (the reference oracle) or cuda[:N] (NVIDIA GPU N; only in a kiln built with CUDA)")->capture_default_str();
  add_precision_flags(sub, args->precision);
  sub->add_option("--shape", args->shapes,
                  "Fix an input's shape, NAME=DxDx... (repeatable); inputs not named keep the model's dims, "
                  "symbolic dims stay dynamic")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--dim", args->dims,
                  "Shape buckets for a symbolic dim, NAME=SPEC (repeatable): a list 1,2,4,8, a range 1..512 "
                  "(power-of-two buckets) or a range with buckets 1..512:16,64,128,512. Batch rows are padded up to a "
                  "bucket only where the graph provably keeps them apart; append /pad=none to forbid padding, or "
                  "/pad=sequence to pad a sequence dim masked by an integer *mask* input. One program per bucket "
                  "combination, constants stored once")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--value", args->values,
                  "NAME=V: compile a program for value V of a scalar integer input that the model's control flow or "
                  "shapes depend on (e.g. sr=16000); repeat with other values to store several programs, each "
                  "guarded by its value (a run with a value the artifact lacks is exit 6 naming it)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_specialize_flags(sub, args->specialize, /*shapes=*/false);
  add_codegen_options(sub, args->codegen);
  sub->add_flag("--json", common.json, "Print one JSON object with the facts on stdout");
  sub->callback([args, &common] {
    SessionOptions opt;
    opt.target = Target::parse(args->target);
    apply_precision(args->precision, opt);
    parse_shapes(args->shapes, opt);
    parse_dims(args->dims, opt);
    apply_codegen(args->codegen, opt);
    apply_specialize(args->specialize, opt);
    for (auto& spec : args->values) {
      auto eq = spec.find('=');
      if (eq == std::string::npos || eq == 0)
        fail(ErrorCode::invalid_option, "--value '{}': expected NAME=V (e.g. sr=16000)", spec);
      std::string text = spec.substr(eq + 1);
      try {
        size_t used = 0;
        long long v = std::stoll(text, &used);
        if (used != text.size()) throw std::invalid_argument(text);
        auto& list = opt.values[spec.substr(0, eq)];
        if (std::find(list.begin(), list.end(), v) != list.end())
          fail(ErrorCode::invalid_option, "--value '{}': given twice", spec);
        list.push_back(v);
      } catch (const std::logic_error&) {
        fail(ErrorCode::invalid_option, "--value '{}': '{}' is not an integer", spec, text);
      }
    }
    opt.validate();  // a bad option is reported before "compiling ..." is printed
    if (!common.json) std::fprintf(stderr, "kiln: compiling '%s' for %s...\n", args->model.c_str(), opt.target.name().c_str());
    CompileResult r = compile(args->model, args->out, opt);
    if (common.json) {
      print_json({{"model", args->model}, {"artifact", args->out}, {"target", opt.target.name()},
                  {"tuning", opt.effective_tuning() ? tuning_name(*opt.effective_tuning()) : "none"},
                  {"arch", opt.arch},
                  {"precision", precision_text(opt.precision, opt.allow_tf32)}, {"compile_ms", r.compile_ms}, {"write_ms", r.write_ms}, {"nodes_imported", r.nodes_imported},
                  {"nodes_compiled", r.nodes_compiled}, {"nodes_folded", r.nodes_folded},
                  {"arena_bytes", r.arena_bytes}, {"naive_bytes", r.naive_bytes},
                  {"artifact_bytes", r.artifact_bytes}, {"programs", r.programs}, {"model_digest", r.model_digest}, {"cache_key", r.cache_key},
                  {"notes", r.notes}});
      return;
    }
    for (auto& n : r.notes) std::fprintf(stderr, "kiln: note: %s\n", n.c_str());
    std::printf("compiled %s for %s in %.1f ms: %d nodes -> %d (%d folded at compile time)\n", args->model.c_str(),
                opt.target.name().c_str(), r.compile_ms, r.nodes_imported, r.nodes_compiled, r.nodes_folded);
    if (r.arena_bytes)
      std::printf("memory plan: %.2f MiB arena for intermediates (%.2f MiB without reuse)\n", r.arena_bytes / 1048576.0,
                  r.naive_bytes / 1048576.0);
    if (r.programs > 1) std::printf("buckets: %d programs, constants stored once\n", r.programs);
    std::printf("wrote %s (%.2f MiB) in %.1f ms\n", args->out.c_str(), r.artifact_bytes / 1048576.0, r.write_ms);
    for (auto& n : r.notes) std::fprintf(stderr, "kiln: note: %s\n", n.c_str());
  });
}

}  // namespace kiln::cli

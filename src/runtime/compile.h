// Compile side of the runtime: ONNX file -> CompiledProgram, and the cache
// lookup around it (internal).
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/compile.h"
#include "kiln/options.h"
#include "kiln/session.h"

namespace kiln {

class ProgramSet;

/// Canonical text of every option that changes the compiled program
/// (target, precision, tuning, input shapes); digested into the key.
std::string options_text(const SessionOptions& opt);

/// The facts of this machine and this kiln build that enter the key and the
/// compatibility block: target, device_arch, device_name, cpu_isa (the ISA
/// features the target's code needs), library_versions, kiln_version,
/// format_version. Everything below takes them as a parameter, so tests can
/// change each one alone (library versions and ISA cannot vary on one machine).
/// With a cuda opt.arch other than the device's (or no device): the facts of
/// a cross-compiled artifact (targets::compile_facts_for_arch).
artifact::CompatInfo build_facts(const SessionOptions& opt);
/// build_facts of default options for `target` (no --arch).
artifact::CompatInfo build_facts(const Target& target);

/// The compatibility block a compile of the model with `model_digest` and
/// `opt` would write on a machine with `facts` (input_signature and
/// cache_key left empty): every key field is set.
artifact::CompatInfo request_compat(const std::string& model_digest, const SessionOptions& opt,
                                    const artifact::CompatInfo& facts);

/// The cache-key fields (cache::key_field_names order) for a model digest and
/// options on this machine, or with the given facts.
std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt);
std::vector<std::pair<std::string, std::string>> key_fields(const std::string& model_digest, const SessionOptions& opt,
                                                            const artifact::CompatInfo& facts);

/// Imports, runs the passes for opt.target and builds the program with the
/// compatibility block `request` (from request_compat) completed with the
/// input signature and `cache_key`. Fills `report` (may be null). With
/// opt.dims, `sizes` (one per bucketed dim, in name order) fixes the bucket
/// this program is for; the result carries the bucket set and those sizes.
/// `layout_reference` (may be null): a program of another bucket, whose
/// packed weight layouts the cpu target reuses (constants stored once).
/// Throws Error(internal) when `sizes` does not have one entry per dim.
/// `known_set` (may be null): the model's bucket set as planned before for
/// these options (an artifact's, or a skeleton's): planning it again (shape
/// inference and the batch prover, which folds the model twice) is skipped.
/// `preimported` (may be null): the model already imported with
/// opt.input_shapes bound (BucketSkeleton::model), moved in instead of
/// importing the file a second time.
artifact::CompiledProgram compile_program(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                                          const artifact::CompatInfo& request, const std::string& cache_key,
                                          CompileResult* report, const std::vector<int64_t>& sizes = {},
                                          const ir::Model* layout_reference = nullptr,
                                          const artifact::BucketSet* known_set = nullptr,
                                          ir::Model* preimported = nullptr);

/// What a bucketed Session knows before compiling any bucket: the bucket set
/// and the model's inputs/outputs (bucketed dims symbolic).
struct BucketSkeleton {
  artifact::BucketSet set;
  std::vector<TensorInfo> inputs, outputs;
  std::string signature;
  /// The imported model (input_shapes bound), for compile_program's `preimported`
  /// when the caller compiles right away; moved out or dropped after that.
  std::optional<ir::Model> model;
};
/// Imports the model and plans its buckets for opt.dims (no compile).
/// Throws Error(invalid_option) naming a dim the model lacks, and import errors.
BucketSkeleton bucket_skeleton(const std::filesystem::path& onnx_path, const SessionOptions& opt);

/// What Session(onnx_path, opt) does: cache lookup (opt.cache_dir), compile
/// on a miss, publish, eviction; notes and timings go to `stats`. `facts`
/// replaces build_facts(opt.target) (a seam for tests). opt must be valid.
/// Throws what Session's constructor documents.
std::shared_ptr<const ProgramSet> obtain_program(const std::filesystem::path& onnx_path, const SessionOptions& opt,
                                              const artifact::CompatInfo& facts, SessionStats& stats);

}  // namespace kiln

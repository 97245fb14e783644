// Per-target compile pipelines (compile side).
#pragma once
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "artifact/artifact.h"
#include "kiln/options.h"

namespace kiln::targets {

/// How much of a 16-bit cuda program is 16-bit (cuda::PrecisionStats;
/// docs/cuda.md, "Which nodes are 16-bit"): of the nodes writing float32
/// values in the model (`float_nodes`), those whose float outputs are all
/// stored in the 16-bit type (`nodes_16bit`), and the rest with the reason.
struct PrecisionShare {
  struct Fp32Node {
    std::string node, op, why;
  };
  int float_nodes = 0;
  int nodes_16bit = 0;
  int clamped_constants = 0;  ///< constants with finite values beyond the 16-bit range, clamped to it
  std::vector<Fp32Node> fp32;
};

/// What the target-independent passes did, for reports; and for 16-bit cuda
/// programs the precision pass's share.
struct PipelineStats {
  int folded = 0;
  int dead = 0;
  std::optional<PrecisionShare> precision;
};

/// Runs the passes of `target` over cp.model (input shapes already bound):
/// shape inference + constant folding, dead-code elimination, verification,
/// and for cpu the static memory plan (cp.plan). The ref target stops after
/// verification: it is the plain oracle and allocates at run time.
/// `bucketed`: the program is one shape bucket of several sharing one copy of
/// the constants, so the cpu target lays weights out independently of the
/// input sizes; `layout_reference` (may be null) is a bucket compiled before,
/// whose packed layouts are reused where they fit (so the bytes are equal);
/// `batch_varies`: other programs of the set differ in the batch only
/// (specialized batch dim), so cpu weight layouts must not depend on it.
/// For cuda, opt.tuning and opt.arch decide where library algorithms are
/// chosen: on opt.target's device, or (opt.arch names another architecture
/// than the device's, or there is no device) at load by the libraries'
/// heuristics, which needs Tuning::heuristic (else Error(invalid_option)
/// naming "tuning"). opt.precision / opt.allow_tf32 (validated): cuda only;
/// fp16 / bf16 run the cuda precision pass (targets/cuda/compile/precision.h).
/// `precision_check` (may be empty): for 16-bit cuda programs, called with
/// the graph the precision pass is about to convert; returns the nodes to
/// keep in float32 (runtime/precision_check.h; cuda::LowerOptions).
/// Names of the environment switches the lowering passes read (measurement
/// aids such as KILN_CUDA_MERGE_QKV=0), sorted. A program compiled with one
/// set must not be reused without it, so the set ones are part of the cache
/// key (options_text).
const std::vector<std::string>& compile_env_switch_names();

/// The switches of compile_env_switch_names() set in this process's
/// environment, as (name, value), in name order.
std::vector<std::pair<std::string, std::string>> compile_env_switches();

using PrecisionHook = std::function<std::set<std::string>(const ir::Model&, DType)>;
PipelineStats run_pipeline(artifact::CompiledProgram& cp, const SessionOptions& opt, bool bucketed = false,
                           const ir::Model* layout_reference = nullptr, bool batch_varies = false,
                           const PrecisionHook& precision_check = {});

}  // namespace kiln::targets

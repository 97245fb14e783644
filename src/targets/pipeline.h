// Per-target compile pipelines (compile side).
#pragma once
#include "artifact/artifact.h"
#include "kiln/options.h"

namespace kiln::targets {

/// What the target-independent passes did, for reports.
struct PipelineStats {
  int folded = 0;
  int dead = 0;
};

/// Runs the passes of `target` over cp.model (input shapes already bound):
/// shape inference + constant folding, dead-code elimination, verification,
/// and for cpu the static memory plan (cp.plan). The ref target stops after
/// verification: it is the plain oracle and allocates at run time.
/// `bucketed`: the program is one shape bucket of several sharing one copy of
/// the constants, so the cpu target lays weights out independently of the
/// input sizes; `layout_reference` (may be null) is a bucket compiled before,
/// whose packed layouts are reused where they fit (so the bytes are equal).
/// `precision` / `allow_tf32` (SessionOptions, already validated): cuda only;
/// fp16 / bf16 run the cuda precision pass (targets/cuda/compile/precision.h).
PipelineStats run_pipeline(artifact::CompiledProgram& cp, const Target& target, bool bucketed = false,
                           const ir::Model* layout_reference = nullptr, Precision precision = Precision::fp32,
                           bool allow_tf32 = false);

}  // namespace kiln::targets

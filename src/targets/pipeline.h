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
PipelineStats run_pipeline(artifact::CompiledProgram& cp, const Target& target);

}  // namespace kiln::targets

#include "targets/pipeline.h"

#include "passes/passes.h"

namespace kiln::targets {

PipelineStats run_pipeline(artifact::CompiledProgram& cp, const Target& target) {
  PipelineStats st;
  st.folded = passes::infer_and_fold(cp.model).folded_nodes;
  st.dead = passes::eliminate_dead_code(cp.model);
  ir::verify(cp.model);
  if (target.kind == Target::Kind::cpu) cp.plan = passes::plan_memory(cp.model);
  return st;
}

}  // namespace kiln::targets

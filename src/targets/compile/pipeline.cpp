#include "targets/pipeline.h"

#include "passes/passes.h"
#include "support/log.h"
#include "targets/cpu/compile/lowering.h"

namespace kiln::targets {

PipelineStats run_pipeline(artifact::CompiledProgram& cp, const Target& target) {
  PipelineStats st;
  st.folded = passes::infer_and_fold(cp.model).folded_nodes;
  st.dead = passes::eliminate_dead_code(cp.model);
  ir::verify(cp.model);
  if (target.kind == Target::Kind::cpu) {
    auto low = cpu::lower_for_cpu(cp.model);
    log().info("cpu lowering: {} nodes lowered to oneDNN, {} fused as bias/post-ops, {} views folded, {} reorders, "
               "{} weights packed",
               low.lowered, low.fused, low.views_folded, low.reorders, low.packed);
    cp.plan = passes::plan_memory(cp.model);
  }
  return st;
}

}  // namespace kiln::targets

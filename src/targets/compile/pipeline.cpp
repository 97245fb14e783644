#include "targets/pipeline.h"

#include <cstdlib>
#include <fstream>

#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/cpu/compile/lowering.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/driver.h"
#endif

namespace kiln::targets {

PipelineStats run_pipeline(artifact::CompiledProgram& cp, const Target& target, bool bucketed,
                           const ir::Model* layout_reference, Precision precision, bool allow_tf32) {
  PipelineStats st;
  st.folded = passes::infer_and_fold(cp.model).folded_nodes;
  st.dead = passes::eliminate_dead_code(cp.model);
  ir::verify(cp.model);
  if (target.kind == Target::Kind::cpu) {
    // Target-independent rewrites first (the ref target stays the plain oracle
    // and skips them), then the oneDNN lowering.
    int simplified = passes::simplify_algebra(cp.model);
    int merged = passes::eliminate_common_subexpressions(cp.model);
    int bn = passes::fold_batch_norm(cp.model);
    int gelu = passes::recognize_gelu(cp.model);
    st.dead += passes::eliminate_dead_code(cp.model);
    log().info("cpu graph passes: {} simplified, {} common subexpressions merged, {} BatchNormalizations folded, "
               "{} Gelus recognised",
               simplified, merged, bn, gelu);
    auto low = cpu::lower_for_cpu(cp.model, {layout_reference, bucketed});
    log().info("cpu lowering: {} nodes lowered to oneDNN, {} fused as bias/post-ops, {} views folded, {} reorders, "
               "{} tiny element-wise nodes left to the reference kernels, {} weights packed",
               low.lowered, low.fused, low.views_folded, low.reorders, low.restored, low.packed);
    cp.plan = passes::plan_memory(cp.model);
    // Debugging aid: KILN_DEBUG_DUMP=FILE writes the lowered program as text.
    if (const char* dump = std::getenv("KILN_DEBUG_DUMP")) std::ofstream(dump) << ir::print(cp.model);
  }
  if (target.kind != Target::Kind::cuda && (precision != Precision::fp32 || allow_tf32))
    fail(ErrorCode::invalid_option, "precision: target {} supports only fp32 ({} requested)", target.name(),
         precision_text(precision, allow_tf32));
  if (target.kind == Target::Kind::cuda) {
#ifdef KILN_WITH_CUDA
    int simplified = passes::simplify_algebra(cp.model);
    int merged = passes::eliminate_common_subexpressions(cp.model);
    int bn = passes::fold_batch_norm(cp.model);
    int gelu = passes::recognize_gelu(cp.model);
    st.dead += passes::eliminate_dead_code(cp.model);
    log().info("cuda graph passes: {} simplified, {} common subexpressions merged, {} BatchNormalizations folded, "
               "{} Gelus recognised",
               simplified, merged, bn, gelu);
    auto facts = cuda::device_facts(target.device);
    cuda::LowerOptions lo;
    lo.arch = facts.arch;
    lo.sm_count = facts.sm_count;
    lo.device = target.device;
    lo.dtype = precision == Precision::fp16 ? DType::f16 : precision == Precision::bf16 ? DType::bf16 : DType::f32;
    lo.tf32 = allow_tf32;
    cuda::lower_for_cuda(cp, lo);
    if (const char* dump = std::getenv("KILN_DEBUG_DUMP")) std::ofstream(dump) << ir::print(cp.model);
#else
    fail(ErrorCode::unsupported, "target: this kiln was built without CUDA support");
#endif
  }
  return st;
}

}  // namespace kiln::targets

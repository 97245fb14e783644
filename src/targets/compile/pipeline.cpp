#include "targets/pipeline.h"

#include <cstdlib>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "passes/passes.h"
#include "support/error.h"
#include "support/log.h"
#include "targets/cpu/compile/lowering.h"
#ifdef KILN_WITH_CUDA
#include "targets/cuda/compile/lowering.h"
#include "targets/cuda/run/driver.h"
#endif

namespace kiln::targets {

#ifdef KILN_WITH_CUDA
namespace {
/// Where the cuda lowering makes its library choices (pipeline.h).
cuda::LowerOptions cuda_lower_options(const SessionOptions& opt) {
  cuda::LowerOptions lo;
  lo.tuning = opt.effective_tuning().value_or(Tuning::fast);
  std::optional<cuda::DeviceFacts> facts;
  std::string why;
  try {
    facts = cuda::device_facts(opt.target.device);
  } catch (const Error& e) {
    if (opt.arch.empty()) throw;  // no device and no --arch: the driver's reason
    why = e.what();
  }
  if (facts && (opt.arch.empty() || opt.arch == facts->arch)) {
    lo.arch = facts->arch;
    lo.sm_count = facts->sm_count;
    lo.device = opt.target.device;
    return lo;
  }
  if (facts) why = fmt::format("device {} is {} ({})", opt.target.device, facts->arch, facts->name);
  if (lo.tuning != Tuning::heuristic)
    fail(ErrorCode::invalid_option,
         "tuning: '{}' times candidate algorithms on a GPU of the target architecture, and there is none for {} here "
         "({}); cross-compile with --tuning heuristic (the libraries' heuristics then choose at load)",
         tuning_name(lo.tuning), opt.arch, why);
  lo.arch = opt.arch;
  lo.sm_count = cuda::sm_count_of(opt.arch);
  lo.device = -1;
  return lo;
}
}  // namespace
#endif

PipelineStats run_pipeline(artifact::CompiledProgram& cp, const SessionOptions& opt, bool bucketed,
                           const ir::Model* layout_reference, bool batch_varies,
                           const PrecisionHook& precision_check) {
  const Target& target = opt.target;
  PipelineStats st;
  st.folded = passes::infer_and_fold(cp.model).folded_nodes;
  st.dead = passes::eliminate_dead_code(cp.model);
  ir::verify(cp.model);
  if (target.kind == Target::Kind::cpu) {
    // Target-independent rewrites first (the ref target stays the plain oracle
    // and skips them), then the oneDNN lowering.
    int einsums = passes::einsum_to_matmul(cp.model);
    int pruned = passes::prune_conv_taps(cp.model);
    int split = passes::split_conv_taps(cp.model);
    int simplified = passes::simplify_algebra(cp.model);
    int merged = passes::eliminate_common_subexpressions(cp.model);
    int bn = passes::fold_batch_norm(cp.model);
    int gelu = passes::recognize_gelu(cp.model);
    int ln = passes::recognize_layernorm(cp.model);
    passes::AttentionStats att = passes::recognize_attention(cp.model);
    st.dead += passes::eliminate_dead_code(cp.model);
    log().info("cpu graph passes: {} Einsums as MatMul, {} Convs cut to their used taps, {} split into their taps, "
               "{} simplified, {} common "
               "subexpressions merged, {} BatchNormalizations folded, {} Gelus, {} LayerNormalizations and {} "
               "attention blocks recognised ({} with their Q / K scalings moved onto the scores)",
               einsums, pruned, split, simplified, merged, bn, gelu, ln, att.blocks, att.rewritten);
    auto low = cpu::lower_for_cpu(cp.model, {layout_reference, bucketed, batch_varies});
    log().info("cpu lowering: {} nodes lowered to oneDNN, {} fused as bias/post-ops, {} views folded, {} transposes "
               "as oneDNN reorders, {} reorders, "
               "{} concats whose inputs may be produced in place, {} reshapes that may alias their input, {} tiny "
               "element-wise nodes left to the reference kernels, {} weights packed",
               low.lowered, low.fused, low.views_folded, low.transposes, low.reorders, low.concats_in_place,
               low.views_in_place,
               low.restored, low.packed);
    cp.plan = passes::plan_memory(cp.model);
    // Debugging aid: KILN_DEBUG_DUMP=FILE writes the lowered program as text.
    if (const char* dump = std::getenv("KILN_DEBUG_DUMP")) std::ofstream(dump) << ir::print(cp.model);
  }
  if (target.kind != Target::Kind::cuda && (opt.precision != Precision::fp32 || opt.allow_tf32))
    fail(ErrorCode::invalid_option, "precision: target {} supports only fp32 ({} requested)", target.name(),
         precision_text(opt.precision, opt.allow_tf32));
  if (target.kind == Target::Kind::cuda) {
#ifdef KILN_WITH_CUDA
    // Einsums that are batched GEMMs (MaxViT's attention) become MatMuls
    // before the cuda lowering, which has no Einsum kernel: else each would
    // be a host segment with its copies (MaxViT-T: 117% of the batch-1
    // latency on the host, H200).
    int einsums = passes::einsum_to_matmul(cp.model);
    int simplified = passes::simplify_algebra(cp.model);
    int merged = passes::eliminate_common_subexpressions(cp.model);
    int bn = passes::fold_batch_norm(cp.model);
    int gelu = passes::recognize_gelu(cp.model);
    int ln = passes::recognize_layernorm(cp.model);
    st.dead += passes::eliminate_dead_code(cp.model);
    log().info("cuda graph passes: {} Einsums as MatMul, {} simplified, {} common subexpressions merged, {} "
               "BatchNormalizations folded, {} Gelus and {} LayerNormalizations recognised",
               einsums, simplified, merged, bn, gelu, ln);
    cuda::LowerOptions lo = cuda_lower_options(opt);
    lo.dtype = opt.precision == Precision::fp16   ? DType::f16
               : opt.precision == Precision::bf16 ? DType::bf16
                                                  : DType::f32;
    lo.tf32 = opt.allow_tf32;
    lo.precision_check = precision_check;
    lo.fallback = opt.fallback == Fallback::host;
    const cuda::LowerStats low = cuda::lower_for_cuda(cp, lo);
    if (lo.dtype != DType::f32) {
      PrecisionShare share;
      share.float_nodes = low.precision.float_nodes;
      share.nodes_16bit = low.precision.nodes_16bit;
      share.clamped_constants = low.precision.clamped;
      for (auto& f : low.precision.fp32) share.fp32.push_back({f.node, f.op, f.why});
      st.precision = std::move(share);
    }
    if (const char* dump = std::getenv("KILN_DEBUG_DUMP")) std::ofstream(dump) << ir::print(cp.model);
#else
    (void)precision_check;
    fail(ErrorCode::unsupported, "target: this kiln was built without CUDA support");
#endif
  }
  return st;
}

}  // namespace kiln::targets

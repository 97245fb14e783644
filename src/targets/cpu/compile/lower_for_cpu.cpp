// The cpu lowering, in order (lowering.h).
#include "passes/passes.h"
#include "targets/cpu/compile/lowering.h"

namespace kiln::targets::cpu {

LowerStats lower_for_cpu(ir::Model& m, const LowerOptions& options) {
  LowerStats st;
  std::vector<Lowered> elementwise;
  st.lowered = lower_ops(m, &elementwise);
  st.fused = fuse_post_ops(m);
  st.group_convs = group_convs(m);
  st.views_folded = fold_matmul_views(m);
  st.transposes = lower_transposes(m);
  st.reorders = assign_layouts(m, !options.size_independent_weights, options.batch_independent_weights);
  st.concats_in_place = mark_concat_in_place(m);
  st.views_in_place = mark_views_in_place(m);
  // Below ~16K elements a oneDNN call costs more than the work it does.
  st.restored = restore_small_elementwise(m, elementwise, 16384);
  st.matmuls_as_skinny = matmuls_as_skinny(m, options.layout_reference);
  st.matmuls_as_conv = matmuls_as_conv(m, options.layout_reference);
  st.packed = pack_weights(m, options.layout_reference);
  passes::eliminate_dead_code(m);
  ir::verify(m);
  return st;
}

}  // namespace kiln::targets::cpu

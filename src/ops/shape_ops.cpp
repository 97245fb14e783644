// STUB: operator family 'shape_ops' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_shape_ops(Registry&) {}

}  // namespace kiln::ops

// STUB: operator family 'elementwise_unary' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_elementwise_unary(Registry&) {}

}  // namespace kiln::ops

// STUB: operator family 'matmul' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_matmul(Registry&) {}

}  // namespace kiln::ops

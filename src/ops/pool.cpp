// STUB: operator family 'pool' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_pool(Registry&) {}

}  // namespace kiln::ops

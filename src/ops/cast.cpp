// STUB: operator family 'cast' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_cast(Registry&) {}

}  // namespace kiln::ops

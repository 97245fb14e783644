// STUB: operator family 'normalization' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_normalization(Registry&) {}

}  // namespace kiln::ops

// STUB: operator family 'activation' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_activation(Registry&) {}

}  // namespace kiln::ops

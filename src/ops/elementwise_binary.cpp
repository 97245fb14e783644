// STUB: operator family 'elementwise_binary' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_elementwise_binary(Registry&) {}

}  // namespace kiln::ops

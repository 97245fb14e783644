// STUB: operator family 'conv' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_conv(Registry&) {}

}  // namespace kiln::ops

// STUB: operator family 'gather' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_gather(Registry&) {}

}  // namespace kiln::ops

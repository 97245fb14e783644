// STUB: operator family 'control_flow' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_control_flow(Registry&) {}

}  // namespace kiln::ops

// STUB: operator family 'generator' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_generator(Registry&) {}

}  // namespace kiln::ops

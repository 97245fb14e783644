// STUB: operator family 'reduce' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_reduce(Registry&) {}

}  // namespace kiln::ops

// STUB: operator family 'softmax' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_softmax(Registry&) {}

}  // namespace kiln::ops

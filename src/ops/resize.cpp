// STUB: operator family 'resize' not written yet.
#include "ops/registry.h"

namespace kiln::ops {

void register_resize(Registry&) {}

}  // namespace kiln::ops

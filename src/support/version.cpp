#include "support/version.h"

#include "support/build_id.h"  // generated at build time (cmake/build_id.cmake)

namespace kiln {

const char* version() { return KILN_PROJECT_VERSION "+" KILN_BUILD_ID; }
const char* project_version() { return KILN_PROJECT_VERSION; }
const char* build_id() { return KILN_BUILD_ID; }

}  // namespace kiln

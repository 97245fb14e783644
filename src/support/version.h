// kiln's version: "<PROJECT_VERSION>+<build id>", e.g. "0.1.0+3f9a2c1d0b4e".
// The build id is a hash of the sources this kiln was built from
// (cmake/build_id.cmake), so two builds from different sources never share a
// version: artifacts record it (compat field kiln_version) and the cache key
// includes it, so a program compiled by another build is recompiled (cache) or
// refused (an explicit artifact). Defined in version.cpp alone, the only file
// that includes the generated header: a new id recompiles one file.
#pragma once

namespace kiln {

/// "<PROJECT_VERSION>+<build id>": what kiln --version, kiln inspect,
/// kiln.__version__ and the ORT plugin report, and the artifacts' kiln_version.
const char* version();
/// The project's release version alone (CMakeLists.txt's project(VERSION)), e.g. "0.1.0".
const char* project_version();
/// The build id alone: 12 lowercase hex digits.
const char* build_id();

}  // namespace kiln

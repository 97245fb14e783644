#!/usr/bin/env bash
# Configures (CMake preset "default": RelWithDebInfo, Ninja, ccache) and builds
# kiln into build/. Extra arguments go to `cmake --build` (e.g. --target kiln).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake --preset default >/dev/null
fi
cmake --build build "$@"

#!/usr/bin/env bash
# Configures (CMake preset "default": RelWithDebInfo, Ninja, ccache) and builds
# kiln into build/. Extra arguments go to `cmake --build` (e.g. --target kiln).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache keys relative to the repository root, without the build directory's
# path: `pip install .` (build-py/, cmake/skbuild.cmake) then replays these objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
# ccache hashes LANG / LC_* by default (they change the language of compiler
# messages, not the objects): without this a build under another locale (CI's
# fresh root runs under env -i, no LANG) misses every object the machine's own
# build cached.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-locale}
if [ ! -f build/build.ninja ]; then
  cmake --preset default >/dev/null
fi
cmake --build build "$@"

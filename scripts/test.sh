#!/usr/bin/env bash
# README command 2: set up (idempotent), build everything, run the whole test
# suite with CTest. GPU tests (label cuda) print SKIPPED on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
cd build
ctest --output-on-failure -j2 --timeout 1500 "$@"

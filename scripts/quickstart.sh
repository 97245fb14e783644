#!/usr/bin/env bash
# README command 1: set up, build, and run kiln's main job on a small model the
# project generates itself: a first process compiles it and saves the artifact
# in the cache; a second process loads it from the cache without compiling.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== building kiln (first build takes 10-20 minutes on 2 cores; ccache makes later ones fast)"
./scripts/build.sh --target kiln
echo "== generating the demo model"
.venv/bin/python tools/models/prepare.py --only demo
KILN=build/tools/kiln/kiln
CACHE=$(mktemp -d "${TMPDIR:-/tmp}/kiln-quickstart-cache.XXXXXX")
trap 'rm -rf "$CACHE"' EXIT
echo "== run 1: a new process, empty cache -> compiles and saves the artifact"
"$KILN" run .models/demo.onnx --random-inputs --cache-dir "$CACHE" --output-dir out/run1
echo "== run 2: a new process -> loads the artifact from the cache, no compilation"
"$KILN" run .models/demo.onnx --random-inputs --cache-dir "$CACHE" --output-dir out/run2
echo "== the cached artifact"
"$KILN" inspect "$CACHE"/*.kiln | head -8

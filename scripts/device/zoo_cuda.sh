#!/bin/bash
# The model zoo on cuda (issue 17's "every zoo model runs on cuda"): run after
# remote.sh with .gpu carried (scripts/device/README.md):
#   scripts/device/remote.sh scripts/device/zoo_cuda.sh [zoo.py --only args]
# Exports the zoo there (torch 2.11: its default exporter; models that need
# a wheel from PyPI are skipped, no internet there), then `zoo.py check`
# with `kiln run --target cuda` (fp32, no shape flags) against ONNX Runtime
# (CPU). KILN_ZOO_BUDGET_S (default 540; export gets KILN_ZOO_EXPORT_S, default 240) bounds the check; the table and
# logs come back in $OUT.
set -u
T0=$(date +%s)
mkdir -p "$OUT"
DIR=/tmp/zoo
ONLY=()
[ $# -gt 0 ] && ONLY=(--only "$@")
timeout "${KILN_ZOO_EXPORT_S:-240}" python3 tools/models/zoo.py export --dir "$DIR" "${ONLY[@]}" > "$OUT/export.log" 2>&1
tail -15 "$OUT/export.log"
LEFT=$(( ${KILN_ZOO_BUDGET_S:-540} - ($(date +%s) - T0) ))
KILN_ZOO_KILN_ARGS="--target cuda" timeout "$LEFT" python3 tools/models/zoo.py check --dir "$DIR" \
  --kiln build-cuda/tools/kiln/kiln --timeout 120 --report "$OUT/zoo_cuda.md" --json "$OUT/zoo_cuda.json" "${ONLY[@]}" \
  > "$OUT/check.log" 2>&1
tail -70 "$OUT/check.log"

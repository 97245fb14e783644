#!/usr/bin/env bash
# Time to add a specialization to a cache entry: a dynamic-batch model's
# entry holding batch 1, then `kiln run` with a batch-2 input, which compiles
# that program and adds it to the entry (docs/file-format.md, "Appended
# programs"). Compares two kiln binaries (e.g. one writing format 4, which
# rewrote the whole entry, and one writing format 5, which appends),
# interleaved, and prints per run: wall time, run_compile_ms (compile + cache
# write), the entry's growth and whether its inode changed.
#
# Usage: bench/entry_append.sh OLD_KILN NEW_KILN [MODEL] [INPUT_NAME] [REPS]
#   MODEL defaults to /tmp/kiln-dyn/resnet50_dyn.onnx (bench/make_dynamic.py),
#   whose input INPUT_NAME gets random [1|2,3,224,224] float32 inputs. Other
#   models: FIRST="--input a=a1.npy ..." SECOND="--input a=a2.npy ..." set the
#   `kiln run` input flags of the first and the second run.
set -euo pipefail
OLD=$1 NEW=$2 M=${3:-/tmp/kiln-dyn/resnet50_dyn.onnx} IN=${4:-input} REPS=${5:-3}
PY=${PY:-$(dirname "$0")/../.venv/bin/python}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" -c "
import numpy as np
np.random.seed(0)
for b in (1, 2): np.save('$W/x%d.npy' % b, np.random.rand(b, 3, 224, 224).astype(np.float32))"
export OMP_WAIT_POLICY=PASSIVE KILN_LOG=info
for rep in $(seq "$REPS"); do
  for which in old new; do
    K=$OLD; [ $which = new ] && K=$NEW
    C=$W/cache-$which; rm -rf "$C"
    # shellcheck disable=SC2086
    "$K" run "$M" ${FIRST:---input $IN=$W/x1.npy} --cache-dir "$C" --output-dir "$W/o" --json >/dev/null 2>&1
    E=$(ls "$C"/*.kiln); S0=$(stat -c %s "$E"); I0=$(stat -c %i "$E")
    T0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$K" run "$M" ${SECOND:---input $IN=$W/x2.npy} --cache-dir "$C" --output-dir "$W/o" --json >"$W/r.json" 2>"$W/log.txt"
    T1=$(date +%s.%N)
    S1=$(stat -c %s "$E"); I1=$(stat -c %i "$E")
    MS=$("$PY" -c "import json; d = json.load(open('$W/r.json')); print(round(d['run_compile_ms']), 'ms, compiles', d['compiled_by_run'])")
    echo "rep $rep $which: wall $(echo "$T1 - $T0" | bc) s; run_compile_ms $MS; entry $S0 -> $S1 bytes" \
      "(+$((S1 - S0))); inode $([ "$I0" = "$I1" ] && echo same || echo replaced)" \
      "$(grep -oE 'bytes written in [0-9.]+ ms' "$W/log.txt" | head -1)"
  done
done

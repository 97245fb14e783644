#!/bin/bash
# Per-node profiles of GPU zoo rows (issue #20: profile the slow ones) in one device call:
# `bench/gpu_zoo.py profile MODEL:BATCH ...` = kiln perf --target cuda --precision fp16 --profile
# on the zoo recipe's export, with the carried cp312 wheel's command line ($KILN_PY_GPU_DIR, default
# .gpu/gpuzoo, as for gpu_zoo.sh). Usage (timeout_s 600; carry the wheel folder):
#   bash scripts/device/gpu_zoo_profile.sh mobilenet_v2:32 gpt2_prefill:32 ...
# Output: $OUT/gpu_zoo_profile.tar.gz (one profile_MODEL_bB.txt each) and the log.
set -uo pipefail
cd "$(dirname "$0")/../.."
DIR=${KILN_PY_GPU_DIR:-.gpu/gpuzoo}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/gzp
{
  source scripts/device/kilnpy_env.sh
  kilnpy_setup "$DIR" || exit 1
  python3 bench/gpu_zoo.py profile "$@" --kiln "$KILN" --out /tmp/gzp --work build-gpuzoo/work --runs ${GZP_RUNS:-50}
} > "$OUT/gpu_zoo_profile.log" 2>&1
tar -czf "$OUT/gpu_zoo_profile.tar.gz" -C /tmp/gzp .
grep -h -E "^\\$|latency|profile \\(|^    [a-zA-Z]" /tmp/gzp/*.txt | head -150

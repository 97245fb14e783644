#!/bin/bash
# One device call that checks a build on the GPU and runs the GPU zoo bench (issue #20) in the
# same 10 minutes, with .gpu/build.tar.xz, .gpu/debs, .gpu/node.tar.xz and .gpu/pygpu (the cp312
# wheel of the same commit, scripts/device/README.md) carried; timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh scripts/device/combo_session.sh [gpu_zoo.py run options]
# While the bench exports and compiles (its first ~150 s: CPU-bound, the GPU lightly used), the
# cuda GoogleTest programs and the ONNX node tests of If / Loop / Scan (host fallback, then
# --fallback error) run beside it; they are done before its timing phase starts
# (COMBO_CHECK_S, default 170 s, cuts them). The bench's compile times are measured under that
# extra load as well as its 14 workers' (the report says the workers; this note says the rest).
# Output ($OUT, at most 8 files): gpu_zoo.{md,png,tar.gz,log} and combo_logs.tar.gz.
set -u
T0=$(date +%s)
cd "$(dirname "$0")/../.."
CHECK_S=${COMBO_CHECK_S:-170}
L=$OUT/combo_logs
mkdir -p "$L"
# First, on the quiet machine: the one-fallback-node timing (bench/fallback_timing.py, COMBO_FALLBACK_ROUNDS
# interleaved rounds, default 5, about 13 s each; 0 skips it).
if [ "${COMBO_FALLBACK_ROUNDS:-5}" -gt 0 ]; then
  OMP_WAIT_POLICY=PASSIVE timeout 150 python3 bench/fallback_timing.py --kiln build-cuda/tools/kiln/kiln \
    --rounds "${COMBO_FALLBACK_ROUNDS:-5}" --runs 200 --out "$L/fallback_timing" > "$L/fallback_timing.log" 2>&1
  echo "rc=$?" >> "$L/fallback_timing.log"; rm -f "$L"/fallback_timing/*.onnx; cat "$L/fallback_timing.log"
fi
T1=$(date +%s)
(
  for t in build-cuda/tests/cuda/kiln_cuda_*_gpu_tests build-cuda/tests/cuda/kiln_cuda_gpu_tests; do
    [ -x "$t" ] || continue
    left=$(( CHECK_S - ($(date +%s) - T1) )); [ "$left" -gt 10 ] || break
    timeout "$left" "$t" > "$L/$(basename "$t").log" 2>&1; echo "rc=$?" >> "$L/$(basename "$t").log"
  done
) &
(
  mkdir -p /tmp/onnxdata && tar -xJf .gpu/node.tar.xz -C /tmp/onnxdata
  (cd /tmp/onnxdata/node && ls -d test_if* test_loop* test_scan* | LC_ALL=C sort) > /tmp/cf_list.txt
  for fb in host error; do
    left=$(( CHECK_S - ($(date +%s) - T1) )); [ "$left" -gt 10 ] || break
    timeout "$left" build-cuda/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --list /tmp/cf_list.txt \
      --target cuda --jobs 4 --fallback "$fb" --timeout 60 --markdown "$L/conformance_cf_$fb.md" \
      --tolerances tests/conformance/tolerances.txt > "$L/conformance_cf_$fb.log" 2>&1
    echo "rc=$?" >> "$L/conformance_cf_$fb.log"
  done
) &
GPU_ZOO_BUDGET_S=$(( ${COMBO_BUDGET_S:-575} - ($(date +%s) - T0) )) bash scripts/device/gpu_zoo.sh "$@"
wait
for f in "$L"/*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^rc=|^conformance|SKIPPED \]" "$f" | head -12; done
[ -d "$OUT/logs" ] && cp -r "$OUT/logs" "$L/remote_logs" && rm -rf "$OUT/logs"
tar -czf "$OUT/combo_logs.tar.gz" -C "$OUT" combo_logs && rm -rf "$L"
echo "combo_session: done in $(( $(date +%s) - T0 )) s"

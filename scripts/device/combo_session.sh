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
# COMBO_GPU_ZOO=0 leaves the bench out; COMBO_CONF=all adds the whole node-test suite with --fallback error
# (COMBO_CONF_JOBS jobs, default 4; COMBO_CONF_FROM=N starts at its N-th test); COMBO_WARM=1 adds the warm
# start at the end (see below); COMBO_FALLBACK_ROUNDS=0 skips the fallback timing.
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
  # COMBO_CONF=all: the whole suite with --fallback error after the If/Loop/Scan tests (the ratchet).
  # COMBO_CONF_FROM=N: only the sorted list's tests from the N-th on (1-based; a call that resumes one cut short).
  [ "${COMBO_CONF:-cf}" = all ] && (cd /tmp/onnxdata/node && ls -d test_* | LC_ALL=C sort | tail -n "+${COMBO_CONF_FROM:-1}") > /tmp/cf_all.txt
  for fb in host error all; do
    list=/tmp/cf_list.txt; mode=$fb
    if [ "$fb" = all ]; then [ -e /tmp/cf_all.txt ] || break; list=/tmp/cf_all.txt; mode=error; fi
    left=$(( CHECK_S - ($(date +%s) - T1) )); [ "$left" -gt 10 ] || break
    timeout "$left" build-cuda/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --list "$list" \
      --target cuda --jobs "${COMBO_CONF_JOBS:-4}" --fallback "$mode" --timeout 60 --markdown "$L/conformance_cf_$fb.md" \
      --tolerances tests/conformance/tolerances.txt --baseline "$L/pass_$fb.txt" --update-baseline \
      > "$L/conformance_cf_$fb.log" 2>&1
    echo "rc=$?" >> "$L/conformance_cf_$fb.log"
  done
) &
# COMBO_GPU_ZOO=0: no bench (a verification call: the checks alone, up to COMBO_CHECK_S).
[ "${COMBO_GPU_ZOO:-1}" = 1 ] && GPU_ZOO_BUDGET_S=$(( ${COMBO_BUDGET_S:-575} - ($(date +%s) - T0) )) bash scripts/device/gpu_zoo.sh "$@"
wait
# COMBO_WARM=1: then, on the quiet machine again, the warm start (scripts/device/warm_start.sh: its
# own $OUT/warm_start.tgz), if COMBO_WARM_S (default 120) seconds are left of COMBO_BUDGET_S.
[ -d "$OUT/logs" ] && cp -r "$OUT/logs" "$L/remote_logs" && rm -rf "$OUT/logs"
if [ "${COMBO_WARM:-0}" = 1 ] && [ $(( ${COMBO_BUDGET_S:-575} - ($(date +%s) - T0) )) -gt "${COMBO_WARM_S:-120}" ]; then
  WARM_SKIP_TESTS=1 timeout "${COMBO_WARM_S:-120}" bash scripts/device/warm_start.sh
fi
for f in "$L"/*.log; do echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^rc=|^conformance|SKIPPED \]" "$f" | head -12; done
tar -czf "$OUT/combo_logs.tar.gz" -C "$OUT" combo_logs && rm -rf "$L"
echo "combo_session: done in $(( $(date +%s) - T0 )) s"

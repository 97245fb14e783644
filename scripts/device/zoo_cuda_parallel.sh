#!/bin/bash
# The whole model zoo on cuda in one device call (issue 17: "every zoo model
# runs on cuda in fp32 and fp16, host fallback listed, host share <= 10%"):
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh scripts/device/zoo_cuda_parallel.sh
# with .gpu carried (build.tar.xz, debs; optionally .gpu/zoo_wheel/*.onnx: the
# models shipped in PyPI wheels, copied from .models/zoo here, since the GPU
# machine has no internet to fetch the wheels).
#
# One export alone takes ~10 s there (torch 2.11's exporter), so the zoo is
# split into KILN_ZOO_WORKERS groups (default 4), each in its own directory
# (zoo.py export locks its directory) and process: export, then
# `zoo.py check` with `kiln run --target cuda --tuning heuristic` per
# precision in KILN_ZOO_PRECISIONS (default "fp32 fp16") with the issue's
# tolerance (fp32: |kiln - ort| <= 1e-3 max|ort|; fp16: 1e-2 max|ort|) and
# KILN_ZOO_PROFILE=1 (`kiln perf --profile`: the host segments' share of the
# latency). Every group stops at KILN_ZOO_BUDGET_S (default 540) after the
# start. Results: $OUT/zoo_cuda.tar.gz (zoo_<precision>_g<N>.{json,md} and
# logs/: the device tool brings back at most 8 files) and $OUT/zoo_cuda_report.md.
# Here: tar -xzf zoo_cuda.tar.gz && tools/models/zoo_cuda_report.py zoo_*_g*.json
# KILN_ZOO_EXPORT_SHARE (default 40): percent of the budget left for exports.
# KILN_ZOO_CONFORMANCE=1 (needs .gpu/node.tar.xz) also runs the ONNX node tests
# on cuda in parallel, with --fallback host then error (KILN_ZOO_CONF_JOBS jobs,
# default 6), ratcheting copies of tests/conformance/baseline_cuda*.txt.
# The kiln log of every model that fails its check goes into the tar (logs/failed/), with
# `kiln verify`'s JSON for it (KILN_ZOO_VERIFY, default 1: the first node that differs from ref).
# KILN_ZOO_CONF_STEPS: which conformance steps (see conformance()).
# KILN_ZOO_GPU_TESTS=1 also runs the cuda GoogleTest programs beside the zoo (logs/).
set -u
T0=$(date +%s)
mkdir -p "$OUT/logs"
WORKERS=${KILN_ZOO_WORKERS:-4}
BUDGET=${KILN_ZOO_BUDGET_S:-540}
PRECISIONS=${KILN_ZOO_PRECISIONS:-fp32 fp16}
mapfile -t ALL < <(python3 tools/models/zoo.py list | awk 'NR > 1 && NF >= 3 && $2 != "models:" {print $1}')
[ $# -gt 0 ] && ALL=("$@")
# --none: no zoo model (a call for the conformance suite, the GPU tests or the fallback timing alone).
[ "${1:-}" = --none ] && { ALL=(); WORKERS=0; }
echo "zoo: ${#ALL[@]} models, $WORKERS groups, precisions: $PRECISIONS, budget ${BUDGET} s"

tol() { [ "$1" = fp16 ] && echo maxref:1e-2 || echo maxref:1e-3; }

group() {  # $1: group index; the rest: its models
  local g=$1; shift
  local dir=/tmp/zoo_g$g
  mkdir -p "$dir"
  for m in "$@"; do  # a wheel model carried here needs no export
    [ -e ".gpu/zoo_wheel/$m.onnx" ] && cp ".gpu/zoo_wheel/$m.onnx" "$dir/"
  done
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  timeout "$(( left * ${KILN_ZOO_EXPORT_SHARE:-40} / 100 ))" python3 tools/models/zoo.py export --dir "$dir" --only "$@" > "$OUT/logs/export_g$g.log" 2>&1
  for p in $PRECISIONS; do
    left=$(( BUDGET - ($(date +%s) - T0) ))
    [ "$left" -gt 20 ] || break
    KILN_ZOO_TOLERANCE=$(tol "$p") KILN_ZOO_PROFILE=1 KILN_ZOO_VERIFY=${KILN_ZOO_VERIFY:-1} \
      KILN_ZOO_KILN_ARGS="--target cuda --precision $p --tuning heuristic" \
      timeout "$left" python3 tools/models/zoo.py check --dir "$dir" --kiln build-cuda/tools/kiln/kiln --timeout 150 \
      --report "$OUT/zoo_${p}_g$g.md" --json "$OUT/zoo_${p}_g$g.json" --only "$@" > "$OUT/logs/check_${p}_g$g.log" 2>&1
    keep_failed "$dir" "$p" "$OUT/zoo_${p}_g$g.json"
  done
}

keep_failed() {  # $1: group dir, $2: precision, $3: its JSON: copies the kiln logs of failed models
  mkdir -p "$OUT/logs/failed"
  [ -e "$3" ] || return 0
  python3 - "$3" <<'PY' | while read -r m; do cp "$1/check-logs/$m.log" "$OUT/logs/failed/${m}_$2.log" 2>/dev/null; cp "$1/check-logs/$m.verify.json" "$OUT/logs/failed/${m}_$2.verify.json" 2>/dev/null; done
import json, sys
d = json.load(open(sys.argv[1]))
rows = d.values() if isinstance(d, dict) else d
for r in rows:
    if isinstance(r, dict) and r.get("result") == "FAIL" and "not exported" not in r.get("reason", ""):
        print(r["model"])
PY
}

conformance() {  # the ONNX node tests on cuda: first those cpu passes and cuda's baseline lacks,
  # then the whole suite in 4 chunks with host fallback, then with --fallback error, while time is
  # left; every chunk writes its own passing list (pass_<step>.txt: a run cut by the budget loses
  # one chunk, not all); merge them here with the baselines.
  mkdir -p /tmp/onnxdata && tar -xJf .gpu/node.tar.xz -C /tmp/onnxdata
  # LC_ALL=C: comm needs both lists in one collation (the GPU machine's locale
  # dropped 26 of the 44 names once).
  LC_ALL=C comm -23 <(grep -v '^#' tests/conformance/baseline_cpu.txt | LC_ALL=C sort) \
           <(grep -v '^#' tests/conformance/baseline_cuda.txt | LC_ALL=C sort) > /tmp/conf_missing.txt
  (cd /tmp/onnxdata/node && ls -d test_* | LC_ALL=C sort) > /tmp/conf_all.txt
  split -n l/4 -d /tmp/conf_all.txt /tmp/conf_chunk_c
  local step fb list left
  # KILN_ZOO_CONF_STEPS picks the steps, e.g. "c00:error c01:error c02:error c03:error" for a
  # --fallback error run alone.
  for step in ${KILN_ZOO_CONF_STEPS:-missing:host c00:host c01:host c02:host c03:host c00:error c01:error c02:error c03:error}; do
    fb=${step#*:}
    list=/tmp/conf_chunk_${step%%:*}
    [ "${step%%:*}" = missing ] && list=/tmp/conf_missing.txt
    left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
    [ "$left" -gt 20 ] || break
    timeout "$left" build-cuda/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --list "$list" \
      --target cuda --jobs "${KILN_ZOO_CONF_JOBS:-6}" --fallback "$fb" --timeout 60 \
      --markdown "$OUT/conformance_cuda_${step/:/_}.md" \
      --tolerances tests/conformance/tolerances.txt --baseline "$OUT/pass_${step/:/_}.txt" --update-baseline \
      > "$OUT/logs/conformance_${step/:/_}.log" 2>&1
    echo "rc=$?" >> "$OUT/logs/conformance_${step/:/_}.log"
  done
}

# KILN_ZOO_FALLBACK_TIMING=1: first, on the still quiet machine, the one-fallback-node timing
# (bench/fallback_timing.py; OMP_WAIT_POLICY=PASSIVE: the host segment's OpenMP workers sleep
# instead of spinning beside the thread that drives the GPU), into $OUT/fallback_timing/.
# KILN_ZOO_FALLBACK_ROUNDS (default 5): its interleaved rounds (medians over them);
# KILN_ZOO_FALLBACK_REPEATS (default 1): that many whole runs of it, one after another (fallback_timing/rN/).
if [ "${KILN_ZOO_FALLBACK_TIMING:-0}" = 1 ]; then
  for r in $(seq 1 "${KILN_ZOO_FALLBACK_REPEATS:-1}"); do
    OMP_WAIT_POLICY=PASSIVE timeout $(( 40 + 40 * ${KILN_ZOO_FALLBACK_ROUNDS:-5} )) python3 bench/fallback_timing.py \
      --kiln build-cuda/tools/kiln/kiln --rounds "${KILN_ZOO_FALLBACK_ROUNDS:-5}" \
      --out "$OUT/fallback_timing/r$r" --runs "${KILN_ZOO_FALLBACK_RUNS:-300}" > "$OUT/logs/fallback_timing_r$r.log" 2>&1
    echo "rc=$?" >> "$OUT/logs/fallback_timing_r$r.log"
    rm -f "$OUT"/fallback_timing/r$r/*.onnx
    tail -8 "$OUT/logs/fallback_timing_r$r.log"
  done
fi

# Round-robin over the list (it is ordered by family, so each group gets a mix of sizes).
declare -a G
for i in "${!ALL[@]}"; do G[$((i % WORKERS))]+="${ALL[$i]} "; done
for g in $(seq 0 $((WORKERS - 1))); do
  # shellcheck disable=SC2086
  group "$g" ${G[$g]} &
done
if [ "${KILN_ZOO_CONFORMANCE:-0}" = 1 ] && [ -e .gpu/node.tar.xz ]; then conformance & fi
if [ "${KILN_ZOO_GPU_TESTS:-0}" = 1 ]; then  # the cuda GoogleTest programs, one after another, beside the zoo
  ( for t in build-cuda/tests/cuda/kiln_cuda_*_gpu_tests build-cuda/tests/cuda/kiln_cuda_gpu_tests; do
      [ -x "$t" ] || continue
      left=$(( BUDGET - ($(date +%s) - T0) - 10 )); [ "$left" -gt 20 ] || break
      timeout "$left" "$t" > "$OUT/logs/$(basename "$t").log" 2>&1; echo "rc=$?" >> "$OUT/logs/$(basename "$t").log"
    done ) &
fi
wait
for f in "$OUT"/logs/conformance_*.log; do [ -e "$f" ] && { echo "== $f"; grep -E "^conformance|REGRESS|crash|rc=" "$f" | head -5; }; done
for f in "$OUT"/logs/kiln_cuda_*gpu_tests.log; do [ -e "$f" ] && { echo "== $f"; grep -E "^\[  (PASSED|FAILED) |^rc=|SKIPPED" "$f" | head -12; }; done
for f in "$OUT"/logs/failed/*.log; do [ -e "$f" ] && { echo "== $f"; grep -v "^\s*$" "$f" | tail -6 | cut -c1-400; }; done
for f in "$OUT"/logs/check_*; do echo "== $f"; tail -3 "$f"; done
grep -h "export FAILED\|not exported" "$OUT"/logs/export_g*.log | cut -c1-300
ls "$OUT"/zoo_*_g*.json >/dev/null 2>&1 && python3 tools/models/zoo_cuda_report.py "$OUT"/zoo_*_g*.json --out "$OUT/zoo_cuda_report.md" | tail -3
(cd "$OUT" && tar -czf zoo_cuda.tar.gz logs $(ls -d zoo_*_g*.json zoo_*_g*.md conformance_cuda_*.md pass_*.txt fallback_timing 2>/dev/null) && rm -rf zoo_*_g*.json zoo_*_g*.md logs conformance_cuda_*.md pass_*.txt fallback_timing)
echo "zoo_cuda_parallel: done in $(( $(date +%s) - T0 )) s"

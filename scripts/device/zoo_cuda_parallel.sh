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
set -u
T0=$(date +%s)
mkdir -p "$OUT/logs"
WORKERS=${KILN_ZOO_WORKERS:-4}
BUDGET=${KILN_ZOO_BUDGET_S:-540}
PRECISIONS=${KILN_ZOO_PRECISIONS:-fp32 fp16}
mapfile -t ALL < <(python3 tools/models/zoo.py list | awk 'NR > 1 && NF >= 3 && $2 != "models:" {print $1}')
[ $# -gt 0 ] && ALL=("$@")
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
  timeout "$(( left * 2 / 5 ))" python3 tools/models/zoo.py export --dir "$dir" --only "$@" > "$OUT/logs/export_g$g.log" 2>&1
  for p in $PRECISIONS; do
    left=$(( BUDGET - ($(date +%s) - T0) ))
    [ "$left" -gt 20 ] || break
    KILN_ZOO_TOLERANCE=$(tol "$p") KILN_ZOO_PROFILE=1 \
      KILN_ZOO_KILN_ARGS="--target cuda --precision $p --tuning heuristic" \
      timeout "$left" python3 tools/models/zoo.py check --dir "$dir" --kiln build-cuda/tools/kiln/kiln --timeout 150 \
      --report "$OUT/zoo_${p}_g$g.md" --json "$OUT/zoo_${p}_g$g.json" --only "$@" > "$OUT/logs/check_${p}_g$g.log" 2>&1
  done
}

# Round-robin over the list (it is ordered by family, so each group gets a mix of sizes).
declare -a G
for i in "${!ALL[@]}"; do G[$((i % WORKERS))]+="${ALL[$i]} "; done
for g in $(seq 0 $((WORKERS - 1))); do
  # shellcheck disable=SC2086
  group "$g" ${G[$g]} &
done
wait
for f in "$OUT"/logs/check_*; do echo "== $f"; tail -3 "$f"; done
grep -h "export FAILED\|not exported" "$OUT"/logs/export_g*.log | cut -c1-300
python3 tools/models/zoo_cuda_report.py "$OUT"/zoo_*_g*.json --out "$OUT/zoo_cuda_report.md" | tail -3
(cd "$OUT" && tar -czf zoo_cuda.tar.gz zoo_*_g*.json zoo_*_g*.md logs && rm -rf zoo_*_g*.json zoo_*_g*.md logs)
echo "zoo_cuda_parallel: done in $(( $(date +%s) - T0 )) s"

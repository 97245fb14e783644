#!/bin/bash
# Host segments through pinned, reused staging (issue 17, the fallback timing
# line), one device call. Runs from a folder carried to the GPU machine (the
# device tool sends the lead's checkout; a helper's builds travel in an
# ignored folder of it) that holds: this script, after.tar.xz and optionally
# before.tar.xz and pinned.tar.xz (scripts/device/pack.sh of the build to
# measure, of main before the change, of a build in between), debs/ (the Debian runtime libraries,
# scripts/device/README.md) and fallback_timing.py (bench/). Steps:
#  - kiln_cuda_fallback_gpu_tests of the after build (repeated runs with
#    changing data against ref, two host segments, ...);
#  - bench/fallback_timing.py with the after build, the before build, the
#    in-between build, then the after build again (drift shows as a
#    difference of the two);
#  - kiln_cuda_gpu_tests of the after build, while time is left.
# PINNED_RUNS (default 300) timed runs per figure; PINNED_BUDGET_S (330) the
# seconds after which no new step starts. Results under $OUT (one results.tgz).
set -u
D=$(cd "$(dirname "$0")" && pwd)
R=$OUT/results
L=$R/logs
mkdir -p "$L"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( ${PINNED_BUDGET_S:-330} - ($(date +%s) - t0) )); }
mkdir -p /tmp/debs && for f in "$D"/debs/*.deb; do dpkg -x "$f" /tmp/debs; done
for b in after before pinned; do
  [ -e "$D/$b.tar.xz" ] && mkdir -p /tmp/kb_$b && tar -xJf "$D/$b.tar.xz" -C /tmp/kb_$b
done
extra=""
for l in libcublasLt.so.13 libcudart.so.13 libnvrtc.so.13 libcuda.so.1 libcudnn.so.9 libnvrtc-builtins.so.13.0; do
  if ! ldconfig -p | grep -q "$l"; then
    p=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
    [ -n "$p" ] && extra="$extra:$(dirname "$p")"
  fi
done
export LD_LIBRARY_PATH=/tmp/debs/usr/lib/x86_64-linux-gnu${extra}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L/machine.txt"
nproc >> "$L/machine.txt"
ldd /tmp/kb_after/tools/kiln/kiln | grep -i "not found"

stamp "fallback GPU tests (after)"
timeout 90 /tmp/kb_after/tests/cuda/kiln_cuda_fallback_gpu_tests > "$L/fallback_gpu_tests.log" 2>&1
echo "rc=$?" >> "$L/fallback_gpu_tests.log"
grep -E "^\[  (PASSED|FAILED|  OK) |^\[  FAILED|Failure|rc=" "$L/fallback_gpu_tests.log" | head -20

timing() {  # timing NAME BUILD
  [ -x "/tmp/kb_$2/tools/kiln/kiln" ] || return
  [ "$(left)" -gt 60 ] || { stamp "no time left for timing $1"; return; }
  stamp "fallback timing: $1"
  timeout $(( $(left) - 20 )) python3 "$D/fallback_timing.py" --kiln "/tmp/kb_$2/tools/kiln/kiln" --out "$R/$1" \
    --runs "${PINNED_RUNS:-300}" > "$L/timing_$1.log" 2>&1
  echo "rc=$?" >> "$L/timing_$1.log"
  cat "$L/timing_$1.log"
  rm -f "$R/$1"/fb_*.onnx
}
timing after after
timing before before
timing pinned pinned
timing after_again after

if [ "$(left)" -gt 40 ]; then
  stamp "cuda GPU tests (after)"
  timeout $(( $(left) - 10 )) /tmp/kb_after/tests/cuda/kiln_cuda_gpu_tests > "$L/gpu_tests.log" 2>&1
  echo "rc=$?" >> "$L/gpu_tests.log"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$L/gpu_tests.log" | head -20
fi
stamp "done"
cd "$OUT" && tar czf results.tgz results && rm -rf results

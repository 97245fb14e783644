#!/bin/bash
# Loop and Scan as WHILE conditional nodes on the GPU (issue 17, build item 1),
# one device call. Runs from a folder carried to the GPU machine (the device
# tool sends the lead's checkout; a helper's build travels in an ignored
# folder of it, e.g. .gpu/loop/) that holds: this script, build.tar.xz
# (tests/cuda/kiln_cuda_conditional_gpu_tests, kiln_cuda_fallback_gpu_tests
# and tests/conformance/kiln_conformance of a build, stripped), debs/ (the Debian runtime libraries,
# scripts/device/README.md), node.tar.xz (the ONNX node tests test_if*,
# test_loop*, test_scan*) and tolerances.txt (tests/conformance). Steps:
#  - kiln_cuda_conditional_gpu_tests: the WHILE/IF probe, the If programs and
#    the Loop / Scan programs (test_cuda_loop_gpu.cpp) against ref;
#  - kiln_cuda_fallback_gpu_tests (host segments next to conditional nodes);
#  - the node tests test_loop* / test_scan* / test_if* on cuda with
#    --no-value-specialization, then with --fallback error (value
#    specialization on, as the ctest ratchet runs them).
# Results under $OUT (logs.tgz, conformance_*.md).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs
mkdir -p "$L"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/debs && for f in "$D"/debs/*.deb; do dpkg -x "$f" /tmp/debs; done
B=/tmp/kb && mkdir -p $B && tar -xJf "$D/build.tar.xz" -C $B
extra=""
for l in libcublasLt.so.13 libcudart.so.13 libnvrtc.so.13 libcuda.so.1 libcudnn.so.9 libnvrtc-builtins.so.13.0; do
  if ! ldconfig -p | grep -q "$l"; then
    p=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
    [ -n "$p" ] && extra="$extra:$(dirname "$p")"
  fi
done
export LD_LIBRARY_PATH=/tmp/debs/usr/lib/x86_64-linux-gnu${extra}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldd $B/tests/conformance/kiln_conformance | grep -i "not found"

stamp "conditional GPU tests (probe, If, Loop, Scan programs)"
timeout 120 $B/tests/cuda/kiln_cuda_conditional_gpu_tests > "$L/conditional_gpu_tests.log" 2>&1
echo "rc=$?" >> "$L/conditional_gpu_tests.log"
grep -E "^\[ +(PASSED|FAILED|OK) |Failure|error|iterations matched|conditional nodes:|rc=" "$L/conditional_gpu_tests.log" | head -40

stamp "fallback GPU tests"
timeout 60 $B/tests/cuda/kiln_cuda_fallback_gpu_tests > "$L/fallback_gpu_tests.log" 2>&1
echo "rc=$?" >> "$L/fallback_gpu_tests.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$L/fallback_gpu_tests.log" | head -20

mkdir -p /tmp/onnxdata && tar -xJf "$D/node.tar.xz" -C /tmp/onnxdata
for mode in nospec error; do
  for f in test_loop test_scan test_if; do
    opts="--no-value-specialization"
    [ $mode = error ] && opts="--fallback error"
    stamp "node tests $f* on cuda ($opts)"
    timeout 60 $B/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --target cuda --jobs 8 --filter $f \
      $opts --timeout 30 --markdown "$OUT/conformance_${f}_$mode.md" --tolerances "$D/tolerances.txt" \
      > "$L/conformance_${f}_$mode.log" 2>&1
    echo "rc=$?" >> "$L/conformance_${f}_$mode.log"
    grep -E "^\| test_|rc=" "$OUT/conformance_${f}_$mode.md" "$L/conformance_${f}_$mode.log" | head -14
  done
done
stamp "done"
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs

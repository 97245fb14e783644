#!/bin/bash
# Conditional nodes on the GPU (issue 17, build item 1), one device call.
# Runs from a folder carried to the GPU machine (the device tool sends the
# lead's checkout; a helper's build travels in an ignored folder of it) that
# holds: this script, build.tar.xz (scripts/device/pack.sh), debs/ (the
# Debian runtime libraries, scripts/device/README.md), node.tar.xz (the ONNX
# node tests test_if*, test_loop*, test_scan*), conditional_if.py
# (bench/conditional_if.py; optional) and tolerances.txt (tests/conformance). Steps:
#  - kiln_cuda_conditional_gpu_tests: the probe (an NVRTC kernel calling
#    kiln's own cudaGraphSetConditional declaration; IF with else body and
#    WHILE nodes) and programs with a kiln.cuda.If node or a kiln.cuda.Loop
#    (ONNX Loop / Scan as a WHILE node) against ref;
#  - kiln_cuda_fallback_gpu_tests (the data If now runs as a conditional node);
#  - the node tests on cuda with --no-value-specialization, and with
#    --fallback error (value specialization on, as the ctest ratchet runs);
#  - conditional_if.py: a conditional node against host fallback of the same If.
# Results under $OUT (logs.tgz, conformance_*.md, conditional_if.*).
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
K=$B/tools/kiln/kiln
ldd $K | grep -i "not found"

stamp "conditional GPU tests (probe + programs)"
timeout 90 $B/tests/cuda/kiln_cuda_conditional_gpu_tests > "$L/conditional_gpu_tests.log" 2>&1
echo "rc=$?" >> "$L/conditional_gpu_tests.log"
grep -E "^\[  (PASSED|FAILED|  OK) |^\[  FAILED|Failure|error|conditional nodes:|rc=" "$L/conditional_gpu_tests.log" | head -30

stamp "fallback GPU tests"
timeout 90 $B/tests/cuda/kiln_cuda_fallback_gpu_tests > "$L/fallback_gpu_tests.log" 2>&1
echo "rc=$?" >> "$L/fallback_gpu_tests.log"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rc=" "$L/fallback_gpu_tests.log" | head -20

mkdir -p /tmp/onnxdata && tar -xJf "$D/node.tar.xz" -C /tmp/onnxdata
for f in test_if test_loop test_scan; do
  stamp "node tests $f* on cuda, value specialization off"
  timeout 120 $B/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --target cuda --jobs 8 --filter $f \
    --no-value-specialization --timeout 60 --markdown "$OUT/conformance_$f.md" --tolerances "$D/tolerances.txt" \
    > "$L/conformance_$f.log" 2>&1
  echo "rc=$?" >> "$L/conformance_$f.log"
  grep -E "^\| test_|total|rc=" "$OUT/conformance_$f.md" "$L/conformance_$f.log" | head -12
done

for f in test_if test_loop test_scan; do
  stamp "node tests $f* on cuda, --fallback error (value specialization on, as in ctest)"
  timeout 120 $B/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --target cuda --jobs 8 --filter $f \
    --fallback error --timeout 60 --markdown "$OUT/conformance_${f}_fallback_error.md" --tolerances "$D/tolerances.txt" \
    > "$L/conformance_${f}_fallback_error.log" 2>&1
  echo "rc=$?" >> "$L/conformance_${f}_fallback_error.log"
  grep -E "^\| test_|^\| [0-9]|rc=" "$OUT/conformance_${f}_fallback_error.md" "$L/conformance_${f}_fallback_error.log" | head -8
done

[ -f "$D/conditional_if.py" ] || { stamp "done (no conditional_if.py: latency step left out)"; cd "$OUT" && tar czf logs.tgz logs && rm -rf logs; exit 0; }
stamp "conditional node vs host fallback latency"
timeout 150 python3 "$D/conditional_if.py" --kiln $K --out "$OUT" --runs 300 > "$L/conditional_if.log" 2>&1
echo "rc=$?" >> "$L/conditional_if.log"
tail -15 "$L/conditional_if.log"
stamp "done"
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs

#!/usr/bin/env bash
# Runs kiln's GPU checks on a machine with an NVIDIA GPU and prints the results:
#   1. the CTest label `cuda` (tests/cuda: the cuda target against the ref target);
#   2. the ONNX node conformance suite on target cuda (pass counts per operator);
#   3. a latency comparison cuda vs cpu on the models in $KILN_GPU_MODELS
#      (space-separated .onnx paths with "path:input=shape" entries), if set.
# Usage: scripts/gpu_check.sh [BUILD_DIR]   (default: build; it must have been
# configured with the CUDA toolkit found, i.e. KILN_WITH_CUDA=ON).
# Environment: KILN_ONNX_NODE_DATA (the ONNX node tests; default: the onnx
# Python package's), KILN_GPU_LOG_DIR (where logs go; default BUILD_DIR/gpu_check),
# KILN_CONFORMANCE_JOBS (default: the core count).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
logs=${KILN_GPU_LOG_DIR:-$build/gpu_check}
mkdir -p "$logs"
status=0

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
if ! grep -q "KILN_WITH_CUDA:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIPPED: $build was not configured with CUDA (KILN_WITH_CUDA is not ON)"
  exit 77
fi

echo "== ctest -L cuda"
ctest --test-dir "$build" -L cuda -E conformance --output-on-failure 2>&1 | tee "$logs/ctest_cuda.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== conformance (target cuda)"
data=${KILN_ONNX_NODE_DATA:-}
if [ -z "$data" ]; then
  for py in "$PWD/.venv/bin/python" python3; do
    d=$("$py" -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/node"))' 2>/dev/null) && [ -d "$d" ] && { data=$d; break; }
  done
fi
if [ -z "$data" ]; then
  echo "SKIPPED: no ONNX node test data (set KILN_ONNX_NODE_DATA)"
else
  # Ratchet against tests/conformance/baseline_cuda.txt (a test that passed
  # there and fails now is a REGRESSION); KILN_CONFORMANCE_UPDATE=1 rewrites it.
  "$build/tests/conformance/kiln_conformance" --data "$data" --target cuda --jobs "${KILN_CONFORMANCE_JOBS:-$(nproc)}" \
    --tolerances tests/conformance/tolerances.txt --markdown "$logs/conformance_cuda.md" \
    --baseline tests/conformance/baseline_cuda.txt ${KILN_CONFORMANCE_UPDATE:+--update-baseline} > "$logs/conformance_cuda.log" 2>&1
  rc=$?
  grep -E "^conformance cuda|^REGRESSION|baseline updated" "$logs/conformance_cuda.log" || tail -5 "$logs/conformance_cuda.log"
  [ $rc = 0 ] || [ $rc = 77 ] || status=1
fi

if [ -n "${KILN_GPU_MODELS:-}" ]; then
  echo "== latency: cuda vs cpu (kiln perf)"
  for entry in $KILN_GPU_MODELS; do
    model=${entry%%:*}
    shape=${entry#*:}
    [ "$shape" = "$entry" ] && shape=""
    for t in cuda cpu; do
      echo "-- $model on $t"
      "$build/tools/kiln/kiln" perf "$model" --target "$t" ${shape:+--shape "$shape"} 2>&1 | tee -a "$logs/perf.log" | tail -n 12
    done
  done
fi

echo "== logs in $logs"
exit $status

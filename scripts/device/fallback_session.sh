#!/bin/bash
# Host fallback on the GPU (issue 17, build item 2), after remote.sh with .gpu
# carried (scripts/device/README.md):
#   scripts/device/remote.sh scripts/device/fallback_session.sh
# KILN_FB_SECTIONS picks steps (default "tests timing models conformance"):
#  - tests: kiln_cuda_fallback_gpu_tests (host segments against ref) and the
#    cuda GPU tests (the run side changed for every program);
#  - timing: bench/fallback_timing.py (one host node in the middle);
#  - models: tests/models/check_model.py on cuda for .gpu/models/*.onnx (the
#    dev models carried), and silero_vad with value specialization off (its
#    If on the sample rate then runs in a host segment) against ORT;
#  - conformance: the ONNX node tests on cuda with fallback (default) and with
#    --fallback error (needs .gpu/node.tar.xz).
# Results under $OUT (logs/, conformance_*.md, fallback_timing.*).
set -u
B=${KILN_BUILD:-build-cuda}
K=$PWD/$B/tools/kiln/kiln
L=$OUT/logs
mkdir -p "$L"
SECTIONS=" ${KILN_FB_SECTIONS:-tests timing models conformance} "
want() { [[ "$SECTIONS" == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

if want tests; then
  stamp "fallback GPU tests"
  timeout 120 "$B/tests/cuda/kiln_cuda_fallback_gpu_tests" > "$L/fallback_gpu_tests.log" 2>&1
  echo "rc=$?" >> "$L/fallback_gpu_tests.log"
  grep -E "^\[  (PASSED|FAILED) |Failure|rc=|error" "$L/fallback_gpu_tests.log" | head -30
  stamp "cuda GPU tests"
  timeout 150 "$B/tests/cuda/kiln_cuda_gpu_tests" > "$L/gpu_tests.log" 2>&1
  echo "rc=$?" >> "$L/gpu_tests.log"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|rc=" "$L/gpu_tests.log" | head -20
fi

if want timing; then
  stamp "one host node in the middle"
  timeout 150 python3 bench/fallback_timing.py --kiln "$K" --out "$OUT" --runs 500 > "$L/timing.log" 2>&1
  echo "rc=$?" >> "$L/timing.log"
  cat "$L/timing.log"
  rm -f "$OUT"/fb_*.onnx
fi

if want models; then
  for m in .gpu/models/*.onnx; do
    [ -e "$m" ] || continue
    n=$(basename "$m" .onnx)
    stamp "model $n on cuda against ORT"
    timeout 120 python3 tests/models/check_model.py --model "$n" --kiln "$K" --models-dir .gpu/models --target cuda \
      > "$L/model_$n.log" 2>&1
    echo "rc=$?" >> "$L/model_$n.log"
    tail -3 "$L/model_$n.log"
  done
  if [ -e .gpu/models/silero_vad.onnx ]; then
    stamp "silero_vad, value specialization off (If in a host segment), and its cpu latency"
    timeout 120 python3 bench/fallback_silero.py --kiln "$K" --model .gpu/models/silero_vad.onnx > "$L/silero.log" 2>&1
    echo "rc=$?" >> "$L/silero.log"
    cat "$L/silero.log"
  fi
fi

if want conformance && [ -e .gpu/node.tar.xz ]; then
  mkdir -p /tmp/onnxdata && tar -xJf .gpu/node.tar.xz -C /tmp/onnxdata
  for fb in host error; do
    stamp "conformance on cuda, --fallback $fb"
    timeout "${KILN_FB_CONFORMANCE_S:-240}" "$B/tests/conformance/kiln_conformance" --data /tmp/onnxdata/node \
      --target cuda --jobs 14 --fallback $fb --timeout 60 --markdown "$OUT/conformance_cuda_$fb.md" \
      --tolerances tests/conformance/tolerances.txt --baseline "$OUT/passing_cuda_$fb.txt" --update-baseline \
      > "$L/conformance_$fb.log" 2>&1
    echo "rc=$?" >> "$L/conformance_$fb.log"
    grep -E "total|pass rate|\| [0-9]" "$OUT/conformance_cuda_$fb.md" | head -4
    tail -3 "$L/conformance_$fb.log"
  done
fi
stamp "done"
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs

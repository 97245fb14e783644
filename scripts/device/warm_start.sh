#!/bin/bash
# Warm start of the cuda target (issue #20, build item 4), through
# scripts/device/remote.sh with .gpu carried: the machine (uname -r, GPU),
# the GPU tests of the switch under test (WARM_TESTS_FILTER, a gtest filter
# of kiln_cuda_gpu_tests; WARM_TESTS_FILTER='*' runs them all), then
# bench/warm_start.py on ResNet-50 fp16 (exported here): WARM_REPS fresh
# `kiln run` processes per variant on the cached artifact, interleaved, spawn
# to first result and the load's phases from kiln's debug log, then one
# `kiln perf` (WARM_PERF_RUNS timed runs at batch 1) per program, so that the
# steady-state cost of each variant is in the same report.
# Variants (round 2, 2026-12-02):
#   new        kiln's defaults (1x1 convolutions and the classifier on cuBLASLt)
#   cudnn      KILN_CUDA_POINTWISE=cudnn: no cuBLASLt node, so no cuBLASLt start at load (its own artifact)
#   cudnn_pre  the same artifact, and KILN_CUDA_PRELOAD_CUDNN=1: cuDNN's libraries opened beside the context
# WARM_VARIANTS adds more ("name=ENV=V,ENV=V ..."; e.g. old=KILN_CUDA_PRELOAD_BLASLT=early). The floor
# probe: Python processes that only create the CUDA context, then run cuBLASLt's first matmul.
# About 2.5-3.5 min: WARM_REPS=10 x 3 variants (~25 s), two compiles, two perf runs (each compiles again).
# Results: $OUT/warm_start.tgz (logs/warm_start.md, .json, .log, gpu_tests.log, machine.txt, one full debug
# log per variant).
set -u
K=$PWD/build-cuda/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs; M=/tmp/models; mkdir -p "$L" "$M"
{ uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader; nproc; } > "$L/machine.txt"
cat "$L/machine.txt"
[ -f $M/resnet50.onnx ] || python3 bench/make_gpu_models.py "$M" resnet50 > "$L/export.log" 2>&1
python3 -c "
import numpy as np; np.save('/tmp/img.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))"
# WARM_SKIP_TESTS=1: the caller ran the GPU tests already (scripts/device/combo_session.sh).
if [ "${WARM_SKIP_TESTS:-0}" != 1 ]; then
  timeout ${WARM_TESTS_S:-150} build-cuda/tests/cuda/kiln_cuda_gpu_tests --gtest_filter="${WARM_TESTS_FILTER:-CudaPointwiseGpu.*:CudaPatchConvGpu.*}" > "$L/gpu_tests.log" 2>&1
  echo "kiln_cuda_gpu_tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu_tests.log" | tr '\n' ' ')"
fi
BLASLT=$(echo "$LD_LIBRARY_PATH" | tr ':' '\n' | while read -r d; do [ -n "$d" ] && [ -e "$d/libcublasLt.so.13" ] && echo "$d/libcublasLt.so.13"; done | head -1)
export XDG_CACHE_HOME=/tmp/kc_warm
CUDNN=KILN_CUDA_POINTWISE=cudnn
timeout ${WARM_BENCH_S:-420} python3 bench/warm_start.py --kiln "$K" --model $M/resnet50.onnx --input input=/tmp/img.npy --precision fp16 \
  --reps "${WARM_REPS:-10}" --floor "${WARM_FLOOR:-5}" --floor-blaslt "${BLASLT:-libcublasLt.so.13}" --cache /tmp/kc_warm \
  --variant new= --variant cudnn=$CUDNN --variant cudnn_pre=$CUDNN,KILN_CUDA_PRELOAD_CUDNN=1 \
  --own-cache cudnn --own-cache cudnn_pre:cudnn \
  $(for v in ${WARM_VARIANTS:-}; do echo --variant "$v"; done) \
  --perf "${WARM_PERF_RUNS:-200}" --perf-only new --perf-only cudnn \
  --out "$L/warm_start.md" --json "$L/warm_start.json" > "$L/warm_start.log" 2>&1
echo "warm_start.py rc $?"
# One full debug log of each load (the caches warm_start.py left: shared = defaults, cudnn = the cudnn artifact).
for spec in new:shared: cudnn:cudnn:$CUDNN cudnn_pre:cudnn:$CUDNN,KILN_CUDA_PRELOAD_CUDNN=1; do
  IFS=: read -r name cache envs <<< "$spec"
  env $(echo "$envs" | tr ',' ' ') XDG_CACHE_HOME=/tmp/kc_warm/$cache KILN_LOG=debug "$K" run $M/resnet50.onnx --target cuda \
    --precision fp16 --input input=/tmp/img.npy --output-dir /tmp/warm_out_$name --json > "$L/run_$name.json" 2> "$L/debug_$name.log"
  echo "$name: $(grep -o 'cache": "[a-z]*' "$L/run_$name.json") $(grep -o 'cuBLASLt: [^;]*' "$L/debug_$name.log")"
done
# The logits of the two programs against each other (same model, other kernels: fp16 rounding apart).
python3 - <<'PY' 2>&1 | tee "$L/logits.txt" || true
import glob, os, numpy as np
a, b = (sorted(glob.glob(f"/tmp/warm_out_{n}/*.npy")) for n in ("new", "cudnn"))
for fa, fb in zip(a, b):
    x, y = np.load(fa).astype(np.float64), np.load(fb).astype(np.float64)
    print(f"{os.path.basename(fa)}: max |new - cudnn| {np.abs(x - y).max():.4g} (max |new| {np.abs(x).max():.4g}), "
          f"top-1 equal {bool((x.reshape(x.shape[0], -1).argmax(1) == y.reshape(y.shape[0], -1).argmax(1)).all())}")
PY
cat "$L/warm_start.md"
cd "$OUT" && tar czf warm_start.tgz logs && rm -rf logs

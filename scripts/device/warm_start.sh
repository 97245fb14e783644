#!/bin/bash
# Warm start of the cuda target (issue #20, build item 4), through
# scripts/device/remote.sh with .gpu carried: the machine (uname -r, GPU),
# the cuda GPU tests, then bench/warm_start.py on ResNet-50 fp16 (exported
# here): WARM_REPS fresh `kiln run` processes per variant on the cached
# artifact, interleaved, spawn to first result and the load's phases from
# kiln's debug log; `old` opens cuBLASLt during cuInit as kiln did before
# (KILN_CUDA_PRELOAD_BLASLT=early); WARM_VARIANTS adds more (e.g.
# "x=KILN_CUDA_WARM_CONVS=0"). The floor probe: Python processes that only
# create the CUDA context, then run cuBLASLt's first matmul. Results:
# $OUT/warm_start.tgz (logs/warm_start.md, .json, .log, gpu_tests.log,
# machine.txt, one full debug log per variant).
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
  timeout ${WARM_TESTS_S:-150} build-cuda/tests/cuda/kiln_cuda_gpu_tests > "$L/gpu_tests.log" 2>&1
  echo "kiln_cuda_gpu_tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu_tests.log" | tr '\n' ' ')"
fi
BLASLT=$(echo "$LD_LIBRARY_PATH" | tr ':' '\n' | while read -r d; do [ -n "$d" ] && [ -e "$d/libcublasLt.so.13" ] && echo "$d/libcublasLt.so.13"; done | head -1)
export XDG_CACHE_HOME=/tmp/kc_warm
python3 bench/warm_start.py --kiln "$K" --model $M/resnet50.onnx --input input=/tmp/img.npy --precision fp16 \
  --reps "${WARM_REPS:-10}" --floor "${WARM_REPS:-10}" --floor-blaslt "${BLASLT:-libcublasLt.so.13}" --cache /tmp/kc_warm \
  --variant new= --variant old=KILN_CUDA_PRELOAD_BLASLT=early $(for v in ${WARM_VARIANTS:-}; do echo --variant "$v"; done) \
  --out "$L/warm_start.md" --json "$L/warm_start.json" > "$L/warm_start.log" 2>&1
echo "warm_start.py rc $?"
# One full debug log of each of the two loads.
for name in new old; do
  E=""; [ "$name" = old ] && E="KILN_CUDA_PRELOAD_BLASLT=early"
  env $E KILN_LOG=debug "$K" run $M/resnet50.onnx --target cuda --precision fp16 --input input=/tmp/img.npy \
    --json > "$L/run_$name.json" 2> "$L/debug_$name.log"
done
cat "$L/warm_start.md"
cd "$OUT" && tar czf warm_start.tgz logs && rm -rf logs

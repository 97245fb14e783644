#!/bin/bash
# Session 17's last call: the GPU test programs on the final build (main after the kiln_version and cpu
# merges), then the dev set's device I/O once more without profiling. After remote.sh with .gpu carried
# (build.tar.xz, debs); timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/round17c.sh
set -u
T0=$(date +%s)
L=$OUT/round17c_logs; mkdir -p "$L"
for t in kiln_cuda_kernels_gpu_tests kiln_cuda_gpu_tests kiln_cuda_conditional_gpu_tests kiln_cuda_fallback_gpu_tests kiln_cuda_recurrent_gpu_tests; do
  timeout 150 build-cuda/tests/cuda/$t > "$L/$t.log" 2>&1
  echo "$t rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/$t.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED" "$L/$t.log" | head -5
done
build-cuda/tools/kiln/kiln --version
P=/tmp/r17models; mkdir -p $P
( env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P resnet50 bert_base
  env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P --batch 32 resnet50 bert_base ) > "$L/export.log" 2>&1
for f in resnet50 bert_base resnet50_b32 bert_base_b32; do
  left=$(( 420 - ($(date +%s) - T0) )); [ "$left" -gt 25 ] || { echo "$f: not run (time)"; continue; }
  timeout "$left" build-cuda/tools/kiln/kiln perf "$P/$f.onnx" --target cuda --precision fp16 --runs 1000 > "$L/devset_$f.txt" 2>&1
  echo "$f rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O' "$L/devset_$f.txt" | tr -s ' ' | cut -c1-45)"
done
tar -czf "$OUT/round17c_logs.tar.gz" -C "$L" .

#!/bin/bash
# Session 17's second call (issue #20, the dev set's second round): tuning timed on CUDA graphs of 16
# launches instead of single launches between events. After remote.sh with .gpu carried (build.tar.xz,
# debs); timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/round17b.sh
# 1. kiln_cuda_kernels_gpu_tests, kiln_cuda_gpu_tests, kiln_cuda_conditional_gpu_tests.
# 2. The dev set with device I/O, profiled, A/B in this call: defaults (graph timing, split-K forms) against
#    KILN_CUDA_TUNE_GRAPH=0 (last session's timing), interleaved; batch 1 also with KILN_CUDA_GEMM_SPLIT_K=0;
#    ResNet-50 b1 with --tuning exhaustive.
# Output: $OUT/round17b_logs.tar.gz.
set -u
T0=$(date +%s)
L=$OUT/round17b_logs; mkdir -p "$L"
( uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader ) > "$L/machine.txt"
for t in kiln_cuda_kernels_gpu_tests kiln_cuda_gpu_tests kiln_cuda_conditional_gpu_tests; do
  timeout 150 build-cuda/tests/cuda/$t > "$L/$t.log" 2>&1
  echo "$t rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/$t.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED|split-K|heuristic algorithms" "$L/$t.log" | head -12
done
P=/tmp/r17models; mkdir -p $P
( env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P resnet50 bert_base
  env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P --batch 32 resnet50 bert_base ) > "$L/export.log" 2>&1
echo "exports at $(( $(date +%s) - T0 )) s"
perf() {  # perf NAME MODEL [env...]
  local name=$1 f=$2; shift 2
  local left=$(( ${R17B_END_S:-570} - ($(date +%s) - T0) )); [ "$left" -gt 25 ] || { echo "$name: not run (time)"; return; }
  env "$@" KILN_LOG=debug timeout "$left" build-cuda/tools/kiln/kiln perf "$P/$f.onnx" --target cuda --precision fp16 \
    --runs 300 --profile ${R17B_TUNING:-} > "$L/$name.txt" 2> "$L/$name.log"
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O' "$L/$name.txt" | tr -s ' ' | cut -c1-40) compile $(grep -E '^ *compile' "$L/$name.txt" | tr -s ' ' | cut -d' ' -f3-4)"
}
for f in resnet50 bert_base; do
  perf "${f}_graph" $f
  perf "${f}_events" $f KILN_CUDA_TUNE_GRAPH=0
  perf "${f}_graph_nosplitk" $f KILN_CUDA_GEMM_SPLIT_K=0
done
for f in resnet50_b32 bert_base_b32; do
  perf "${f}_graph" $f
  perf "${f}_events" $f KILN_CUDA_TUNE_GRAPH=0
done
perf resnet50_events2 resnet50 KILN_CUDA_TUNE_GRAPH=0
perf resnet50_graph2 resnet50
perf bert_base_graph2 bert_base
R17B_TUNING="--tuning exhaustive" perf resnet50_graph_exhaustive resnet50
for n in resnet50_graph bert_base_graph; do grep -hE "split-K forms|best #" "$L/$n.log" > "$L/${n}_choices.txt"; done
tar -czf "$OUT/round17b_logs.tar.gz" -C "$L" .
echo "round17b done at $(( $(date +%s) - T0 )) s"

#!/bin/bash
# Session 17's first call (issue #20, the dev set's second profile-and-fix round), after remote.sh with
# .gpu carried (build.tar.xz, debs); timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/round17a.sh
# 1. kiln_cuda_kernels_gpu_tests (the split-K forms against a float64 host product, and whole matmuls with
#    and without them against ref) and kiln_cuda_gpu_tests (the attention kernel's ldmatrix fragments).
# 2. The dev set with device I/O, profiled, A/B in this call: defaults (split-K forms timed, ldmatrix),
#    KILN_CUDA_GEMM_SPLIT_K=0, and for BERT KILN_CUDA_ATTN_LDMATRIX=0.
# 3. ResNet-50 b1 with --tuning exhaustive (does cuDNN have faster engines for the small-spatial 3x3
#    convolutions than fast tuning finds?), with the tuning log.
# Output: $OUT/round17a_logs.tar.gz.
set -u
T0=$(date +%s)
L=$OUT/round17a_logs; mkdir -p "$L"
( uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader ) > "$L/machine.txt"
for t in kiln_cuda_kernels_gpu_tests kiln_cuda_gpu_tests; do
  timeout 150 build-cuda/tests/cuda/$t > "$L/$t.log" 2>&1
  echo "$t rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/$t.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED|split-K|heuristic algorithms" "$L/$t.log" | head -20
done
P=/tmp/r17models; mkdir -p $P
( env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P resnet50 bert_base
  env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P --batch 32 resnet50 bert_base ) > "$L/export.log" 2>&1
echo "exports at $(( $(date +%s) - T0 )) s"
perf() {  # perf NAME MODEL [env...]
  local name=$1 f=$2; shift 2
  local left=$(( ${R17A_END_S:-560} - ($(date +%s) - T0) )); [ "$left" -gt 25 ] || { echo "$name: not run (time)"; return; }
  env "$@" KILN_LOG=debug timeout "$left" build-cuda/tools/kiln/kiln perf "$P/$f.onnx" --target cuda --precision fp16 \
    --runs 300 --profile ${R17A_TUNING:-} > "$L/$name.txt" 2> "$L/$name.log"
  echo "$name rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O' "$L/$name.txt" | tr -s ' ')"
}
for f in resnet50 bert_base; do
  perf "${f}_splitk" $f
  perf "${f}_nosplitk" $f KILN_CUDA_GEMM_SPLIT_K=0
done
perf bert_base_noldm bert_base KILN_CUDA_ATTN_LDMATRIX=0
for f in bert_base_b32 resnet50_b32; do
  perf "${f}_default" $f
  [ $f = bert_base_b32 ] && perf "${f}_noldm" $f KILN_CUDA_ATTN_LDMATRIX=0
done
perf resnet50_nosplitk2 resnet50 KILN_CUDA_GEMM_SPLIT_K=0
perf resnet50_splitk2 resnet50
R17A_TUNING="--tuning exhaustive" perf resnet50_exhaustive resnet50
grep -hE "split-K forms|best #" "$L"/resnet50_splitk.log | head -60 > "$L/resnet50_splitk_choices.txt"
grep -hE "split-K forms|best #" "$L"/bert_base_splitk.log | head -60 > "$L/bert_base_splitk_choices.txt"
tar -czf "$OUT/round17a_logs.tar.gz" -C "$L" .
echo "round17a done at $(( $(date +%s) - T0 )) s"

#!/bin/bash
# Session 15's verification call (issue #20's second fix round, issue #17's checked control flow), after
# remote.sh (build-cuda unpacked from .gpu/build.tar.xz) with .gpu/gpuzoo (the cp312 wheel of the same
# commit + debs) carried; timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/final_check15.sh
# 1. The GPU zoo rows the round touched (reduce-overhead, kiln and torch in this call; FINAL15_ZOO
#    overrides the models): GPT-2 (padded-n LM head), Llama (RMS normalization), ViT-B/16, Swin-T,
#    ConvNeXt-Tiny (patch convolutions), EfficientNet-B0.
# 2. The GPU test programs (the new CudaPatchConvGpu, CudaRmsNormGpu, CudaGemmPadGpu and the
#    control-flow precision tests among them).
# 3. The padded-n A/B on GPT-2's LM head alone (scripts/device/gemm_pad_ab.sh).
# Output: $OUT/gpu_zoo.{md,tar.gz,log} and $OUT/final15_logs.tar.gz.
set -u
T0=$(date +%s)
L=$OUT/final15_logs; mkdir -p "$L"
( uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader ) > "$L/machine.txt"
# The wheel's environment in its own process (kilnpy_env.sh puts torch's CUDA libraries first).
GPU_ZOO_BUDGET_S=${FINAL15_ZOO_S:-260} KILN_PY_GPU_DIR=.gpu/gpuzoo bash scripts/device/gpu_zoo.sh \
  --models ${FINAL15_ZOO:-gpt2_prefill llama_prefill vit_b_16 swin_t convnext_tiny efficientnet_b0} > "$L/gpu_zoo_call.log" 2>&1
echo "gpu zoo done at $(( $(date +%s) - T0 )) s"; grep -E "^\| |geometric" "$OUT/gpu_zoo.md" 2>/dev/null | head -20
for t in kiln_cuda_gpu_tests kiln_cuda_kernels_gpu_tests kiln_cuda_conditional_gpu_tests kiln_cuda_fallback_gpu_tests; do
  left=$(( ${FINAL15_TESTS_END_S:-500} - ($(date +%s) - T0) )); [ "$left" -gt 15 ] || { echo "$t: not run (time)"; continue; }
  timeout "$left" build-cuda/tests/cuda/$t > "$L/$t.log" 2>&1; rc=$?
  echo "$t rc $rc: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$L/$t.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED|worst error / tolerance" "$L/$t.log" | head -40
done
left=$(( ${FINAL15_END_S:-570} - ($(date +%s) - T0) ))
if [ "$left" -gt 30 ]; then
  OUT=$L timeout "$left" bash scripts/device/gemm_pad_ab.sh > /dev/null 2>&1
  cat "$L/logs/gemm_pad_ab.log" 2>/dev/null | grep -E "###|device I/O|latency" | head -24
fi
tar -czf "$OUT/final15_logs.tar.gz" -C "$L" .
echo "final_check15 done at $(( $(date +%s) - T0 )) s"

#!/bin/bash
# Session 16's verification call, after remote.sh (build-cuda unpacked from .gpu/build.tar.xz) with .gpu
# carried (build.tar.xz, debs, gpuzoo: the cp312 wheel of the same commit + debs); timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/round16c.sh
# 1. kiln_cuda_gpu_tests and kiln_cuda_kernels_gpu_tests (the MultiheadAttention form, the stem padding's
#    Pad gathers among them).
# 2. Issue #20's dev set with device I/O, profiled: ResNet-50 and BERT-base fp16, batch 1 and 32.
# 3. The GPU zoo rows this session's changes touch (reduce-overhead, kiln and torch in this call;
#    R16C_ZOO overrides): ViT-B/16 and Swin-T (attention operands), CNN stems (ResNeXt, MobileNetV2,
#    EfficientNet-B0, RegNetY).
# Output: $OUT/round16c_logs.tar.gz, $OUT/gpu_zoo.{md,jsonl,tar.gz}.
set -u
T0=$(date +%s)
L=$OUT/round16c_logs; mkdir -p "$L"
( uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader ) > "$L/machine.txt"
for t in kiln_cuda_gpu_tests kiln_cuda_kernels_gpu_tests; do
  timeout 150 build-cuda/tests/cuda/$t > "$L/$t.log" 2>&1
  echo "$t rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/$t.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
  grep -E "^\[  FAILED|packed-mha" "$L/$t.log" | head -20
done
P=/tmp/r16models; mkdir -p $P
( env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P resnet50 bert_base
  env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py $P --batch 32 resnet50 bert_base ) > "$L/export.log" 2>&1
echo "exports at $(( $(date +%s) - T0 )) s"
for f in resnet50 bert_base resnet50_b32 bert_base_b32; do
  left=$(( 260 - ($(date +%s) - T0) )); [ "$left" -gt 20 ] || { echo "$f: not run (time)"; continue; }
  timeout "$left" build-cuda/tools/kiln/kiln perf "$P/$f.onnx" --target cuda --precision fp16 --runs 300 --profile \
    > "$L/devset_$f.txt" 2>&1
  echo "$f rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O' "$L/devset_$f.txt" | tr -s ' ')"
done
left=$(( ${R16C_END_S:-578} - ($(date +%s) - T0) ))
if [ "$left" -gt 60 ]; then
  GPU_ZOO_BUDGET_S=$left KILN_PY_GPU_DIR=.gpu/gpuzoo bash scripts/device/gpu_zoo.sh \
    --models ${R16C_ZOO:-vit_b_16 swin_t resnext50_32x4d mobilenet_v2 efficientnet_b0 regnet_y_400mf} > "$L/gpu_zoo_call.log" 2>&1
  echo "gpu zoo done at $(( $(date +%s) - T0 )) s"; grep -E "^\| |geometric" "$OUT/gpu_zoo.md" 2>/dev/null | head -20
fi
tar -czf "$OUT/round16c_logs.tar.gz" -C "$L" .
echo "round16c done at $(( $(date +%s) - T0 )) s"

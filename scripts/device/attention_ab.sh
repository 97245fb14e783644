#!/bin/bash
# One short device call: the fused attention kernel's variants on BERT-base
# batch 32 fp16 (device I/O latency from kiln perf), for choosing defaults:
# KILN_CUDA_ATTN_MASK_SMEM (mask tile staged in shared memory, default 1)
# and KILN_CUDA_ATTN_MIN_BLOCKS (__launch_bounds__ blocks per SM, default none).
set -u
L=${OUT:-/tmp/out}/logs; mkdir -p "$L" /tmp/p32
K=$PWD/build-cuda/tools/kiln/kiln
[ -f /tmp/p32/bert_base_b32.onnx ] || python3 bench/make_gpu_models.py /tmp/p32 --batch 32 bert_base > /dev/null 2>&1
{
which ncu nsys 2>&1 | head -2
for smem in 1 0; do for mb in 0 4; do
  echo "### KILN_CUDA_ATTN_MASK_SMEM=$smem KILN_CUDA_ATTN_MIN_BLOCKS=$mb"
  KILN_CUDA_ATTN_MASK_SMEM=$smem KILN_CUDA_ATTN_MIN_BLOCKS=$mb timeout 100 "$K" perf /tmp/p32/bert_base_b32.onnx \
    --target cuda --precision fp16 --tuning fast --runs 50 --profile 2>&1 | grep -E "device I/O|Kernel attention"
done; done
} > "$L/attention_ab.log" 2>&1
cat "$L/attention_ab.log"

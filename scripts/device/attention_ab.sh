#!/bin/bash
# One short device call: the fused attention kernel's register cap on
# BERT-base batch 32 fp16 (device I/O latency and the attention kernels'
# profile time from kiln perf), for choosing the default:
# KILN_CUDA_ATTN_MIN_BLOCKS (__launch_bounds__ blocks per SM; 0: no cap;
# default 4). An earlier variant that staged the mask through shared memory
# was slower (bench/results/cuda/attention_ab.log) and was removed.
set -u
L=${OUT:-/tmp/out}/logs; mkdir -p "$L" /tmp/p32
K=$PWD/build-cuda/tools/kiln/kiln
[ -f /tmp/p32/bert_base_b32.onnx ] || python3 bench/make_gpu_models.py /tmp/p32 --batch 32 bert_base > /dev/null 2>&1
{
for mb in 0 3 4; do
  echo "### KILN_CUDA_ATTN_MIN_BLOCKS=$mb"
  KILN_CUDA_ATTN_MIN_BLOCKS=$mb timeout 100 "$K" perf /tmp/p32/bert_base_b32.onnx \
    --target cuda --precision fp16 --tuning fast --runs 50 --profile 2>&1 | grep -E "device I/O|Kernel attention"
done
} > "$L/attention_ab.log" 2>&1
cat "$L/attention_ab.log"

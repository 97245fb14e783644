#!/bin/bash
# One short device call: matmuls whose rows are not 16-byte aligned (issue
# #20), padded (default) against today's lowering (KILN_CUDA_GEMM_PAD_N=0),
# and an aligned n of the same size for reference: GPT-2's LM head at batch
# 32 (x [32,128,768] @ W [768, n]), fp16 and fp32, device I/O latency and the
# profile's Gemm / Kernel lines. Usage (after remote.sh's unpacking, or with
# KILN pointing at a kiln built with CUDA):
#   scripts/device/gemm_pad_ab.sh            -> $OUT/logs/gemm_pad_ab.log
set -u
L=${OUT:-/tmp/out}/logs; mkdir -p "$L" /tmp/lmh
K=${KILN:-$PWD/build-cuda/tools/kiln/kiln}
for n in 50257 50264; do
  [ -f /tmp/lmh/lm_head_n$n.onnx ] || python3 bench/make_padded_matmul.py /tmp/lmh/lm_head_n$n.onnx --n $n > /dev/null
done
{
for p in fp16 fp32; do
  # "": the default (the size rule pads this LM head); 0: today's lowering.
  for m in lm_head_n50257: lm_head_n50257:0 lm_head_n50264:; do
    f=${m%%:*}; pad=${m##*:}
    echo "### $f --precision $p KILN_CUDA_GEMM_PAD_N=${pad:-(default)}"
    KILN_LOG=info KILN_CUDA_GEMM_PAD_N=$pad timeout 150 "$K" perf /tmp/lmh/$f.onnx --target cuda --precision $p --tuning fast \
      --runs 50 --profile 2>&1 | grep -E -i "latency|device|profile|Gemm|Kernel|Slice|Cast|padded" | head -24
  done
done
} > "$L/gemm_pad_ab.log" 2>&1
cat "$L/gemm_pad_ab.log"

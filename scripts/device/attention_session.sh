#!/bin/bash
# One short device call: BERT-base at batch 32, fp16, with and without the
# fused attention kernel (KILN_CUDA_FUSED_ATTENTION=0 turns it off), same
# tuning; kiln perf's latency with host I/O and with device I/O, then the
# fused program's per-node profile. Run through scripts/device/remote.sh.
set -u
L=${OUT:-/tmp/out}/logs; mkdir -p "$L" /tmp/p32
K=$PWD/build-cuda/tools/kiln/kiln
TUNING=${KILN_TUNING:-exhaustive}
[ -f /tmp/p32/bert_base_b32.onnx ] || python3 bench/make_gpu_models.py /tmp/p32 --batch 32 bert_base > /dev/null 2>&1
{
[ -n "${KILN_DUMP_ATTENTION:-}" ] && python3 bench/dump_attention.py /tmp/p32/bert_base_b32.onnx
echo "### why not fused (KILN_LOG=debug)"
KILN_LOG=debug timeout 100 "$K" compile /tmp/p32/bert_base_b32.onnx -o /tmp/dbg.kiln --target cuda --precision fp16 \
  --tuning heuristic 2>&1 | grep -E "not fused|lowering for" | head -5
for fa in 1 0; do
  echo "### bert_base_b32 fp16 --tuning $TUNING, KILN_CUDA_FUSED_ATTENTION=$fa"
  KILN_CUDA_FUSED_ATTENTION=$fa KILN_LOG=info timeout 200 "$K" perf /tmp/p32/bert_base_b32.onnx --target cuda \
    --precision fp16 --tuning "$TUNING" --runs 50 2>&1 | grep -E "lowering for|compile |load|latency|device I/O|throughput|error"
done
echo "### profile, fused"
timeout 150 "$K" perf /tmp/p32/bert_base_b32.onnx --target cuda --precision fp16 --tuning fast --runs 20 --profile 2>&1 \
  | sed -n '/profile (/,+22p'
} > "$L/attention.log" 2>&1
cat "$L/attention.log"

#!/bin/bash
# One short device call: per-node profiles of BERT-base and ResNet-50 at
# batch 32, fp16 (kiln perf --profile), to see where large-batch time goes.
set -u
L=${OUT:-/tmp/out}/logs; mkdir -p "$L" /tmp/p32
K=$PWD/build-cuda/tools/kiln/kiln
python3 bench/make_gpu_models.py /tmp/p32 --batch 32 resnet50 > /dev/null 2>&1 &
python3 bench/make_gpu_models.py /tmp/p32 --batch 32 bert_base > /dev/null 2>&1
wait
for m in resnet50_b32 bert_base_b32; do
  echo "### $m fp16"
  timeout 120 "$K" perf /tmp/p32/$m.onnx --target cuda --precision fp16 --tuning fast --runs 20 --profile 2>&1 | sed -n 1,45p
done > "$L/profile_b32.log" 2>&1
cat "$L/profile_b32.log"

#!/bin/bash
# One short device call: Nsight Compute on one fused attention kernel and one
# LayerNormalization kernel of BERT-base batch 32 fp16 (graph off so that
# ncu sees single launches): throughput, occupancy, warp stall reasons.
set -u
L=${OUT:-/tmp/out}/logs; mkdir -p "$L" /tmp/p32
K=$PWD/build-cuda/tools/kiln/kiln
[ -f /tmp/p32/bert_base_b32.onnx ] || python3 bench/make_gpu_models.py /tmp/p32 --batch 32 bert_base > /dev/null 2>&1
"$K" compile /tmp/p32/bert_base_b32.onnx -o /tmp/b32.kiln --target cuda --precision fp16 --tuning fast > /dev/null 2>&1
python3 -c "
import numpy as np
np.save('/tmp/ids.npy', np.random.default_rng(0).integers(0, 30522, (32, 128), dtype=np.int64))
np.save('/tmp/mask.npy', np.ones((32, 128), np.int64)); np.save('/tmp/types.npy', np.zeros((32, 128), np.int64))"
for k in attention layernorm; do
  KILN_CUDA_GRAPH=0 timeout 150 ncu --kernel-name "regex:${k}" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    "$K" run /tmp/b32.kiln --input input_ids=/tmp/ids.npy --input attention_mask=/tmp/mask.npy \
    --input token_type_ids=/tmp/types.npy 2>&1 | grep -vE "^==PROF==|^  *-+ *$" | head -90
done > "$L/attention_ncu.log" 2>&1
cat "$L/attention_ncu.log"

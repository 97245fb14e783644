#!/bin/bash
# Session 16's second device call (issue #20: the stem padding, the warm start's round 2, what ViT's exporter
# writes around its attention; issue #17: the last chunk of the node tests with --fallback error), after
# remote.sh (build-cuda unpacked from .gpu/build.tar.xz) with .gpu carried (build.tar.xz, debs, gpuzoo,
# node.tar.xz); timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/round16b.sh
# 1. kiln_cuda_gpu_tests, all (the new stem-padding, pointwise-on-cuDNN and attention cases among them).
# 2. scripts/device/stem_pad.sh, one round (ResNet-50 fp16 b1 / b32, KILN_CUDA_STEM_PAD_C 0 / 4 / 8, profiled).
# 3. scripts/device/warm_start.sh (round 2's variants: new, cudnn, cudnn_pre).
# 4. ViT-B/16's first attention as torch 2.11 exports it (bench/dump_window.py).
# 5. The node tests' fourth chunk on cuda with --fallback error (round16a.sh ran the first three).
# Output: $OUT/round16b_logs.tar.gz and the scripts' own files.
set -u
T0=$(date +%s)
L=$OUT/round16b_logs; mkdir -p "$L"
timeout 150 build-cuda/tests/cuda/kiln_cuda_gpu_tests > "$L/kiln_cuda_gpu_tests.log" 2>&1
echo "kiln_cuda_gpu_tests rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/kiln_cuda_gpu_tests.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
grep -E "^\[  FAILED|^\[       OK" "$L/kiln_cuda_gpu_tests.log" | grep -E "FAILED|StemPad|Pointwise" | head -20
STEM_TESTS=0 STEM_ROUNDS=1 STEM_BUDGET_S=${R16B_STEM_S:-150} bash scripts/device/stem_pad.sh > "$L/stem_pad.log" 2>&1
echo "stem_pad done at $(( $(date +%s) - T0 )) s"; cat "$OUT/stem_pad/summary.txt" 2>/dev/null | head -30
WARM_SKIP_TESTS=1 WARM_BENCH_S=${R16B_WARM_S:-200} bash scripts/device/warm_start.sh > "$L/warm_start.log" 2>&1
echo "warm_start done at $(( $(date +%s) - T0 )) s"; tail -45 "$L/warm_start.log"
(  # torch's own CUDA libraries, not the ones remote.sh put first for kiln
  cd bench && timeout 90 env -u LD_LIBRARY_PATH python3 -c "
import sys; from pathlib import Path; import gpu_zoo
gpu_zoo.export('vit_b_16', Path('/tmp/vit_b_16.onnx'))" > "$L/vit_export.log" 2>&1
  timeout 60 env -u LD_LIBRARY_PATH python3 dump_window.py /tmp/vit_b_16.onnx Softmax 40 10 > "$L/vit_window.txt" 2>&1
) ; echo "vit dump done at $(( $(date +%s) - T0 )) s"; cut -c1-400 "$L/vit_window.txt" | head -60
left=$(( ${R16B_END_S:-575} - ($(date +%s) - T0) ))
if [ "$left" -gt 40 ]; then
  OUT=$L/conf KILN_ZOO_CONFORMANCE=1 KILN_ZOO_CONF_STEPS="c03:error" KILN_ZOO_CONF_JOBS=8 KILN_ZOO_BUDGET_S=$left \
    bash scripts/device/zoo_cuda_parallel.sh --none > "$L/conf_call.log" 2>&1
  echo "conformance c03 done at $(( $(date +%s) - T0 )) s"; grep -h "conformance cuda" "$L"/conf/logs/*.log
fi
tar -czf "$OUT/round16b_logs.tar.gz" -C "$L" .
echo "round16b done at $(( $(date +%s) - T0 )) s"

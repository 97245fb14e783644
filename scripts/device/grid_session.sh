#!/bin/bash
# Launch-configuration tuning of the generated kernels (tune_kernel_grids) on
# a GPU machine, through scripts/device/remote.sh: the GPU tests, then
# ResNet-50 and BERT-base at batch 32 in fp16 with --tuning fast, with grid
# tuning (default) and with KILN_CUDA_TUNE_GRIDS=0, in the same call:
# kiln perf's latency with device I/O and the compile log's tuning line.
set -u
K=$PWD/build-cuda/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs; M=/tmp/g32; mkdir -p "$L" "$M"
timeout 100 build-cuda/tests/cuda/kiln_cuda_gpu_tests 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure" | head
python3 bench/make_gpu_models.py $M --batch 32 resnet50 bert_base > /dev/null 2>&1
{
for m in resnet50_b32 bert_base_b32; do
  for g in 1 0; do
    echo "### $m fp16 fast KILN_CUDA_TUNE_GRIDS=$g"
    KILN_CUDA_TUNE_GRIDS=$g KILN_LOG=info timeout 150 "$K" perf $M/$m.onnx --target cuda --precision fp16 --runs 100 --json \
      2> /tmp/grid_err.txt | python3 -c '
import sys, json; j = json.load(sys.stdin); print("  compile_ms", round(j["compile_ms"]), "latency_ms_median", round(j["latency_ms_median"], 4), "device_io_ms_median", round(j.get("latency_device_io_ms_median", 0), 4))'
    grep -E "grid-stride|lowering for" /tmp/grid_err.txt | sed "s/^/  /" | cut -c1-260
  done
done
} > "$L/grid.log" 2>&1
cat "$L/grid.log"

#!/bin/bash
# cuDNN graph-API convolutions on a GPU machine (run through
# scripts/device/remote.sh; see scripts/device/README.md):
#   1. the graph-convolution tests (CudaConvGraph.* in kiln_cuda_kernels_gpu_tests),
#      which print each engine chosen per problem and epilogue;
#   2. ResNet-50 (bench/make_gpu_models.py) in fp16 and fp32: compile, load and
#      latency with the graph API (default) and with KILN_CUDA_CONV_GRAPH=0
#      (legacy API, epilogues as separate kernels), outputs against the cpu target,
#      and the per-plan cuDNN finalize times at load (KILN_LOG=debug).
# Logs: $OUT/logs/conv_graph_*.log.
set -u
B=${KILN_BUILD:-build-cuda}
K=$PWD/$B/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs
M=/tmp/models
mkdir -p "$L" "$M"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
[ -f $M/resnet50.onnx ] || python3 bench/make_gpu_models.py "$M" resnet50 > "$L/conv_graph_export.log" 2>&1 &
exp=$!
stamp "graph convolution tests"
timeout 200 "$B/tests/cuda/kiln_cuda_kernels_gpu_tests" --gtest_filter='CudaConvGraph.*' > "$L/conv_graph_tests.log" 2>&1
echo "rc=$?" >> "$L/conv_graph_tests.log"
grep -E "^\[  (PASSED|FAILED) |Failure|rc=|with an engine|runtime-compiled|no runtime" "$L/conv_graph_tests.log" | head -30
wait $exp
python3 -c "
import numpy as np; np.save('/tmp/img.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))"
timeout 100 "$K" run $M/resnet50.onnx --target cpu --no-cache --input input=/tmp/img.npy --output-dir /tmp/cg_cpu > /dev/null
for p in fp16 fp32; do
  case $p in fp32) PF="";; *) PF="--precision $p";; esac
  for api in graph legacy; do
    [ $api = legacy ] && export KILN_CUDA_CONV_GRAPH=0 || unset KILN_CUDA_CONV_GRAPH
    stamp "ResNet-50 $p $api"
    KILN_LOG=debug timeout 150 "$K" perf $M/resnet50.onnx --target cuda $PF --runs 200 --keep /tmp/cg_${p}_$api.kiln \
      --input input=/tmp/img.npy --json > "$L/conv_graph_${p}_$api.json" 2> "$L/conv_graph_${p}_$api.log"
    python3 -c "
import json,sys; j=json.load(open('$L/conv_graph_${p}_$api.json')); print('  compile_ms', round(j['compile_ms']), 'load_ms', round(j['load_ms'],1), 'latency_ms_median', round(j['latency_ms_median'],4))" 2>&1 | tail -1
    grep -E "cuda lowering|cuDNN plan|plans:" "$L/conv_graph_${p}_$api.log" | sed 's/^/  /' | cut -c1-400
    timeout 60 "$K" run /tmp/cg_${p}_$api.kiln --input input=/tmp/img.npy --output-dir /tmp/cg_${p}_$api > /dev/null 2>&1
    python3 -c "
import numpy as np; a=np.load('/tmp/cg_cpu/logits.npy'); b=np.load('/tmp/cg_${p}_$api/logits.npy').astype(np.float32); print('  max|cuda-cpu|', float(abs(a-b).max()), 'max|cpu|', float(abs(a).max()))" 2>&1 | tail -1
  done
done
unset KILN_CUDA_CONV_GRAPH
grep -E "chosen:|build .* ms, run" "$L/conv_graph_fp16_graph.log" | head -40 > "$L/conv_graph_choices.log"
echo "fp16 engine choices (first lines):"; head -12 "$L/conv_graph_choices.log" | cut -c1-250
stamp "done"

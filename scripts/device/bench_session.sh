#!/bin/bash
# One device call: a short probe of where a cuda load's time goes (ResNet-50,
# KILN_LOG=debug, with and without the cuDNN workspace query), then the GPU
# benchmark against PyTorch (scripts/device/bench_gpu.sh, its arguments).
# Run through scripts/device/remote.sh, like gpu_session.sh.
set -u
export BENCH_T0=${BENCH_T0:-$(date +%s)}
L=${OUT:-/tmp/out}/logs
mkdir -p "$L" /tmp/probe
K=$PWD/build-cuda/tools/kiln/kiln
{
python3 bench/make_gpu_models.py /tmp/probe resnet50 > /dev/null 2>&1
python3 -c "import numpy as np; np.save('/tmp/probe/img.npy', np.random.default_rng(0).standard_normal((1,3,224,224)).astype(np.float32))"
"$K" compile /tmp/probe/resnet50.onnx -o /tmp/probe/r50.kiln --target cuda --precision fp16 > /dev/null
for check in 1 0 1 0; do
  s=$(date +%s%N)
  KILN_CUDA_CONV_CHECK=$check KILN_LOG=debug "$K" run /tmp/probe/r50.kiln --input input=/tmp/probe/img.npy --output-dir /tmp/probe/out$check --json 2>/tmp/probe/log.txt \
    | python3 -c 'import sys,json; j=json.load(sys.stdin); print("load_ms", round(j["load_ms"],1), "run_ms", round(j["run_ms"],2))'
  e=$(date +%s%N)
  echo "KILN_CUDA_CONV_CHECK=$check: process $(( (e - s) / 1000000 )) ms"
  grep -E "phases|plans:|read \+ verify" /tmp/probe/log.txt
done
python3 -c "import numpy as np; a=np.load('/tmp/probe/out1/logits.npy'); b=np.load('/tmp/probe/out0/logits.npy'); print('outputs equal with and without the query:', bool((a==b).all()))"
} > "$L/probe.log" 2>&1
cat "$L/probe.log"
exec scripts/device/bench_gpu.sh "$@"

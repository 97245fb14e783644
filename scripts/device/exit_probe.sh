#!/bin/bash
# What the end of a warm start costs (run through scripts/device/remote.sh):
# ResNet-50 fp16 compiled into a fresh cache, then fresh `kiln run` processes
# on the cache hit, alternating the default fast exit with KILN_FAST_EXIT=0
# (the orderly teardown of the program, library handles and CUDA context),
# printing each process's first-result time and its wall time from spawn to
# exit. Log: $OUT/logs/exit_probe.log.
set -u
K=$PWD/build-cuda/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs; M=/tmp/models; mkdir -p "$L" "$M"
[ -f $M/resnet50.onnx ] || python3 bench/make_gpu_models.py "$M" resnet50 > /dev/null 2>&1
python3 -c "
import numpy as np; np.save('/tmp/img.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))"
export XDG_CACHE_HOME=/tmp/kc_exit
rm -rf /tmp/kc_exit
"$K" run $M/resnet50.onnx --target cuda --precision fp16 --input input=/tmp/img.npy --json > /dev/null
{
for i in $(seq ${KILN_PROBE_REPS:-3}); do
  for fast in 1 0; do
    t0=$(date +%s%N)
    KILN_FAST_EXIT=$fast "$K" run $M/resnet50.onnx --target cuda --precision fp16 --input input=/tmp/img.npy \
      --output-dir /tmp/exit_out --json > /tmp/exit_json.txt
    rc=$?
    t1=$(date +%s%N)
    python3 -c "
import json; j = json.load(open('/tmp/exit_json.txt'))
print('KILN_FAST_EXIT=$fast run $i: rc $rc, first result', round(j['since_process_start_ms']), 'ms after process start, spawn to exit', ($t1 - $t0) // 1000000, 'ms, outputs', [o.get('file') for o in j['outputs']])"
  done
done
} > "$L/exit_probe.log" 2>&1
cat "$L/exit_probe.log"

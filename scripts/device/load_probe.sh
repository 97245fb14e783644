#!/bin/bash
# Where a warm start's load time goes (run through scripts/device/remote.sh):
# ResNet-50 compiled into a fresh cache (fp16 and fp32), then fresh `kiln
# run` processes on the cached artifact, with the convolution warm-up at load
# (default) and without it (KILN_CUDA_WARM_CONVS=0), printing the load phases
# (KILN_LOG=debug); then `kiln perf` for load_ms (fresh process) against
# reload_ms (the same artifact loaded again in that process). Nsight Systems
# is used when installed. Logs: $OUT/logs/load_probe.log.
set -u
K=$PWD/build-cuda/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs; M=/tmp/models; mkdir -p "$L" "$M"
[ -f $M/resnet50.onnx ] || python3 bench/make_gpu_models.py "$M" resnet50 > /dev/null 2>&1
python3 -c "
import numpy as np; np.save('/tmp/img.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))"
export XDG_CACHE_HOME=/tmp/kc_probe
rm -rf /tmp/kc_probe
REPS=${KILN_PROBE_REPS:-3}
{
for p in fp16 fp32; do
  case $p in fp32) PF="";; *) PF="--precision $p";; esac
  "$K" run $M/resnet50.onnx --target cuda $PF --input input=/tmp/img.npy --json > /dev/null
  for warm in 1 0; do
    for i in $(seq $REPS); do
      echo "### $p KILN_CUDA_WARM_CONVS=$warm run $i"
      KILN_CUDA_WARM_CONVS=$warm KILN_LOG=debug "$K" run $M/resnet50.onnx --target cuda $PF --input input=/tmp/img.npy --json \
        2> /tmp/probe_err.txt | python3 -c 'import sys,json; j=json.load(sys.stdin); print("first result", round(j["since_process_start_ms"]), "ms after process start; load_ms", round(j["load_ms"],1), "first run_ms", round(j.get("run_ms", -1),1))'
      grep -iE "plans:|load phases|after the process started|constants uploaded|CUDA graph:|prewarm" /tmp/probe_err.txt | cut -c1-300 | head -12
    done
  done
  echo "### $p kiln perf (load_ms: fresh process; reload_ms: loaded again in it)"
  "$K" perf $M/resnet50.onnx --target cuda $PF --runs 50 --input input=/tmp/img.npy --json | python3 -c '
import sys, json; j = json.load(sys.stdin); r = j.get("reload_ms")
print("load_ms", round(j["load_ms"], 1), "reload_ms", round(r, 1) if r is not None else j.get("reload_error"), "latency_ms_median", round(j["latency_ms_median"], 4))'
done
} > "$L/load_probe.log" 2>&1
cat "$L/load_probe.log"

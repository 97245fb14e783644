#!/bin/bash
# Where a warm start's load time goes (run through scripts/device/remote.sh):
# ResNet-50 fp16 compiled into a fresh cache, then fresh `kiln run` processes
# on the cached artifact with CUDA_MODULE_LOADING=LAZY (the driver's default)
# and EAGER, printing the load phases (KILN_LOG=debug); and, where Nsight
# Systems is installed, one such process traced (CUDA API and OS runtime
# summaries, and the longest CUDA API calls). Logs: $OUT/logs/load_probe*.
set -u
K=$PWD/build-cuda/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs; M=/tmp/models; mkdir -p "$L" "$M"
[ -f $M/resnet50.onnx ] || python3 bench/make_gpu_models.py "$M" resnet50 > /dev/null 2>&1
python3 -c "
import numpy as np; np.save('/tmp/img.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))"
export XDG_CACHE_HOME=/tmp/kc_probe
rm -rf /tmp/kc_probe
{
for p in fp16 fp32; do
  case $p in fp32) PF="";; *) PF="--precision $p";; esac
  "$K" run $M/resnet50.onnx --target cuda $PF --input input=/tmp/img.npy --json > /dev/null
  for mode in LAZY EAGER LAZY; do
    echo "### $p CUDA_MODULE_LOADING=$mode"
    CUDA_MODULE_LOADING=$mode KILN_LOG=debug "$K" run $M/resnet50.onnx --target cuda $PF --input input=/tmp/img.npy --json \
      2> /tmp/probe_err.txt | python3 -c 'import sys,json; j=json.load(sys.stdin); print("first result", round(j["since_process_start_ms"]), "ms after process start; load_ms", round(j["load_ms"],1))'
    grep -iE "prewarm|plans:|plan\(s\)|load ready|session start|graph|phases" /tmp/probe_err.txt | cut -c1-300 | head -12
  done
done
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}"
if [ -n "$NSYS" ]; then
  "$NSYS" profile -o /tmp/warm_probe --force-overwrite true --trace=cuda,osrt --sample=none \
    "$K" run $M/resnet50.onnx --target cuda --precision fp16 --input input=/tmp/img.npy --json > /tmp/nsys_out.txt 2>&1
  tail -3 /tmp/nsys_out.txt
  "$NSYS" stats --report cuda_api_sum --format csv /tmp/warm_probe.nsys-rep 2>/dev/null | head -25
  "$NSYS" stats --report osrt_sum --format csv /tmp/warm_probe.nsys-rep 2>/dev/null | head -15
  "$NSYS" stats --report cuda_api_trace --format csv /tmp/warm_probe.nsys-rep 2>/dev/null \
    | python3 -c '
import sys, csv
rows = list(csv.reader(sys.stdin))
if rows:
    h = rows[0]; print(h)
    try:
        di = h.index("Duration (ns)"); si = h.index("Start (ns)"); ni = h.index("Name")
        rs = sorted(rows[1:], key=lambda r: -float(r[di]))[:25]
        t0 = min(float(r[si]) for r in rows[1:])
        for r in sorted(rs, key=lambda r: float(r[si])): print(round((float(r[si]) - t0) / 1e6, 1), "ms +", round(float(r[di]) / 1e6, 2), "ms", r[ni], r[h.index("TID")] if "TID" in h else "")
    except Exception as e: print("parse:", e)'
fi
} > "$L/load_probe.log" 2>&1
cat "$L/load_probe.log"

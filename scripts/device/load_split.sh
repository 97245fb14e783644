#!/bin/bash
# Does a warm start pay for cuBLASLt's first use when a program has a single
# GEMM? (run through scripts/device/remote.sh, after build-cuda is packed)
# ResNet-50 fp16 (53 convolutions through cuDNN and the classifier's one Gemm
# through cuBLASLt) against its trunk without the classifier (convolutions
# only: cuBLASLt is never initialised), each compiled into a fresh cache,
# then fresh `kiln run` processes alternating between the two, printing the
# first-result time and the load phases (KILN_LOG=debug). Log:
# $OUT/logs/load_split.log.
# KILN_SPLIT_VARIANTS="model:ENV=value ..." runs other pairs, e.g.
# "resnet50:KILN_CUDA_BLASLT_EARLY=0 resnet50:KILN_CUDA_BLASLT_EARLY=1".
set -u
K=$PWD/build-cuda/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs; M=/tmp/models; mkdir -p "$L" "$M"
[ -f $M/resnet50.onnx ] || python3 bench/make_gpu_models.py "$M" resnet50 > /dev/null 2>&1
python3 - <<'PY'
import numpy as np, onnx
np.save('/tmp/img.npy', np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))
m = onnx.load('/tmp/models/resnet50.onnx')
g = m.graph
# Cut after the global average pool: drop the Flatten and the Gemm.
pool = [n for n in g.node if n.op_type == 'GlobalAveragePool'][-1]
keep = []
for n in g.node:
    keep.append(n)
    if n is pool: break
del g.node[:]; g.node.extend(keep)
del g.output[:]
g.output.append(onnx.helper.make_tensor_value_info(pool.output[0], onnx.TensorProto.FLOAT, [1, 2048, 1, 1]))
used = {i for n in g.node for i in n.input}
inits = [t for t in g.initializer if t.name in used]
del g.initializer[:]; g.initializer.extend(inits)
onnx.save(m, '/tmp/models/resnet50_trunk.onnx')
print('trunk:', len(g.node), 'nodes')
PY
export XDG_CACHE_HOME=/tmp/kc_split
rm -rf /tmp/kc_split
REPS=${KILN_PROBE_REPS:-4}
VARIANTS=${KILN_SPLIT_VARIANTS:-"resnet50:X=0 resnet50_trunk:X=0"}
{
for v in resnet50 resnet50_trunk; do
  "$K" run $M/$v.onnx --target cuda --precision fp16 --input input=/tmp/img.npy --json > /dev/null
done
for i in $(seq $REPS); do
  for var in $VARIANTS; do
    v=${var%%:*}; e=${var#*:}
    echo "### $v fp16 $e run $i"
    env "$e" KILN_LOG=debug "$K" run $M/$v.onnx --target cuda --precision fp16 --input input=/tmp/img.npy --json \
      2> /tmp/split_err.txt | python3 -c 'import sys,json; j=json.load(sys.stdin); print("first result", round(j["since_process_start_ms"]), "ms after process start; load_ms", round(j["load_ms"],1), "first run_ms", round(j.get("run_ms", -1),1))'
    grep -iE "plans:|load phases|after the process started|CUDA graph:|prewarm|slowest steps|AlgoCheck" /tmp/split_err.txt | cut -c1-400 | head -12
  done
done
} > "$L/load_split.log" 2>&1
cat "$L/load_split.log"

#!/bin/bash
# One device call that checks and measures kiln's cuda target on a GPU
# machine (run through scripts/device/remote.sh, which unpacks build-cuda and
# the Debian runtime libraries first; see scripts/device/README.md):
#   1. the `cuda` test binary (tests/cuda/test_cuda_gpu.cpp);
#   2. BERT-base (seq 128) and ResNet-50, exported here with random weights
#      (bench/make_gpu_models.py): `kiln perf` per precision in $KILN_GPU_PRECISIONS
#      (default fp32) with a per-node profile, outputs compared with the cpu target;
#   3. ResNet-50 compile time and latency per tuning mode (heuristic, fast, exhaustive);
#   4. a cross-compiled ResNet-50 artifact (compiled with the GPU hidden:
#      CUDA_VISIBLE_DEVICES=, --arch of this GPU, --tuning heuristic) loaded and run;
#   5. warm start: a fresh `kiln run` process on a cached artifact, wall time
#      and its load_ms part (3 times);
#   6. the ONNX node conformance suite on cuda (ratchet against baseline_cuda.txt).
# $KILN_GPU_SECTIONS picks steps (default all: "tests modeltests models
# tuning cross warm conformance"; modeltests runs tests/models/check_model.py,
# the models_cuda.* tests, on .gpu/models/*.onnx and the exported models). Results: $OUT/logs/*.log. Every step has a timeout, so one slow step does
# not lose the others' results.
set -u
B=${KILN_BUILD:-build-cuda}
K=$PWD/$B/tools/kiln/kiln
L=${OUT:-/tmp/out}/logs
M=/tmp/models
mkdir -p "$L" "$M"
PRECISIONS=${KILN_GPU_PRECISIONS:-fp32}
SECTIONS=" ${KILN_GPU_SECTIONS:-tests modeltests models tuning cross warm conformance} "
want() { [[ "$SECTIONS" == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

python3 bench/make_gpu_models.py "$M" > "$L/export.log" 2>&1 &
exp=$!

if want tests; then
stamp "cuda tests"
timeout 240 "$B/tests/cuda/kiln_cuda_gpu_tests" > "$L/gpu_tests.log" 2>&1
echo "rc=$?" >> "$L/gpu_tests.log"
grep -E "^\[  (PASSED|FAILED) |Failure|rc=" "$L/gpu_tests.log" | head -20
timeout 240 "$B/tests/cuda/kiln_cuda_kernels_gpu_tests" > "$L/kernel_tests.log" 2>&1
echo "rc=$?" >> "$L/kernel_tests.log"
grep -E "^\[  (PASSED|FAILED) |Failure|rc=" "$L/kernel_tests.log" | head -20
fi

wait $exp
tail -2 "$L/export.log"
python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(0)
np.save('/tmp/ids.npy', rng.integers(0, 30522, (1, 128), dtype=np.int64))
m = np.ones((1, 128), np.int64); m[:, -20:] = 0
np.save('/tmp/mask.npy', m); np.save('/tmp/types.npy', np.zeros((1, 128), np.int64))
np.save('/tmp/img.npy', rng.standard_normal((1, 3, 224, 224)).astype(np.float32))
PY
bert_in="--input input_ids=/tmp/ids.npy --input attention_mask=/tmp/mask.npy --input token_type_ids=/tmp/types.npy"
img_in="--input input=/tmp/img.npy"

if want modeltests; then
stamp "model tests (models_cuda: check_model.py against ONNX Runtime)"
mkdir -p /tmp/mt && cp .gpu/models/*.onnx /tmp/mt/ 2>/dev/null; cp $M/resnet50.onnx $M/bert_base.onnx /tmp/mt/
for m in demo mobilenet_v3_small resnet50 bert_base; do
  [ -f /tmp/mt/$m.onnx ] || { echo "$m: no model"; continue; }
  timeout 200 python3 tests/models/check_model.py --model $m --kiln "$K" --models-dir /tmp/mt --target cuda --timeout 150 > "$L/modeltest_$m.log" 2>&1
  echo "models_cuda.$m rc=$? $(tail -1 "$L/modeltest_$m.log")"
done
fi
if want models; then
stamp "models"
{
for m in bert_base resnet50; do
  [ $m = bert_base ] && IN=$bert_in || IN=$img_in
  timeout 100 "$K" run $M/$m.onnx --target cpu --no-cache $IN --output-dir /tmp/out_${m}_cpu > /dev/null
  for p in $PRECISIONS; do
    case $p in fp32) PF="";; tf32) PF="--tf32";; *) PF="--precision $p";; esac
    echo "### $m cuda $p"
    timeout 150 "$K" perf $M/$m.onnx --target cuda $PF --runs 100 --profile --keep /tmp/art_${m}_$p.kiln $IN 2>&1 | head -40
    timeout 60 "$K" run /tmp/art_${m}_$p.kiln $IN --output-dir /tmp/out_${m}_$p > /dev/null
    python3 - "$m" "$p" <<'PY'
import numpy as np, glob, os, sys
m, p = sys.argv[1:]
for f in sorted(glob.glob(f'/tmp/out_{m}_cpu/*.npy')):
    a = np.load(f); g = f.replace('_cpu/', f'_{p}/')
    if not os.path.exists(g): print(m, p, os.path.basename(f), 'MISSING'); continue
    b = np.load(g).astype(np.float32)
    print(m, p, os.path.basename(f), a.shape, 'max|cuda-cpu| =', float(np.abs(a - b).max()), 'max|cpu| =', float(np.abs(a).max()))
PY
  done
done
} > "$L/models.log" 2>&1
grep -E "^###|latency|compile |load|max\|" "$L/models.log"

fi
if want tuning; then
stamp "tuning modes (ResNet-50)"
{
for t in heuristic fast exhaustive; do
  echo "### tuning $t"
  timeout 200 "$K" perf $M/resnet50.onnx --target cuda --tuning $t --runs 100 $img_in --json
done
} > "$L/tuning.log" 2>&1
cat "$L/tuning.log" | python3 -c '
import sys, json
for line in sys.stdin:
    if line.startswith("{"):
        j = json.loads(line); print(j.get("tuning"), "compile_ms", round(j["compile_ms"]), "latency_ms_median", round(j["latency_ms_median"], 3), "load_ms", round(j["load_ms"], 1))
    elif line.startswith("###") or "error" in line: print(line.rstrip())'

fi
if want cross; then
stamp "cross-compiled artifact"
{
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d . | sed 's/^/sm_/')
echo "arch $arch"
CUDA_VISIBLE_DEVICES= timeout 100 "$K" compile $M/resnet50.onnx -o /tmp/r50_cross.kiln --target cuda --arch "$arch" --tuning heuristic
"$K" check /tmp/r50_cross.kiln
KILN_LOG=info timeout 60 "$K" run /tmp/r50_cross.kiln $img_in --output-dir /tmp/out_cross --json | head -c 400; echo
python3 -c "
import numpy as np; a=np.load('/tmp/out_resnet50_cpu/logits.npy'); b=np.load('/tmp/out_cross/logits.npy'); print('cross max|cuda-cpu|', float(abs(a-b).max()), 'max|cpu|', float(abs(a).max()))"
} > "$L/cross.log" 2>&1
tail -6 "$L/cross.log"

fi
if want warm; then
stamp "warm start"
{
export XDG_CACHE_HOME=/tmp/kcache
rm -rf /tmp/kcache
for p in fp32 fp16; do
  case $p in fp32) PF="";; *) PF="--precision $p";; esac
  echo "### ResNet-50 $p"
  s=$(date +%s%N); "$K" run $M/resnet50.onnx --target cuda $PF $img_in --json | head -c 300; e=$(date +%s%N); echo; echo "first process (compile + publish): $(( (e - s) / 1000000 )) ms"
  for i in 1 2 3; do
    s=$(date +%s%N); KILN_LOG=debug "$K" run $M/resnet50.onnx --target cuda $PF $img_in --json 2>/tmp/warm_log_$i.txt | python3 -c 'import sys,json; j=json.load(sys.stdin); print("cache", j["cache"], "first result", round(j["since_process_start_ms"]), "ms after process start; load_ms", round(j["load_ms"],1), "run_ms", round(j["run_ms"],2))'; e=$(date +%s%N)
    grep -iE "phases|load|digest|read|verif|prewarm|plans:|starts" /tmp/warm_log_$i.txt | head -14
    echo "warm process $i: $(( (e - s) / 1000000 )) ms wall (process start to exit)"
  done
done
unset XDG_CACHE_HOME
} > "$L/warm.log" 2>&1
cat "$L/warm.log" | grep -v "^{"

fi
if want conformance; then
stamp "conformance"
if [ -f .gpu/node.tar.xz ]; then
  mkdir -p /tmp/onnxdata && tar -xJf .gpu/node.tar.xz -C /tmp/onnxdata
  left=$(( ${KILN_SESSION_BUDGET_S:-570} - ($(date +%s) - t0) ))
  stamp "conformance gets ${left} s"
  [ "$left" -gt 20 ] && timeout "$left" "$B/tests/conformance/kiln_conformance" --data /tmp/onnxdata/node --target cuda \
    --jobs 14 --tolerances tests/conformance/tolerances.txt --baseline tests/conformance/baseline_cuda.txt \
    > "$L/conformance_cuda.log" 2>&1
  echo "rc=$?" >> "$L/conformance_cuda.log"
  grep -E "^conformance cuda|^REGRESSION|rc=" "$L/conformance_cuda.log" | head
fi
fi
stamp "done"

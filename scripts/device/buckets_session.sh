#!/bin/bash
# One device call for issue #7 on the cuda target (through scripts/device/remote.sh,
# like gpu_session.sh): the cuda GPU tests, then dynamic-batch ResNet-50 and
# dynamic (batch, sequence) BERT-base exported here (bench/make_gpu_models.py
# --dynamic, random weights) streamed through kiln's shape buckets on cuda and
# through ONNX Runtime (CPU, every output compared): bench/buckets_stream.py.
# Counts: $RESNET_COUNT (default 200), $BERT_COUNT (default 100); ORT gets the
# machine's cores. Results: $OUT/logs/stream_*.json.
set -u
L=${OUT:-/tmp/out}/logs
mkdir -p "$L" /tmp/dyn
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 bench/make_gpu_models.py /tmp/dyn --dynamic resnet50 > "$L/export_dyn.log" 2>&1 &
python3 bench/make_gpu_models.py /tmp/dyn --dynamic bert_base >> "$L/export_dyn.log" 2>&1 &
stamp "cuda tests"
timeout 240 build-cuda/tests/cuda/kiln_cuda_gpu_tests > "$L/gpu_tests.log" 2>&1; echo "rc=$?" >> "$L/gpu_tests.log"
timeout 120 build-cuda/tests/cuda/kiln_cuda_kernels_gpu_tests > "$L/kernel_tests.log" 2>&1; echo "rc=$?" >> "$L/kernel_tests.log"
grep -hE "^\[  (PASSED|FAILED) |Failure|rc=" "$L/gpu_tests.log" "$L/kernel_tests.log" | head -20
wait
tail -3 "$L/export_dyn.log"
n=$(nproc)
stamp "ResNet-50 stream"
timeout 300 python3 bench/buckets_stream.py resnet --model /tmp/dyn/resnet50_dyn.onnx --count "${RESNET_COUNT:-200}" \
  --batch-max 64 --seed 2 --threads "$n" --target cuda --stream build-cuda/bench/stream/kiln-stream --work /tmp/w_r \
  > "$L/stream_resnet_cuda.json" 2> "$L/stream_resnet_cuda.err"; echo "rc=$?"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print({k: j[k] for k in j if k not in ('model',)})" "$L/stream_resnet_cuda.json" 2>&1 | head -c 1500; echo
stamp "BERT-base stream"
timeout 330 python3 bench/buckets_stream.py bert --model /tmp/dyn/bert_base_dyn.onnx --count "${BERT_COUNT:-100}" \
  --batch-max 32 --seq-max 512 --seed 3 --threads "$n" --target cuda --stream build-cuda/bench/stream/kiln-stream --work /tmp/w_b \
  > "$L/stream_bert_cuda.json" 2> "$L/stream_bert_cuda.err"; echo "rc=$?"
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print({k: j[k] for k in j if k not in ('model',)})" "$L/stream_bert_cuda.json" 2>&1 | head -c 1500; echo
tail -3 "$L/stream_bert_cuda.err" "$L/stream_resnet_cuda.err"
stamp "done"

#!/bin/bash
# Session 15's profile call (issue #20, the second profile-and-fix round), one device call with the
# cp312 wheel folder carried ($KILN_PY_GPU_DIR, default .gpu/gpuzoo, as for gpu_zoo.sh); timeout_s 600:
#   bash scripts/device/round15_profiles.sh
# 1. The dev set with device I/O (issue #20's goals: ResNet-50 fp16 b1 <= 0.25 ms, BERT-base <= 0.45 ms,
#    b32 ResNet-50 <= 0.8 ms, BERT-base <= 1.3 ms): bench/make_gpu_models.py's exports (static shapes),
#    `kiln perf --target cuda --precision fp16 --runs 300` (its "device I/O" line is Session::run_device,
#    inputs and outputs already on the GPU) and --profile (per-node times), one compile each.
# 2. Per-node profiles of the GPU zoo rows still above torch.compile (bench/gpu_zoo.py profile;
#    ROUND15_ZOO overrides the list).
# Output: $OUT/round15_profiles.tar.gz (one text file per model and batch) and round15_profiles.log.
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/../.."
DIR=${KILN_PY_GPU_DIR:-.gpu/gpuzoo}
OUT=${OUT:-/tmp/out}
P=/tmp/r15
mkdir -p "$OUT" "$P" /tmp/r15models
{
  source scripts/device/kilnpy_env.sh
  kilnpy_setup "$DIR" || exit 1
  uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader
  python3 bench/make_gpu_models.py /tmp/r15models resnet50 bert_base > "$P/export_b1.log" 2>&1
  python3 bench/make_gpu_models.py /tmp/r15models --batch 32 resnet50 bert_base > "$P/export_b32.log" 2>&1
  echo "exports done at $(( $(date +%s) - T0 )) s"; ls /tmp/r15models
  for f in resnet50 bert_base resnet50_b32 bert_base_b32; do
    m=/tmp/r15models/$f.onnx
    [ -f "$m" ] || { echo "$f: no export"; continue; }
    # One compile: the timed runs, then the profiled ones, then the device-I/O runs (cmd_perf.cpp's order).
    timeout 150 "$KILN" perf "$m" --target cuda --precision fp16 --runs 300 --profile > "$P/devset_$f.txt" 2>&1
    echo "$f rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O|median' "$P/devset_$f.txt" | tr -s ' ' | tr '\n' ';')"
  done
  python3 bench/gpu_zoo.py profile ${ROUND15_ZOO:-llama_prefill:32 vit_b_16:32:static efficientnet_b0:32 gpt2_prefill:32} \
    --kiln "$KILN" --out "$P" --work build-gpuzoo/work --runs 50 > "$P/zoo_profiles.log" 2>&1
  echo "zoo profiles rc $? at $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$OUT/round15_profiles.log"
tar -czf "$OUT/round15_profiles.tar.gz" -C "$P" .

#!/bin/bash
# The GPU zoo benchmark of issue #20 (bench/gpu_zoo.py) in one device call:
# 14 architectures outside the dev set exported there by the zoo's recipes
# (torch 2.11), kiln cuda fp16 with device I/O (kiln.Session.bind on torch
# CUDA tensors) against torch.compile(mode="reduce-overhead"), batch 1 and 32.
# Run from the repository root with $KILN_PY_GPU_DIR (default .gpu/pygpu)
# carried: the cp312 kiln wheel built here and debs/*.deb (scripts/device/README.md,
# "The Python package on the GPU"); timeout_s 600:
#   bash scripts/device/gpu_zoo.sh [gpu_zoo.py run options, e.g. --models convnext_tiny gpt2_prefill]
# GPU_ZOO_BUDGET_S (default 565): seconds from this script's start by which
# the report is written (the bench kills what is left at that point).
# Output ($OUT; the device tool brings back at most 8 files):
#   gpu_zoo.md, gpu_zoo.png   the table and the chart
#   gpu_zoo.tar.gz            gpu_zoo.{md,png,json,jsonl} and logs/ (one per model worker)
#   gpu_zoo.log               the run's progress
# The exports stay in build-gpuzoo/work/models (git-ignored: a machine still warm keeps them for a
# second call). Here: bench/gpu_zoo.py report gpu_zoo.jsonl [more.jsonl] --out bench/results/cuda/gpu_zoo_DATE
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/../.."
DIR=${KILN_PY_GPU_DIR:-.gpu/pygpu}
HERE=$PWD/scripts/device
OUT=${OUT:-/tmp/out}
BUDGET=${GPU_ZOO_BUDGET_S:-565}
mkdir -p "$OUT"
{
  source "$HERE/kilnpy_env.sh"
  kilnpy_setup "$DIR" || exit 1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; free -g | head -2
  left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
  echo "gpu_zoo.sh: setup took $(( $(date +%s) - T0 )) s; bench budget ${left} s"
  # A hard stop 20 s after the bench's own watchdog, should the watchdog itself hang.
  timeout -k 5 $(( left + 20 )) python3 bench/gpu_zoo.py run --out /tmp/gpu_zoo_out --work build-gpuzoo/work \
    --budget-s "$left" "$@"
  echo "gpu_zoo.sh: bench exit $?; $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$OUT/gpu_zoo.log"
cp /tmp/gpu_zoo_out/gpu_zoo.md /tmp/gpu_zoo_out/gpu_zoo.png "$OUT/" 2>/dev/null
tar -czf "$OUT/gpu_zoo.tar.gz" -C /tmp/gpu_zoo_out . 2>/dev/null
ls -la "$OUT"

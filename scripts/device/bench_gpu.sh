#!/bin/bash
# One device call of the GPU benchmark of issue #6: kiln's cuda target against
# PyTorch eager and torch.compile (bench/cuda_vs_torch.py). Runs on the GPU
# machine from the repo root, after scripts/device/remote.sh has unpacked
# build-cuda and the Debian runtime libraries (carry .gpu), e.g.
#   BENCH_T0=$(date +%s) scripts/device/remote.sh scripts/device/bench_gpu.sh --precisions fp16 --models resnet50
# Its arguments go to bench/cuda_vs_torch.py (see its --help); it adds
# --kiln build-cuda/tools/kiln/kiln --work build-bench (git-ignored: the ONNX
# exports there survive between calls on a machine that stayed warm) and a
# --deadline that ends the bench, report written, before the call's limit.
# Writes to $OUT (4 files, within what comes back from a device call):
#   cuda_vs_torch.jsonl  every result, one JSON object a line, with its command
#   cuda_vs_torch.md     the report of this call
#   bench.log            the timestamped progress lines
#   step_logs.tar.gz     each step's command, exit status, stdout and stderr
# Environment: BENCH_T0 (epoch seconds when the device command started;
# default: now), BENCH_BUDGET_S (seconds from BENCH_T0 by which this script
# must be done; default 570, for a 600 s call), BENCH_PYTHON (default python3,
# the device image's, which has torch). See scripts/device/README.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/bench_gpu_out}
mkdir -p "$OUT"
t0=${BENCH_T0:-$(date +%s)}
budget=${BENCH_BUDGET_S:-570}
steps=/tmp/bench_gpu_steps
rm -rf "$steps"
bench() {
  echo "bench_gpu.sh: $(date -Is), $(($(date +%s) - t0)) s since BENCH_T0"
  local py=${BENCH_PYTHON:-python3}
  local probe='import torch; print("bench_gpu.sh: torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.get_device_name(0))'
  # remote.sh set LD_LIBRARY_PATH for kiln (Debian libraries, CUDA 13); should torch fail under it, its
  # processes run without it (kiln's keep it).
  if ! "$py" -c "$probe" 2>&1 | tail -1 | grep "^bench_gpu.sh: torch"; then
    echo "bench_gpu.sh: torch cannot use the GPU with LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}; trying without it"
    if env -u LD_LIBRARY_PATH "$py" -c "$probe" 2>&1 | tail -1 | grep "^bench_gpu.sh: torch"; then
      export BENCH_TORCH_UNSET_LD_LIBRARY_PATH=1
    fi
  fi
  local deadline=$((budget - ($(date +%s) - t0) - 10))   # 10 s kept for packing the logs
  echo "bench_gpu.sh: bench deadline ${deadline} s"
  PYTHONUNBUFFERED=1 "$py" bench/cuda_vs_torch.py --kiln build-cuda/tools/kiln/kiln --work build-bench \
    --results "$OUT/cuda_vs_torch.jsonl" --report-out "$OUT/cuda_vs_torch.md" --step-logs "$steps" \
    --deadline "$deadline" "$@"
}
bench "$@" 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
tar -czf "$OUT/step_logs.tar.gz" -C "$(dirname "$steps")" "$(basename "$steps")" 2>/dev/null
echo "bench_gpu.sh: bench exit $rc; $(date -Is); files in \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit "$rc"

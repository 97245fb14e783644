#!/bin/bash
# Issue #20: the RGB stem's channel padding (src/targets/cuda/compile/stem_pad.cpp) measured on ResNet-50
# fp16 at batch 1 and 32: `kiln perf --target cuda --precision fp16 --profile` with KILN_CUDA_STEM_PAD_C=0
# (no padding: today's Cast + Transpose kernels and cuDNN on C = 3), 4 and 8 (the default), interleaved
# (round r: b1 0 4 8, b32 0 4 8), each its own compile (the switch is read at compile time and is not part
# of the cache key; perf compiles without the cache). --precision-check off: the check runs the model on
# the host's reference kernels (tens of seconds at batch 32) and decides nothing about the stem.
# One device call after remote.sh (build-cuda unpacked from .gpu/build.tar.xz, the .debs), timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/stem_pad.sh
# carry [".gpu/build.tar.xz", ".gpu/debs"]; about 2.5-3 minutes. Models: bench/make_gpu_models.py exports
# resnet50.onnx and resnet50_b32.onnx (torch + torchvision on the GPU machine, seed-0 random weights, as
# round15_profiles.sh), or STEM_MODELS=DIR holding both. KILN overrides the command line; STEM_ROUNDS
# (default 2) the rounds; STEM_BUDGET_S (default 200) stops starting runs after that many seconds.
# Output: the summary table (stdout and $OUT/stem_pad/summary.txt) and one perf log per run in
# $OUT/stem_pad.tar.gz. The GPU test CudaStemPadGpu.* runs first (STEM_TESTS=0: not).
set -u
T0=$(date +%s)
cd "$(dirname "$0")/../.."
K=${KILN:-$PWD/build-cuda/tools/kiln/kiln}
L=${OUT:-/tmp/out}/stem_pad
M=${STEM_MODELS:-/tmp/stem_models}
mkdir -p "$L" "$M"
( uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader ) > "$L/machine.txt" 2>&1
cat "$L/machine.txt"
# The GPU checks first (about 20 s; STEM_TESTS=0 skips them): the padded stems and the Pad gathers against ref.
if [ "${STEM_TESTS:-1}" = 1 ] && [ -x build-cuda/tests/cuda/kiln_cuda_gpu_tests ]; then
  timeout 120 build-cuda/tests/cuda/kiln_cuda_gpu_tests --gtest_filter='CudaStemPadGpu.*' > "$L/gpu_tests.log" 2>&1
  echo "CudaStemPadGpu rc $? at $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED)|worst error" "$L/gpu_tests.log"
fi
if [ ! -f "$M/resnet50.onnx" ] || [ ! -f "$M/resnet50_b32.onnx" ]; then
  # torch's own CUDA libraries, not the ones remote.sh put first for kiln.
  env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py "$M" resnet50 > "$L/export_b1.log" 2>&1
  env -u LD_LIBRARY_PATH python3 bench/make_gpu_models.py "$M" --batch 32 resnet50 > "$L/export_b32.log" 2>&1
fi
ls -la "$M"; echo "models ready at $(( $(date +%s) - T0 )) s"
for r in $(seq 1 "${STEM_ROUNDS:-2}"); do
  for b in 1 32; do
    f=$M/resnet50.onnx; [ "$b" = 32 ] && f=$M/resnet50_b32.onnx
    for c in 0 4 8; do
      [ $(( $(date +%s) - T0 )) -lt "${STEM_BUDGET_S:-200}" ] || { echo "b$b C=$c round $r: not run (time)"; continue; }
      log=$L/b${b}_c${c}_r$r.txt
      KILN_LOG=info KILN_CUDA_STEM_PAD_C=$c timeout 90 "$K" perf "$f" --target cuda --precision fp16 --precision-check off \
        --runs 200 --warmup 20 --profile > "$log" 2>&1
      echo "b$b C=$c round $r rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O' "$log" | tr -s ' ')"
    done
  done
done
# One row per run: device I/O and host-I/O medians, the stem Conv's profiled time (its line among the 15
# slowest nodes; empty below them), all cuDNN Conv nodes' time, and the operator table's generated Cast,
# Transpose and Relu kernels (count x ms): the entry is one Cast kernel with the padding (the Transpose
# gone); ResNet-50's only Relu kernel is the stem's (every other Relu is fused), so "none" = fused.
{
  printf '%-5s %-3s %-5s %8s %8s %8s %8s %12s %12s %12s\n' batch C round "dev I/O" latency conv1 "all Conv" cast transpose relu
  for b in 1 32; do for c in 0 4 8; do for r in $(seq 1 "${STEM_ROUNDS:-2}"); do
    log=$L/b${b}_c${c}_r$r.txt; [ -f "$log" ] || continue
    dev=$(grep -E 'device I/O' "$log" | awk '{print $3}')
    lat=$(grep -E '^ *latency' "$log" | awk '{print $2}')
    conv1=$(grep -E '^ +/conv1/Conv +kiln' "$log" | awk '{print $(NF-1)}' | head -1)
    op() { grep -E "^ +kiln.cuda::$1 " "$log" | awk -v n="$2" '{print $(n) "x " $(n+1)}' | head -1; }
    printf '%-5s %-3s %-5s %8s %8s %8s %8s %12s %12s %12s\n' "$b" "$c" "$r" "${dev:-?}" "${lat:-?}" "${conv1:--}" \
      "$(op Conv 2 | cut -d' ' -f2)" "$(op 'Kernel cast' 3)" "$(op 'Kernel transpose' 3)" "$(op 'Kernel relu' 3)"
  done; done; done
  echo "(ms; conv1: the stem's per-node profile mean; cast / transpose / relu: count x ms of generated kernels, all of the"
  echo " program's: the model output's Cast to float32 is one of the casts; empty: no such kernel)"
} | tee "$L/summary.txt"
tar -czf "${OUT:-/tmp/out}/stem_pad.tar.gz" -C "$L" .
echo "stem_pad done at $(( $(date +%s) - T0 )) s"

#!/bin/bash
# Eighth session (issue 16 on cuda): run after remote.sh (see README.md),
#   KILN_PACK_BUILD=build scripts/device/pack.sh   # here
#   scripts/device/remote.sh scripts/device/spec_session.sh   # there, .gpu carried
# 1. the GPU test binaries (cuda_gpu, cuda_kernels_gpu) at this build;
# 2. models exported there as their owners export them (torch 2.11's exporter,
#    dynamic batch on), run with NO shape flags on cuda fp32 and fp16 through
#    the cache (two batch sizes, then the first again from a new process),
#    every output compared with ONNX Runtime (CPU) on the same inputs;
# 3. the If-on-a-runtime-scalar model (tests/cli/test_specialization.py) on
#    cuda, both values.
# Logs: $OUT/logs (tarred at the end).
set -u
K=build-cuda/tools/kiln/kiln
L=$OUT/logs
mkdir -p "$L" /tmp/spec
T0=$(date +%s)
say() { echo "[$(($(date +%s) - T0)) s] $*"; }

say "GPU tests"
( cd build-cuda/tests/cuda && timeout 240 ./kiln_cuda_gpu_tests 2>&1 | tail -25 ) > "$L/gpu_tests.log" 2>&1
tail -3 "$L/gpu_tests.log"
( cd build-cuda/tests/cuda && timeout 180 ./kiln_cuda_kernels_gpu_tests 2>&1 | tail -15 ) > "$L/gpu_kernel_tests.log" 2>&1
tail -3 "$L/gpu_kernel_tests.log"

say "exporting models with dynamic batch (torch $(python3 -c 'import torch; print(torch.__version__)'))"
timeout 240 python3 scripts/device/spec_models.py /tmp/spec > "$L/export.log" 2>&1
tail -8 "$L/export.log"

say "kiln run with no shape flags on cuda, against ONNX Runtime"
timeout 300 python3 scripts/device/spec_models.py /tmp/spec --check "$K" --cache /tmp/spec/cache 2>&1 | tee "$L/check.log" | tail -40

say "done"
cd "$OUT" && tar czf logs.tgz logs && rm -rf logs

#!/bin/bash
# Session 14's second verification call (after scripts/device/remote.sh): the node tests from the
# 990th on with --fallback error (the first call's conformance runs died of SIGBUS beside the GPU
# zoo's 7 torch workers), the two GPU tests fixed after the first call, and GPT-2 b32's LM head
# under the matmul rewrites' switches (KILN_CUDA_GEMM_TRANSPOSE_B, KILN_CUDA_GEMM_OUT_CAST).
# Output: $OUT/final_check14.tar.gz.
set -u
L=$OUT/c2; mkdir -p "$L" /tmp/onnxdata
tar -xJf .gpu/node.tar.xz -C /tmp/onnxdata
(cd /tmp/onnxdata/node && ls -d test_* | LC_ALL=C sort | tail -n +990) > /tmp/l.txt
timeout 170 build-cuda/tests/conformance/kiln_conformance --data /tmp/onnxdata/node --list /tmp/l.txt --target cuda \
  --jobs 12 --fallback error --timeout 60 --markdown "$L/conf.md" --tolerances tests/conformance/tolerances.txt \
  > "$L/conf.log" 2>&1
echo "rc=$?" >> "$L/conf.log"; tail -3 "$L/conf.log"
build-cuda/tests/cuda/kiln_cuda_gpu_tests --gtest_filter='CudaPrecision.ArtifactsRecordPrecisionAndNodeDtypes:CudaConcatGpu.*' \
  > "$L/gpu_fixed.log" 2>&1; tail -4 "$L/gpu_fixed.log"
K=$PWD/build-cuda/tools/kiln/kiln
for v in default:1:1 no_transpose:0:1 neither:0:0; do
  IFS=: read -r name tb oc <<< "$v"
  KILN_CUDA_GEMM_TRANSPOSE_B=$tb KILN_CUDA_GEMM_OUT_CAST=$oc timeout 120 python3 bench/gpu_zoo.py profile gpt2_prefill:32 \
    --kiln "$K" --out "$L/gpt2_$name" --work /tmp/gzw --runs 30 > /dev/null 2>&1
  echo "== $name"; grep -E "device I/O|lm_head" "$L/gpt2_$name"/*.txt | head -4
done
tar -czf "$OUT/final_check14.tar.gz" -C "$L" .

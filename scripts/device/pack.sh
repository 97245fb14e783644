#!/bin/bash
# Packs what a GPU machine needs from build-cuda (a Release build made here
# with the CUDA toolkit found) into .gpu/build.tar.xz: the kiln binary, the
# cuda and conformance test programs (stripped) and the CTest files, so that
# scripts/gpu_check.sh can run there. See scripts/device/README.md.
# KILN_PACK_BUILD=build packs the default RelWithDebInfo build instead
# (stripped, it is the same -O3 code; saves a second cold build here).
set -e
cd "$(dirname "$0")/../../${KILN_PACK_BUILD:-build-cuda}"
mkdir -p ../.gpu
files="CMakeCache.txt tools/kiln/kiln tests/cuda/kiln_cuda_gpu_tests tests/cuda/kiln_cuda_kernels_gpu_tests tests/cuda/kiln_cuda_fallback_gpu_tests tests/cuda/kiln_cuda_conditional_gpu_tests tests/cuda/kiln_cuda_recurrent_gpu_tests tests/cuda/kiln_cuda_codegen_tests tests/conformance/kiln_conformance tests/kiln_runtime_only tests/kiln_make_mlp bench/stream/kiln-stream"
files="$files $(find . -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' | sed 's|^\./||')"
rm -rf /tmp/gpupack && mkdir -p /tmp/gpupack
tar -cf - $files | tar -xf - -C /tmp/gpupack
for b in tools/kiln/kiln tests/cuda/kiln_cuda_gpu_tests tests/cuda/kiln_cuda_kernels_gpu_tests tests/cuda/kiln_cuda_fallback_gpu_tests tests/cuda/kiln_cuda_conditional_gpu_tests tests/cuda/kiln_cuda_recurrent_gpu_tests tests/cuda/kiln_cuda_codegen_tests tests/conformance/kiln_conformance tests/kiln_runtime_only tests/kiln_make_mlp bench/stream/kiln-stream; do strip /tmp/gpupack/$b; done
tar -cJf ../.gpu/build.tar.xz -C /tmp/gpupack .
ls -la ../.gpu/build.tar.xz

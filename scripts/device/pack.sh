#!/bin/bash
# Packs what a GPU machine needs from build-cuda (a Release build made here
# with the CUDA toolkit found) into .gpu/build.tar.xz: the kiln binary, the
# cuda and conformance test programs (stripped) and the CTest files, so that
# scripts/gpu_check.sh can run there. See scripts/device/README.md.
# KILN_PACK_BUILD=build packs the default RelWithDebInfo build instead
# (stripped, it is the same -O3 code; saves a second cold build here).
# KILN_PACK_BUILD may be an absolute path (another worktree's build);
# KILN_PACK_OUT (absolute) writes the archive there instead.
set -e
cd "$(dirname "$0")/../.."
cd "${KILN_PACK_BUILD:-build-cuda}"
out=${KILN_PACK_OUT:-$PWD/../.gpu/build.tar.xz}
mkdir -p "$(dirname "$out")"
files="CMakeCache.txt tools/kiln/kiln tests/cuda/kiln_cuda_gpu_tests tests/cuda/kiln_cuda_kernels_gpu_tests tests/cuda/kiln_cuda_fallback_gpu_tests tests/cuda/kiln_cuda_conditional_gpu_tests tests/cuda/kiln_cuda_recurrent_gpu_tests tests/cuda/kiln_cuda_codegen_tests tests/conformance/kiln_conformance tests/kiln_runtime_only tests/kiln_make_mlp bench/stream/kiln-stream"
files="$files $(find . -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' | sed 's|^\./||')"
# A private staging folder: helpers pack at the same time on one machine.
pack=$(mktemp -d /tmp/gpupack.XXXXXX)
trap 'rm -rf "$pack"' EXIT
tar -cf - $files | tar -xf - -C "$pack"
for b in tools/kiln/kiln tests/cuda/kiln_cuda_gpu_tests tests/cuda/kiln_cuda_kernels_gpu_tests tests/cuda/kiln_cuda_fallback_gpu_tests tests/cuda/kiln_cuda_conditional_gpu_tests tests/cuda/kiln_cuda_recurrent_gpu_tests tests/cuda/kiln_cuda_codegen_tests tests/conformance/kiln_conformance tests/kiln_runtime_only tests/kiln_make_mlp bench/stream/kiln-stream; do strip "$pack/$b"; done
tar -cJf "$out" -C "$pack" .
ls -la "$out"

#!/bin/bash
# Runs on the GPU machine, from the repo root, with .gpu carried there:
# unpacks the Debian runtime libraries (.gpu/debs/*.deb, dpkg -x into
# /tmp/debs, never /) and the packed build-cuda, finds the CUDA libraries,
# then runs its arguments, e.g.
#   scripts/device/remote.sh scripts/gpu_check.sh build-cuda
# (KILN_SKIP_CODEGEN=1 skips the CPU-only codegen tests it runs first.)
# Logs go to $OUT/logs. See scripts/device/README.md.
cd "$(dirname "$0")/../.."
ROOT=$PWD
mkdir -p /tmp/debs && for f in .gpu/debs/*.deb; do dpkg -x "$f" /tmp/debs; done
mkdir -p build-cuda && tar -xJf .gpu/build.tar.xz -C build-cuda
[ -e /work/main ] || { mkdir -p /work; ln -s "$ROOT" /work/main; }
extra=""
for l in libcublasLt.so.13 libcudart.so.13 libnvrtc.so.13 libcuda.so.1 libcudnn.so.9 libnvrtc-builtins.so.13.0; do
  if ! ldconfig -p | grep -q "$l"; then
    p=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
    [ -n "$p" ] && extra="$extra:$(dirname "$p")"
    echo "$l -> ${p:-NOT FOUND}"
  fi
done
export LD_LIBRARY_PATH=/tmp/debs/usr/lib/x86_64-linux-gnu${extra}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldd build-cuda/tools/kiln/kiln | grep -i "not found"
mkdir -p "$OUT/logs"
# KILN_SKIP_CODEGEN=1: leave out the CPU-only codegen tests (device time).
[ "${KILN_SKIP_CODEGEN:-0}" = 1 ] || ( build-cuda/tests/cuda/kiln_cuda_codegen_tests 2>&1 | tail -15 ) | tee "$OUT/logs/codegen.log"
export KILN_GPU_LOG_DIR=$OUT/logs
"$@"

#!/usr/bin/env bash
# oneDNN 2.6 (Debian bookworm's libdnnl-dev, what kiln links) against oneDNN 3.2
# (Intel's PyPI wheels onednn-cpu-gomp / onednn-devel-cpu-gomp 2023.2.0, GNU
# OpenMP like Debian's) on ResNet-50's convolution shapes, batch 1, float32,
# layouts left to oneDNN (format_tag::any), ReLU fused, 2 OpenMP threads:
# median of 200 runs per shape, GFLOP/s and the implementation each picks.
# Asks whether moving kiln's cpu target to oneDNN 3.x (brgemm convolutions on
# AVX2) would close the dense-convolution gap to ONNX Runtime.
# Usage: bench/onednn_versions/run.sh [WORKDIR]   (needs PyPI; nothing installed system-wide)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-/tmp/onednn_versions}
mkdir -p "$work/wheels" "$work/x"
py=${PYTHON:-$( [ -x "$here/../../.venv/bin/python" ] && echo "$here/../../.venv/bin/python" || command -v python3 )}
"$py" -m pip download --quiet --no-deps -d "$work/wheels" onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
for w in "$work"/wheels/onednn*gomp*.whl; do (cd "$work/x" && "$py" -m zipfile -e "$w" .); done
inc=$(find "$work/x" -path '*data/include' -type d | head -1)
lib=$(dirname "$(find "$work/x" -name 'libdnnl.so.3*' | head -1)")
g++ -O2 -std=c++17 "$here/conv.cpp" -o "$work/conv26" -ldnnl
g++ -O2 -std=c++17 -I"$inc" "$here/conv.cpp" -o "$work/conv32" -L"$lib" -l:libdnnl.so.3 -Wl,-rpath,"$lib"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for round in 1 2; do
  echo "== round $round: oneDNN $(dpkg-query -W -f='${Version}' libdnnl-dev 2>/dev/null || echo 2.x) (Debian)"
  "$work/conv26"
  echo "== round $round: oneDNN 3.2 (PyPI onednn-cpu-gomp 2023.2.0)"
  "$work/conv32"
done

#!/bin/bash
# The kiln ONNX Runtime plugin EP on the GPU machine (issue #18): installs a
# kiln wheel built here with CUDA for that machine's Python 3.12 (it holds
# kiln/lib/libkiln_ort_ep.so) and runs scripts/device/ort_ep_gpu.py with the
# machine's own onnxruntime (the PyPI CPU wheel; >= 1.24). Same carried
# folder as python_gpu.sh ($KILN_PY_GPU_DIR, default .gpu/pygpu: the wheel
# and debs/*.deb). Output: $OUT/ort_ep_gpu.json, $OUT/ort_ep_gpu.log.
# Extra arguments go to ort_ep_gpu.py (e.g. --runs 200 --models resnet50).
# KILN_ORT_EP_GPU_SCRIPT (a path from the repository root) runs another
# script the same way, e.g. bench/ort_ep_io.py (the EP's output paths against
# kiln's Session); its JSON is then $OUT/<script name>.json.
set -uo pipefail
T0=$(date +%s)
DIR=${KILN_PY_GPU_DIR:-.gpu/pygpu}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

mkdir -p /tmp/debs && for f in "$DIR"/debs/*.deb; do dpkg -x "$f" /tmp/debs; done
# CUDA libraries: torch's own (pip nvidia-*) first, as python_gpu.sh does.
SP=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
libdirs=/tmp/debs/usr/lib/x86_64-linux-gnu
for l in libcudnn.so.9 libcublasLt.so.13 libcudart.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
  p=$(find "$SP/nvidia" -name "$l" 2>/dev/null | head -1)
  [ -n "$p" ] || p=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
  [ -n "$p" ] && case ":$libdirs:" in *":$(dirname "$p"):"*) ;; *) libdirs="$libdirs:$(dirname "$p")";; esac
done
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

rm -rf /tmp/kilnpy
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kilnpy "$DIR"/kiln_onnx-*.whl || exit 1
export PYTHONPATH=/tmp/kilnpy${PYTHONPATH:+:$PYTHONPATH}
ldd /tmp/kilnpy/kiln/lib/libkiln_ort_ep.so | grep "not found" && exit 1
python3 -c "import onnxruntime, kiln.ort; print('onnxruntime', onnxruntime.__version__, 'plugin', kiln.ort.get_library_path())" || exit 1
uname -r
log "installed"
SCRIPT=$HERE/ort_ep_gpu.py
[ -n "${KILN_ORT_EP_GPU_SCRIPT:-}" ] && SCRIPT=$(cd "$HERE/../.." && pwd)/$KILN_ORT_EP_GPU_SCRIPT
NAME=$(basename "$SCRIPT" .py)
PYTHONUNBUFFERED=1 timeout 540 python3 "$SCRIPT" --out "$OUT/$NAME.json" "$@" 2>&1 | tee "$OUT/$NAME.log"
rc=${PIPESTATUS[0]}
log "$NAME.py exit $rc"
exit "$rc"

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

# The wheel, the Debian libraries and torch's CUDA libraries (kilnpy_env.sh).
source "$HERE/kilnpy_env.sh"
kilnpy_setup "$DIR" || exit 1
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

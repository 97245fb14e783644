#!/bin/bash
# The Python package on the GPU machine (issue #19): installs a kiln wheel
# built here with CUDA for that machine's Python (3.12), then runs
# python/tests/test_cuda.py and scripts/device/python_gpu.py (ResNet-50 fp16
# through DLPack, torch.profiler, latency against C++ run_device, 8 threads,
# 4 processes). Run from the repo root through the device tool, with
# $KILN_PY_GPU_DIR (default .gpu/pygpu) carried; it holds
#   kiln_onnx-*-cp312-*.whl   (scripts/device/README.md, "The Python package on the GPU")
#   debs/*.deb                the Debian runtime libraries (libdnnl2 libfmt9 ...)
#   models/demo.onnx          the dev model python/tests/test_cuda.py uses
# Output: $OUT/python_gpu.json, $OUT/python_gpu.log, $OUT/pytest_cuda.log.
# Extra arguments go to python_gpu.py (e.g. --runs-per-thread 200).
set -uo pipefail
T0=$(date +%s)
DIR=${KILN_PY_GPU_DIR:-.gpu/pygpu}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

log "toolchain here (could kiln build here instead?):"
{ g++ --version 2>&1 | head -1; cmake --version 2>&1 | head -1; ninja --version 2>&1 | head -1
  python3 -c "import sys, sysconfig, os; print('python', sys.version.split()[0], 'Python.h', os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
  python3 -c "import nanobind, scikit_build_core; print('nanobind', nanobind.__version__, 'scikit-build-core', scikit_build_core.__version__)" 2>&1 | tail -1
  for h in fmt/format.h spdlog/spdlog.h nlohmann/json.hpp oneapi/dnnl/dnnl.hpp onnx/onnx_pb.h google/protobuf/message.h flatbuffers/flatbuffers.h; do
    [ -e /usr/include/$h ] || echo "missing header: $h"; done; } 2>&1 | sed 's/^/  /'

# The wheel, the Debian libraries and torch's CUDA libraries (kilnpy_env.sh).
source "$HERE/kilnpy_env.sh"
kilnpy_setup "$DIR" || exit 1
log "installed"

# KILN_PY_TESTS: another copy of python/tests (conftest.py and test_cuda.py), e.g. one carried in $DIR.
KILN_MODELS_DIR=$PWD/$DIR/models timeout 180 python3 -m pytest -q -p no:cacheprovider -rs "${KILN_PY_TESTS:-python/tests}/test_cuda.py" \
  2>&1 | tee "$OUT/pytest_cuda.log" | tail -8
log "pytest done"

PYTHONUNBUFFERED=1 timeout 400 python3 "$HERE/python_gpu.py" --kiln-cli "$KILN" --out "$OUT/python_gpu.json" "$@" \
  2>&1 | tee "$OUT/python_gpu.log"
rc=${PIPESTATUS[0]}
log "python_gpu.py exit $rc"
exit "$rc"

#!/usr/bin/env bash
# The ONNX Runtime plugin EP (ort_ep/, libkiln_ort_ep.so) loaded into the real
# onnxruntime from PyPI, twice: the newest release (the project venv .venv
# pins it: requirements.txt) and 1.24.4, the oldest kiln supports (a venv
# build/ort-1.24.4, made here when missing; pip's cache keeps it offline-fast).
# Both runs share one kiln cache directory (build/ort_ep_cache): the second
# onnxruntime loads the partitions the first compiled.
# Run by scripts/test.sh after CTest (KILN_SKIP_ORT_EP_TESTS=1 leaves it out),
# or alone once scripts/build.sh has built build/.
# Environment: KILN_ORT_EP_PYTEST_ARGS (extra pytest arguments, e.g. "-k demo").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$(date +%s)
step() { echo "== test_ort_ep: $1 (+$(($(date +%s) - T0)) s)"; }
fail() { echo "test_ort_ep: FAILED: $*" >&2; exit 1; }

LIB=$ROOT/build/ort_ep/libkiln_ort_ep.so
[ -f "$LIB" ] || fail "$LIB is not built (run scripts/build.sh first)"
OLD=1.24.4
OLD_VENV=$ROOT/build/ort-$OLD

step "dev models (tools/models/prepare.py; idempotent)"
.venv/bin/python tools/models/prepare.py --dir .models >/dev/null

if ! "$OLD_VENV/bin/python" -c "import onnxruntime, sys; sys.exit(onnxruntime.__version__ != '$OLD')" 2>/dev/null; then
  step "venv $OLD_VENV with onnxruntime $OLD"
  rm -rf "$OLD_VENV"
  /usr/bin/python3 -m venv --system-site-packages "$OLD_VENV"
  "$OLD_VENV/bin/python" -m pip install -q --disable-pip-version-check "onnxruntime==$OLD" \
    $(grep -E '^(numpy|onnx==|pytest==)' requirements.txt)
fi

export KILN_ORT_EP_LIB=$LIB KILN_ORT_EP_CACHE=$ROOT/build/ort_ep_cache
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
rm -rf "$KILN_ORT_EP_CACHE"
for py in "$ROOT/.venv/bin/python" "$OLD_VENV/bin/python"; do
  v=$("$py" -c "import onnxruntime; print(onnxruntime.__version__)")
  step "pytest ort_ep/tests with onnxruntime $v"
  set +e
  (cd ort_ep/tests && "$py" -m pytest -q -rs -s -p no:cacheprovider -W ignore::UserWarning ${KILN_ORT_EP_PYTEST_ARGS:-} .) \
    | grep -v '^$'
  rc=${PIPESTATUS[0]}
  set -e
  [ $rc -ne 5 ] || fail "pytest collected no tests (onnxruntime $v)"
  [ $rc -eq 0 ] || fail "pytest exited $rc (onnxruntime $v)"
done
step "done"

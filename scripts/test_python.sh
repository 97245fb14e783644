#!/usr/bin/env bash
# The Python package and the installed C++ SDK (run by scripts/test.sh after
# CTest, or alone once scripts/build.sh has built build/):
#  1. a fresh venv (build/pyvenv; --system-site-packages for Debian's numpy)
#     with the test tools pinned in requirements.txt, `pip install .` of this
#     repository (scikit-build-core drives CMake in build-py/; the compiles
#     replay the main build's ccache: cmake/skbuild.cmake), then pytest
#     python/tests against the installed package (no tests collected = failure);
#  2. `cmake --install build` into a temporary prefix, examples/cpp configured
#     against it with find_package(kiln), built, run, and its outputs compared
#     with ONNX Runtime; the runtime-only program must carry no protobuf, ONNX
#     importer or compiler passes.
# Prints how long each step took and the pip build's ccache hits.
# Environment: KILN_PYTEST_ARGS (extra pytest arguments, e.g. "-k demo").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/build/pyvenv
T0=$(date +%s)
step() { echo "== test_python: $1 (+$(($(date +%s) - T0)) s)"; }
fail() { echo "test_python: FAILED: $*" >&2; exit 1; }

[ -x build/tools/kiln/kiln ] || fail "build/ is not built (run scripts/build.sh first)"

step "dev models (tools/models/prepare.py; idempotent)"
.venv/bin/python tools/models/prepare.py --dir .models >/dev/null

step "fresh venv $VENV with the test tools"
rm -rf "$VENV"
/usr/bin/python3 -m venv --system-site-packages "$VENV"
# shellcheck disable=SC2046
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  $(grep -E '^(onnx|onnxruntime|pytest)==' requirements.txt)

step "pip install . (scikit-build-core, build dir build-py/, ccache)"
hits() { ccache --print-stats 2>/dev/null | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ {h += $2} $1 == "cache_miss" {m = $2} END {print h + 0, m + 0}'; }
read -r h0 m0 < <(hits)
t=$(date +%s)
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check . >build/pip_install.log 2>&1; then
  tail -40 build/pip_install.log
  fail "pip install . (log: build/pip_install.log)"
fi
read -r h1 m1 < <(hits)
echo "test_python: pip install . took $(($(date +%s) - t)) s; ccache: $((h1 - h0)) hits, $((m1 - m0)) misses"

step "pytest python/tests (against the installed package)"
set +e
# From build/: the repository root must not shadow the installed package.
(cd build && "$VENV/bin/python" -m pytest "$ROOT/python/tests" -q -rs -p no:cacheprovider ${KILN_PYTEST_ARGS:-})
rc=$?
set -e
[ $rc -ne 5 ] || fail "pytest collected no tests"
[ $rc -eq 0 ] || fail "pytest exited $rc"

step "C++ SDK: cmake --install build into a temporary prefix"
PREFIX=$(mktemp -d "${TMPDIR:-/tmp}/kiln-sdk.XXXXXX")
trap 'rm -rf "$PREFIX"' EXIT
cmake --install build --prefix "$PREFIX/usr" >"$PREFIX/install.log"
for f in include/kiln/session.h lib/cmake/kiln/kilnConfig.cmake bin/kiln; do
  [ -e "$PREFIX/usr/$f" ] || fail "cmake --install did not install $f"
done

step "examples/cpp built against it (find_package(kiln))"
EX=$PREFIX/example
cmake -S examples/cpp -B "$EX" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >"$PREFIX/configure.log" || { cat "$PREFIX/configure.log"; fail "configure examples/cpp"; }
cmake --build "$EX" >"$PREFIX/build.log" || { cat "$PREFIX/build.log"; fail "build examples/cpp"; }
"$EX/kiln_example_compile" .models/demo.onnx "$PREFIX/demo.kiln"
"$EX/kiln_example_run" "$PREFIX/demo.kiln" | tee "$PREFIX/run.txt"
.venv/bin/python examples/cpp/check_example.py .models/demo.onnx "$PREFIX/run.txt"
"$PREFIX/usr/bin/kiln" check "$PREFIX/demo.kiln"

step "the runtime-only program links no compiler code"
bin=$EX/kiln_example_run
if ldd "$bin" | grep -E 'protobuf|libonnx|nvrtc'; then fail "$bin links protobuf / ONNX / NVRTC (above)"; fi
if nm -C "$bin" | grep -E 'kiln::onnx_import::|kiln::passes::|kiln::targets::cuda::nvrtc_' | head -3 | grep .; then
  fail "$bin contains importer, pass or NVRTC code (above)"
fi
# A runtime-only consumer: find_package(kiln COMPONENTS runtime) needs no protobuf / ONNX package.
cmake -S examples/cpp -B "$EX-rt" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX/usr" -DKILN_EXAMPLE_RUNTIME_ONLY=ON \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$EX-rt" >/dev/null
"$EX-rt/kiln_example_run" "$PREFIX/demo.kiln" | grep '^output ' >"$PREFIX/run_rt.txt"
grep '^output ' "$PREFIX/run.txt" | cmp -s - "$PREFIX/run_rt.txt" || fail "the runtime-only build printed other outputs"

echo "test_python: PASSED in $(($(date +%s) - T0)) s (pip install ., pytest, C++ SDK install and example)"

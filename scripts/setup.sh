#!/usr/bin/env bash
# Installs everything kiln needs on a fresh Debian bookworm machine (run as root,
# or with the packages already present): the C++ toolchain and libraries from
# Debian, and a Python venv (.venv) with the test tooling from PyPI.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libprotobuf-dev protobuf-compiler libonnx-dev
  libflatbuffers-dev flatbuffers-compiler libxxhash-dev libzstd-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # libdnnl-dev's CMake config calls find_package(OpenCL); Debian lists the
  # OpenCL headers/loader only as a recommendation, which --no-install-recommends skips.
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
  python3 python3-venv python3-pip python3-numpy python3-torch python3-torchvision
  unzip
  clang libclang-rt-14-dev libomp-dev
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: need root to apt-get install the packages above" >&2; exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The venv sees Debian's torch/torchvision/numpy (CPU, 1.13), which are far
# lighter than PyPI's CUDA wheels; numpy stays < 2 because that torch is built
# against numpy 1.x.
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
if ! "$VENV/bin/python" -c "import sys; sys.exit(0 if open('requirements.txt').read()==open('$VENV/.kiln-req').read() else 1)" 2>/dev/null; then
  echo "setup: installing Python test tooling (requirements.txt)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
  cp requirements.txt "$VENV/.kiln-req"
fi
echo "setup: done"

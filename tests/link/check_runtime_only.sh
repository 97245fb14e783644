#!/usr/bin/env bash
# The run side never links the compile side (DESIGN.md): the runtime-only
# program must not depend on protobuf or libonnx, nor contain the importer or
# the passes; and it must load and run an artifact.
set -euo pipefail
bin=$1 kiln=$2 model=$3 tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ldd "$bin" | grep -E 'protobuf|libonnx'; then
  echo "FAIL: $bin links protobuf/onnx (above)"; exit 1
fi
# NVRTC is compile-side only (the cuda target compiles kernels ahead of time).
if ldd "$bin" | grep -E 'nvrtc'; then
  echo "FAIL: $bin links NVRTC (above)"; exit 1
fi
if nm -C "$bin" | grep -E 'kiln::targets::cuda::nvrtc_|kiln::targets::cuda::lower_' | head -3 | grep .; then
  echo "FAIL: $bin contains cuda compile-side code (above)"; exit 1
fi
if nm -C "$bin" | grep -E 'kiln::onnx_import::|kiln::passes::' | head -3 | grep .; then
  echo "FAIL: $bin contains importer or pass code (above)"; exit 1
fi
"$kiln" compile "$model" -o "$tmp/m.kiln" --shape x=2x4 >/dev/null
out=$("$bin" "$tmp/m.kiln")
echo "$out"
[ "$out" = "y float32[2,3]" ] || { echo "FAIL: unexpected output"; exit 1; }
echo "PASS: runtime-only program links no compiler code and runs an artifact"

#!/bin/bash
# Sourced by the device scripts that use the kiln Python package on the GPU
# machine (python_gpu.sh, ort_ep_gpu.sh, gpu_zoo.sh): `kilnpy_setup DIR`
# unpacks DIR/debs/*.deb (kiln's Debian runtime libraries) into /tmp/debs,
# puts torch's own CUDA libraries (site-packages/nvidia: cuDNN, cuBLASLt,
# cudart, NVRTC) first on LD_LIBRARY_PATH, so that kiln's extension, its
# command line and torch in one process share one cuDNN, and installs the
# wheel DIR/kiln_onnx-*.whl into /tmp/kilnpy (pip --no-index --target).
# Exports LD_LIBRARY_PATH, PYTHONPATH and KILN (the command line); returns 1
# when the install fails or a library is missing.
kilnpy_setup() {
  local dir=$1 sp libdirs l p
  mkdir -p /tmp/debs && for f in "$dir"/debs/*.deb; do dpkg -x "$f" /tmp/debs; done
  sp=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
  libdirs=/tmp/debs/usr/lib/x86_64-linux-gnu
  for l in libcudnn.so.9 libcublasLt.so.13 libcudart.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0; do
    p=$(find "$sp/nvidia" -name "$l" 2>/dev/null | head -1)
    [ -n "$p" ] || p=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
    echo "  $l -> ${p:-NOT FOUND}"
    [ -n "$p" ] && case ":$libdirs:" in *":$(dirname "$p"):"*) ;; *) libdirs="$libdirs:$(dirname "$p")";; esac
  done
  export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  rm -rf /tmp/kilnpy
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kilnpy "$dir"/kiln_onnx-*.whl || return 1
  export PYTHONPATH=/tmp/kilnpy${PYTHONPATH:+:$PYTHONPATH}
  export KILN=/tmp/kilnpy/bin/kiln
  if ldd /tmp/kilnpy/kiln/_kiln*.so "$KILN" | grep "not found"; then return 1; fi
  python3 -c "import kiln; print('kiln', kiln.__version__, 'cuda', kiln.has_cuda(), kiln.__file__)" || return 1
}

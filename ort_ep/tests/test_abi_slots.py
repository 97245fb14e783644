"""ort_ep/ort_abi.h declares ORT's C ABI from its documentation; a miscounted
slot shows only when it is called. This test runs, in a fresh process of the
onnxruntime under test, sessions that use every declared OrtApi / OrtEpApi /
OrtModelEditorApi slot and every callback kiln fills (EPContext write and
read, embedded and external, an If with Constant branches, a declined
operator, the compatibility check), then asks the plugin which declared slots
were never called: the answer must be none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Declared slots that only a GPU device reaches (matching it to a CUDA device).
GPU_ONLY = {"OrtApi::GetKeyValue", "OrtApi::HardwareDevice_Metadata"}

EXERCISE = r"""
import ctypes, gc, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import conftest, ep_models
from onnxruntime.capi import onnxruntime_pybind11_state as C
rt = conftest.ort()
d = Path(tempfile.mkdtemp())
opts = {"cache_dir": str(d / "cache")}
sessions = []
def run(path, feeds, level="all", options=None, config=None):
    o = dict(opts); o.update(options or {})
    s = conftest.kiln_session(path, conftest.session_options(level, options=o, config=config))
    s.run(None, feeds)
    sessions.append(s)
conv = d / "conv.onnx"; feeds = ep_models.conv_net(conv)
for level in ("all", "off"):
    run(conv, feeds, level)
iff = d / "if.onnx"; run(iff, ep_models.with_if(iff), "off")
roi = d / "roi.onnx"; run(roi, ep_models.with_op_kiln_lacks(roi))
for embed in ("1", "0"):
    ctx = d / f"ctx{embed}.onnx"
    run(conv, feeds, config={"ep.context_enable": "1", "ep.context_file_path": str(ctx), "ep.context_embed_mode": embed})
    run(ctx, feeds)
import onnx
info = {p.key: p.value for p in onnx.load(str(d / "ctx1.onnx")).metadata_props}["ep_compatibility_info." + conftest.EP_NAME]
C.get_model_compatibility_for_ep_devices(conftest.kiln_devices(), info)
try:  # an error ORT gets from kiln (OrtApi::CreateStatus)
    conftest.kiln_session(conv, conftest.session_options("all", options={"precision": "fp64"}))
    raise SystemExit("a bad option was accepted")
except Exception as e:
    assert "precision" in str(e), e
del sessions[:]
gc.collect()
lib = ctypes.CDLL(str(conftest.LIB))
lib.KilnOrtEpUncalledSlots.restype = ctypes.c_char_p
print("UNCALLED:" + lib.KilnOrtEpUncalledSlots().decode())
"""


def test_every_declared_slot_is_called(lib):
    r = subprocess.run([sys.executable, "-c", EXERCISE, str(HERE)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [l for l in r.stdout.splitlines() if l.startswith("UNCALLED:")]
    assert line, r.stdout[-2000:]
    uncalled = [x for x in line[-1][len("UNCALLED:"):].split(",") if x]
    import onnxruntime

    from conftest import kiln_devices

    if not any("GPU" in str(d.device.type) for d in kiln_devices()):
        # Slots read only for a GPU device (its PCI bus id): they can be called
        # only on a machine with an NVIDIA GPU (scripts/device/ort_ep_gpu.sh).
        gpu_only = [x for x in uncalled if x in GPU_ONLY]
        uncalled = [x for x in uncalled if x not in GPU_ONLY]
        print(f"\nnot checked here (no GPU device): {', '.join(gpu_only) or 'none'}")
    assert not uncalled, f"declared in ort_abi.h but never called under onnxruntime {onnxruntime.__version__}: {uncalled}"

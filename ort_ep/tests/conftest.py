"""Shared helpers of the kiln plugin EP tests (scripts/test_ort_ep.sh runs them
once per onnxruntime version: the newest on PyPI and 1.24.4, the oldest kiln
supports).

The plugin library is KILN_ORT_EP_LIB (default: build/ort_ep/libkiln_ort_ep.so);
the dev models are in .models (tools/models/prepare.py); KILN_ORT_EP_CACHE is
the kiln cache directory the sessions share (a second onnxruntime version's
run loads what the first compiled).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "models"))
sys.path.insert(0, str(ROOT / "tests" / "models"))

EP_NAME = "KilnExecutionProvider"
PREFIX = "ep.kilnexecutionprovider."
LIB = Path(os.environ.get("KILN_ORT_EP_LIB", ROOT / "build" / "ort_ep" / "libkiln_ort_ep.so")).resolve()
MODELS = Path(os.environ.get("KILN_MODELS_DIR", ROOT / ".models"))
CACHE = Path(os.environ.get("KILN_ORT_EP_CACHE", ROOT / "build" / "ort_ep_cache"))

_registered = False


def ort():
    """onnxruntime with the kiln plugin registered (once per process)."""
    import onnxruntime

    global _registered
    if not _registered:
        onnxruntime.register_execution_provider_library("kiln", str(LIB))
        _registered = True
    return onnxruntime


def kiln_devices():
    rt = ort()
    return [d for d in rt.get_ep_devices() if d.ep_name == EP_NAME]


def session_options(opt_level="all", options=None, config=None, record=True):
    """SessionOptions with the kiln EP (CPU device) appended with `options`."""
    rt = ort()
    so = rt.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = {
        "all": rt.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "off": rt.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[opt_level]
    if record:
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    opts = {"cache_dir": str(CACHE)}
    opts.update(options or {})
    so.add_provider_for_devices(kiln_devices(), {k: v for k, v in opts.items() if v is not None})
    return so


def kiln_session(path, so):
    """InferenceSession with ORT's silent retries on other providers turned off
    (onnxruntime's Python class re-creates a session on the CPU EP when the
    chosen EP fails, at creation and at run: a kiln failure must fail the
    test, not fall back)."""
    sess = ort().InferenceSession(str(path), so, enable_fallback=0)
    sess.disable_fallback()
    return sess


def assignment(sess):
    """{ep name: [op types]} of the session's nodes."""
    out = {}
    for sub in sess.get_provider_graph_assignment_info():
        out.setdefault(sub.ep_name, []).extend(n.op_type for n in sub.get_nodes())
    return out


def reference(model_path, feeds):
    rt = ort()
    so = rt.SessionOptions()
    so.log_severity_level = 3
    ref = rt.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return [o.name for o in ref.get_outputs()], ref.run(None, feeds)


def feeds_for(name, model_path):
    from inputs import make_inputs

    rt = ort()
    so = rt.SessionOptions()
    so.log_severity_level = 3
    s = rt.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return make_inputs(name, [(i.name, i.type, i.shape) for i in s.get_inputs()])


def assert_close(got, want, rtol=1e-3, atol=1e-4, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    if want.dtype.kind in "fc":
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = err > atol + rtol * np.abs(want.astype(np.float64))
        assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} elements differ, max abs err {err.max():.3g}"
    else:
        assert (got == want).all(), f"{what}: values differ"


@pytest.fixture(scope="session")
def lib():
    if not LIB.is_file():
        pytest.fail(f"{LIB} does not exist: build the target kiln_ort_ep first")
    return LIB

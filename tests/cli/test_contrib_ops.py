"""ONNX Runtime contrib operators (domain com.microsoft) through the command line:
import, shape inference, the cpu target's kernel (kiln.cpu.DynamicQuantizeLSTM
where oneDNN multiplies int8 exactly, i.e. with VNNI / AMX; else the reference
fallback, listed with its reason) and the result against ONNX Runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

from clihelp import assert_error

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from small_models import dq_lstm_model as _dq_lstm_model  # noqa: E402


def _int8_exact_cpu() -> bool:
    """True when this CPU has VNNI: the cpu target then lowers the quantized operators."""
    from pathlib import Path

    flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    return any(f in flags.split() for f in ("avx512_vnni", "avx_vnni"))


def test_dynamic_quantize_lstm_runs_on_cpu_and_matches_ort(kiln, tmp_path):
    model = _dq_lstm_model(tmp_path / "dq_lstm.onnx")
    x = np.random.RandomState(3).uniform(-1, 1, (6, 1, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out", "--json")
    assert res.rc == 0, res.describe()
    j = res.json()
    assert j["target"] == "cpu"
    reasons = {r["op"]: r["reason"] for r in j["reference_nodes"]}
    # The cpu target's kernel, not a reference node: its integer products on
    # oneDNN's int8 matmul with VNNI, and without VNNI on its float32 one
    # (exact there: these weights' sums are far below 2^24 / 255).
    assert "DynamicQuantizeLSTM" not in reasons, reasons
    assert [o["shape"] for o in j["outputs"]] == [[6, 2, 1, 4], [2, 1, 4], [2, 1, 4]]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    refs = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    # ONNX Runtime is an exact oracle only with VNNI. Without it (AVX2: this
    # project's AMD EPYC machines), MLAS multiplies uint8 by int8 with
    # vpmaddubsw, whose int16 pair sums saturate (ORT's quantization docs:
    # reduce_range on non-VNNI machines), while kiln's int32 products are
    # exact: 8.6e-3 apart on y there. The looser bound still catches a wrong
    # gate order or scale (those move y by its own magnitude, 0.03-0.3).
    atol, rtol = (1e-4, 1e-3) if _int8_exact_cpu() else (2e-2, 0.0)
    for name, ref in zip(("y", "y_h", "y_c"), refs):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.shape == ref.shape
        assert np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref)), (name, np.abs(got - ref).max())


def test_dynamic_quantize_lstm_layout_1_is_refused_naming_the_attribute(kiln, tmp_path):
    model = _dq_lstm_model(tmp_path / "dq_lstm_layout1.onnx", layout=1)
    x = np.zeros((2, 1, 5), np.float32)
    np.save(tmp_path / "x.npy", x)
    res = kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert_error(res, 5, "qlstm", "layout")

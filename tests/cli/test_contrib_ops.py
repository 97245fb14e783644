"""ONNX Runtime contrib operators (domain com.microsoft) through the command line:
import, shape inference, the cpu target's reference fallback (listed with its
reason) and the result against ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clihelp import assert_error

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _dq_lstm_model(path: Path, layout: int | None = None) -> Path:
    """Bidirectional DynamicQuantizeLSTM, int8 per-tensor weights, X [seq, 1, 5]
    with a symbolic seq, hidden 4, bias and initial states."""
    rng = np.random.default_rng(7)
    dirs, inp, hidden = 2, 5, 4
    inits = {
        "W": rng.integers(-127, 128, (dirs, inp, 4 * hidden)).astype(np.int8),
        "R": rng.integers(-127, 128, (dirs, hidden, 4 * hidden)).astype(np.int8),
        "B": rng.uniform(-0.5, 0.5, (dirs, 8 * hidden)).astype(np.float32),
        "h0": rng.uniform(-1, 1, (dirs, 1, hidden)).astype(np.float32),
        "c0": rng.uniform(-1, 1, (dirs, 1, hidden)).astype(np.float32),
        "W_scale": np.array([0.004, 0.006], np.float32),
        "W_zp": np.zeros(dirs, np.int8),
        "R_scale": np.array([0.005, 0.003], np.float32),
        "R_zp": np.zeros(dirs, np.int8),
    }
    attrs = {"hidden_size": hidden, "direction": "bidirectional"}
    if layout is not None:
        attrs["layout"] = layout
    node = helper.make_node("DynamicQuantizeLSTM",
                            ["x", "W", "R", "B", "", "h0", "c0", "", "W_scale", "W_zp", "R_scale", "R_zp"],
                            ["y", "y_h", "y_c"], name="qlstm", domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], "dq_lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 1, inp])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_dynamic_quantize_lstm_runs_on_cpu_as_a_listed_reference_node_and_matches_ort(kiln, tmp_path):
    model = _dq_lstm_model(tmp_path / "dq_lstm.onnx")
    x = np.random.RandomState(3).uniform(-1, 1, (6, 1, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out", "--json")
    assert res.rc == 0, res.describe()
    j = res.json()
    assert j["target"] == "cpu"
    reasons = {r["op"]: r["reason"] for r in j["reference_nodes"]}
    assert reasons.get("DynamicQuantizeLSTM") == "no cpu kernel for com.microsoft.DynamicQuantizeLSTM", reasons
    assert [o["shape"] for o in j["outputs"]] == [[6, 2, 1, 4], [2, 1, 4], [2, 1, 4]]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    refs = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, ref in zip(("y", "y_h", "y_c"), refs):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.shape == ref.shape
        assert np.all(np.abs(got - ref) <= 1e-4 + 1e-3 * np.abs(ref)), (name, np.abs(got - ref).max())


def test_dynamic_quantize_lstm_layout_1_is_refused_naming_the_attribute(kiln, tmp_path):
    model = _dq_lstm_model(tmp_path / "dq_lstm_layout1.onnx", layout=1)
    x = np.zeros((2, 1, 5), np.float32)
    np.save(tmp_path / "x.npy", x)
    res = kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert_error(res, 5, "qlstm", "layout")

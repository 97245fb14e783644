"""Dynamically quantized layers against ONNX Runtime, value by value
(tools/models/ort_node_diff.py), as ddddocr's common_old.onnx builds them:
DynamicQuantizeLinear -> ConvInteger, a bias quantized at run time with the
activation's scale (Div, Floor, Cast), Cast to float and the scale products;
DynamicQuantizeLinear -> MatMulInteger. Integer arithmetic and the ONNX
definitions leave no room for rounding differences here, so kiln (ref and cpu)
must equal ORT bit for bit at every value; only float activations (ORT's
Sigmoid is MLAS's approximation) may differ, and feeding them from ORT's values
must remove every difference.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import ort_node_diff  # noqa: E402

C_IN, C_OUT = 4, 6


def _quant_block_model(with_sigmoid: bool):
    """x float32 [1, C_IN, 8, 8] -> [Sigmoid(x) * x ->] DynamicQuantizeLinear ->
    ConvInteger 3x3 (uint8 weights, zero point 7) + bias quantized at run time ->
    float -> y [1, C_OUT, 8, 8]; y flattened -> DynamicQuantizeLinear ->
    MatMulInteger (uint8 weights, zero point 3) -> float -> z [1, 5]."""
    rng = np.random.default_rng(11)
    w = rng.integers(0, 256, (C_OUT, C_IN, 3, 3)).astype(np.uint8)
    wm = rng.integers(0, 256, (C_OUT * 64, 5)).astype(np.uint8)
    inits = [numpy_helper.from_array(w, "w_q"), numpy_helper.from_array(np.uint8(7), "w_zp"),
             numpy_helper.from_array(np.float32(0.0123), "w_scale"),
             numpy_helper.from_array(rng.uniform(-2, 2, C_OUT).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array([1, C_OUT, 1, 1], np.int64), "bias_shape"),
             numpy_helper.from_array(np.array([1, C_OUT * 64], np.int64), "flat"),
             numpy_helper.from_array(wm, "wm_q"), numpy_helper.from_array(np.uint8(3), "wm_zp"),
             numpy_helper.from_array(np.float32(0.0071), "wm_scale")]
    nodes = []
    src = "x"
    if with_sigmoid:
        nodes += [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
                  helper.make_node("Mul", ["x", "s"], ["a"], name="swish")]
        src = "a"
    nodes += [
        helper.make_node("DynamicQuantizeLinear", [src], ["a_q", "a_scale", "a_zp"], name="dql_a"),
        helper.make_node("Mul", ["a_scale", "w_scale"], ["b_scale"], name="bias_scale"),
        helper.make_node("Div", ["bias", "b_scale"], ["b_div"], name="bias_div"),
        helper.make_node("Floor", ["b_div"], ["b_floor"], name="bias_floor"),
        helper.make_node("Cast", ["b_floor"], ["b_q"], name="bias_cast", to=TensorProto.INT32),
        helper.make_node("ConvInteger", ["a_q", "w_q", "a_zp", "w_zp"], ["acc"], name="conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["b_q", "bias_shape"], ["b_q4"], name="bias_reshape"),
        helper.make_node("Add", ["acc", "b_q4"], ["acc_b"], name="bias_add"),
        helper.make_node("Cast", ["acc_b"], ["acc_f"], name="acc_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["a_scale", "w_scale"], ["o_scale"], name="out_scale"),
        helper.make_node("Mul", ["acc_f", "o_scale"], ["y"], name="dequant"),
        helper.make_node("Reshape", ["y", "flat"], ["yf"], name="flatten"),
        helper.make_node("DynamicQuantizeLinear", ["yf"], ["y_q", "y_scale", "y_zp"], name="dql_y"),
        helper.make_node("MatMulInteger", ["y_q", "wm_q", "y_zp", "wm_zp"], ["macc"], name="matmul"),
        helper.make_node("Cast", ["macc"], ["macc_f"], name="macc_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["y_scale", "wm_scale"], ["m_scale"], name="m_scale"),
        helper.make_node("Mul", ["macc_f", "m_scale"], ["z"], name="m_dequant"),
    ]
    graph = helper.make_graph(nodes, "quant_block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_OUT, 8, 8]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 5])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _tie_input() -> np.ndarray:
    """Values on a grid of 1/32 in [-4, 11.9375]: DynamicQuantizeLinear's scale
    is (11.9375 + 4) / 255 = 1/16 exactly, so the odd multiples of 1/32 are
    ties (x / scale = k + 0.5) that only round half to even gets right."""
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 383, (1, C_IN, 8, 8)).astype(np.float32) / 32
    x.flat[0], x.flat[1] = -4.0, 11.9375
    return x


def _diff(kiln, model, feeds, target, tmp_path, fed=None):
    exposed = ort_node_diff.expose_all(model)
    ref = ort_node_diff.run_ort(exposed, feeds)
    fed_values = {}
    if fed:
        exposed, fed_values = ort_node_diff.feed_from_ort(exposed, set(fed), ref)
    got = ort_node_diff.run_kiln(kiln.binary, exposed, {**feeds, **fed_values}, target, tmp_path / target)
    return ort_node_diff.compare(exposed, ref, got, fed_values)


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_quantized_conv_and_matmul_block_equals_ort_bit_for_bit_ties_included(kiln, tmp_path, target):
    x = _tie_input()
    v = x * 16  # x / scale
    half_even, half_away = np.rint(v), np.sign(v) * np.floor(np.abs(v) + 0.5)
    assert (half_even != half_away).sum() > 50  # ties that tell the rounding modes apart
    rows = _diff(kiln, _quant_block_model(with_sigmoid=False), {"x": x}, target, tmp_path)
    assert len(rows) == 21, [r.output for r in rows]  # every node output compared
    q = next(r for r in rows if r.output == "a_q")
    assert q.n_diff == 0
    differing = [ort_node_diff.describe(r) for r in rows if r.n_diff != 0]
    assert not differing, differing


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_sigmoid_is_the_only_origin_and_feeding_it_from_ort_removes_every_difference(kiln, tmp_path, target):
    x = np.random.default_rng(2).uniform(-6, 6, (1, C_IN, 8, 8)).astype(np.float32)
    model = _quant_block_model(with_sigmoid=True)
    rows = _diff(kiln, model, {"x": x}, target, tmp_path)
    sig = next(r for r in rows if r.op == "Sigmoid")
    # ORT's Sigmoid (MLAS's rational approximation) and kiln's differ by an
    # ulp or two in part of the elements: within the tolerance, not equal.
    assert 0 < sig.n_diff < sig.size and sig.n_outside == 0 and sig.max_abs < 1e-6, ort_node_diff.describe(sig)
    assert [r.op for r in rows if r.origin] == ["Sigmoid"], [ort_node_diff.describe(r) for r in rows if r.origin]
    assert rows[0].op == "Sigmoid" and rows[0].n_diff
    fed_rows = _diff(kiln, model, {"x": x}, target, tmp_path / "fed", fed=["Sigmoid"])
    assert not any(r.op == "Sigmoid" for r in fed_rows)
    assert len(fed_rows) == len(rows) - 1
    differing = [ort_node_diff.describe(r) for r in fed_rows if r.n_diff != 0]
    assert not differing, differing

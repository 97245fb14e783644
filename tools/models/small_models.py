"""Small ONNX models built with onnx.helper for kiln's tests and device
scripts (no torch needed): a CNN whose input dims can be declared any way an
exporter writes them, a model whose runtime scalar input chooses between
If branches that are valid for different input sizes, and ONNX Runtime's
contrib operator com.microsoft DynamicQuantizeLSTM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, path: Path) -> Path:
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_model(path: Path, dims) -> Path:
    """x[N,3,H,W] -> Conv 3x3 (8 ch) -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> y[N,5].
    `dims` gives x's declared dims: ints, names, -1 or None (no value, no param)."""
    rng = np.random.RandomState(0)
    w = numpy_helper.from_array(rng.randn(8, 3, 3, 3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.randn(8).astype(np.float32), "b")
    g = numpy_helper.from_array(rng.randn(5, 8).astype(np.float32), "g")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    shape = x.type.tensor_type.shape
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int) and d >= 0:
            dim.dim_value = d
        elif isinstance(d, int):
            dim.dim_value = d  # -1, as Paddle writes it
        elif isinstance(d, str):
            dim.dim_param = d
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["y"], transB=1),
    ]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0] if isinstance(dims[0], str) else None, 5])
    graph = helper.make_graph(nodes, "conv", [x], [y], [w, b, g])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def branch_model(path: Path) -> Path:
    """A runtime scalar chooses between branches valid for different input sizes
    (like a VAD whose `sr` 16000 / 8000 selects a branch expecting 512 / 256 samples):
    x[1,n] float, sr int64 scalar; y[1,2] = sr == 16000 ? mean(reshape(x,[1,2,256]), -1)
                                                : 3 * mean(reshape(x,[1,2,128]), -1)."""
    def branch(name, chunk, scale):
        shape = numpy_helper.from_array(np.array([1, 2, chunk], np.int64), f"{name}_shape")
        nodes = [helper.make_node("Reshape", ["x", f"{name}_shape"], [f"{name}_r"]),
                 helper.make_node("ReduceMean", [f"{name}_r"], [f"{name}_m"], axes=[2], keepdims=0)]
        out = f"{name}_m"
        if scale != 1:
            k = numpy_helper.from_array(np.array(scale, np.float32), f"{name}_k")
            nodes.append(helper.make_node("Mul", [out, f"{name}_k"], [f"{name}_s"]))
            out = f"{name}_s"
            inits = [shape, k]
        else:
            inits = [shape]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 2])],
                                 inits)

    rate = numpy_helper.from_array(np.array(16000, np.int64), "rate")
    nodes = [helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["y"], then_branch=branch("then", 256, 1),
                              else_branch=branch("else", 128, 3))]
    graph = helper.make_graph(
        nodes, "vad_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [rate])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def dq_lstm_model(path: Path, layout: int | None = None) -> Path:
    """One com.microsoft DynamicQuantizeLSTM (opset 1): bidirectional, hidden 4,
    int8 per-tensor weights, bias and initial states; x[seq, 1, 5] with a
    symbolic seq -> y[seq, 2, 1, 4], y_h and y_c [2, 1, 4]. `layout` sets
    that attribute (which only 0 is valid for)."""
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
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "dq_lstm", [helper.make_tensor_value_info("x", f, ["seq", 1, inp])],
        [helper.make_tensor_value_info("y", f, ["seq", dirs, 1, hidden]),
         helper.make_tensor_value_info("y_h", f, [dirs, 1, hidden]),
         helper.make_tensor_value_info("y_c", f, [dirs, 1, hidden])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)]), path)

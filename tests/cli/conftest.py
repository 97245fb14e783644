"""Fixtures for the kiln command-line tests.

KILN_BIN: path to the kiln binary (set by tests/cli/CMakeLists.txt; when unset,
  <repo>/build/tools/kiln/kiln is tried).
KILN_MODELS_DIR: where prepare.py wrote demo.onnx (default <repo>/.models);
  when demo.onnx is missing there it is built into a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from clihelp import REPO, Kiln, save_model


@pytest.fixture(scope="session")
def kiln(tmp_path_factory) -> Kiln:
    env_bin = os.environ.get("KILN_BIN")
    binary = Path(env_bin) if env_bin else REPO / "build" / "tools" / "kiln" / "kiln"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"kiln binary {binary} not found or not executable (set KILN_BIN)", pytrace=False)
    xdg = tmp_path_factory.mktemp("xdg-cache")
    return Kiln(binary.resolve(), {"XDG_CACHE_HOME": str(xdg)})


@pytest.fixture(scope="session")
def demo_onnx(tmp_path_factory) -> Path:
    """demo.onnx: image float32 [1,3,64,64] -> probs float32 [1,10]."""
    path = Path(os.environ.get("KILN_MODELS_DIR", REPO / ".models")) / "demo.onnx"
    if path.is_file():
        return path
    from prepare import build_demo

    path = tmp_path_factory.mktemp("models") / "demo.onnx"
    build_demo(path)
    return path


@pytest.fixture(scope="session")
def sigmoid_cancellation(tmp_path_factory):
    """x float32[1,4,8,8] -> a, b = Conv1x1 + 100 (b's weights a's plus up to
    0.05) -> y = Sigmoid(50 * (a - b)) -> out = Conv1x1(y) float32[1,4,8,8]."""
    d = tmp_path_factory.mktemp("verify_sigmoid")
    rng = np.random.default_rng(1)
    wa = rng.uniform(-1, 1, (8, 4, 1, 1)).astype(np.float32)
    wb = (wa + rng.uniform(-0.05, 0.05, wa.shape)).astype(np.float32)
    inits = [numpy_helper.from_array(wa, "Wa"), numpy_helper.from_array(wb, "Wb"),
             numpy_helper.from_array(np.full(8, 100, np.float32), "bias"),
             numpy_helper.from_array(np.array(50, np.float32), "k"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, (4, 8, 1, 1)).astype(np.float32), "Wc")]
    nodes = [helper.make_node("Conv", ["x", "Wa", "bias"], ["a"], name="conv_a", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "Wb", "bias"], ["b"], name="conv_b", kernel_shape=[1, 1]),
             helper.make_node("Sub", ["a", "b"], ["d"], name="sub"),
             helper.make_node("Mul", ["d", "k"], ["s"], name="scale"),
             helper.make_node("Sigmoid", ["s"], ["y"], name="sigmoid"),
             helper.make_node("Conv", ["y", "Wc"], ["out"], name="conv_out", kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "sigmoid_cancellation",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    model = d / "sigmoid_cancellation.onnx"
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    x = d / "x.npy"
    np.save(x, rng.random((1, 4, 8, 8), dtype=np.float32))
    return model, x

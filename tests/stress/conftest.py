"""Fixtures for the cache stress and fault tests (tests/stress).

KILN_BIN: the kiln binary (as for tests/cli). KILN_MLP: the MLP model written
by kiln_make_mlp (tests/CMakeLists.txt, fixture mlp_model); when unset it is
built here with onnx. KILN_MODELS_DIR: where demo.onnx is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
from clihelp import REPO, Kiln  # noqa: E402

# mlp.onnx: y = relu(x @ W + b), W[i][j] = 0.1*(i+1) - 0.2*j, b = [0.5, -0.25, 0]
# (tests/unit/onnx/model_builder.cpp). For X below, by hand:
# row 0: [3.0, 1.0, -1.0] + b -> relu -> [3.5, 0.75, 0]
# row 1: [-0.1, 0.1, 0.3] + b -> relu -> [0.4, 0, 0.3]
MLP_X = np.array([[1, 2, 3, 4], [-1, 0, 0, 0]], dtype=np.float32)
MLP_Y = np.array([[3.5, 0.75, 0.0], [0.4, 0.0, 0.3]], dtype=np.float32)


@pytest.fixture(scope="session")
def kiln(tmp_path_factory) -> Kiln:
    env_bin = os.environ.get("KILN_BIN")
    binary = Path(env_bin) if env_bin else REPO / "build" / "tools" / "kiln" / "kiln"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"kiln binary {binary} not found or not executable (set KILN_BIN)", pytrace=False)
    xdg = tmp_path_factory.mktemp("xdg-cache")
    return Kiln(binary.resolve(), {"XDG_CACHE_HOME": str(xdg)})


def build_mlp(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.array([[0.1 * (i + 1) - 0.2 * j for j in range(3)] for i in range(4)], dtype=np.float32)
    b = np.array([0.5, -0.25, 0.0], dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["h2"]),
         helper.make_node("Relu", ["h2"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="session")
def mlp_onnx(tmp_path_factory) -> Path:
    env = os.environ.get("KILN_MLP")
    if env and Path(env).is_file():
        return Path(env)
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    build_mlp(path)
    return path


@pytest.fixture(scope="session")
def mlp_x(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "x.npy"
    np.save(path, MLP_X)
    return path


@pytest.fixture(scope="session")
def demo_onnx(tmp_path_factory) -> Path:
    path = Path(os.environ.get("KILN_MODELS_DIR", REPO / ".models")) / "demo.onnx"
    if path.is_file():
        return path
    from prepare import build_demo

    path = tmp_path_factory.mktemp("models") / "demo.onnx"
    build_demo(path)
    return path


def big_model(path: Path, megabytes: int) -> Path:
    """y = x * w + c with a `megabytes` MB weight: a compile and a publish
    long enough to be killed in the middle of."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n = megabytes * 1024 * 1024 // 4
    rng = np.random.default_rng(7)
    w = rng.standard_normal(n, dtype=np.float32)
    c = np.float32(0.25) * np.ones(n, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "c"], ["y"])],
        "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path

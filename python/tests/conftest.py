"""Shared fixtures of the kiln Python package tests (python/tests).

Run against an installed kiln (scripts/test_python.sh: a fresh venv, `pip
install .`, then pytest). The dev models come from tools/models/prepare.py
(.models/, or $KILN_MODELS_DIR); a missing one fails its test with the
command that makes it. Nothing is written to the user's cache: $XDG_CACHE_HOME
points into pytest's temporary directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = Path(os.environ.get("KILN_MODELS_DIR", REPO / ".models"))
sys.path.insert(0, str(REPO / "tools" / "models"))
sys.path.insert(0, str(REPO / "tests" / "models"))

import kiln  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory):
    """Every Session without cache_dir uses a cache under pytest's temp dir."""
    home = tmp_path_factory.mktemp("xdg-cache")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(home)
    yield home
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


def model_path(name: str) -> Path:
    """MODELS_DIR/NAME.onnx; fails the test (not skips) when it is missing."""
    p = MODELS_DIR / f"{name}.onnx"
    if not p.is_file():
        pytest.fail(f"{p} does not exist: run .venv/bin/python tools/models/prepare.py --only {name}")
    return p


@pytest.fixture(scope="session")
def demo() -> Path:
    """image float32[1,3,64,64] -> probs float32[1,10] (a small CNN, tools/models/prepare.py)."""
    return model_path("demo")


@pytest.fixture
def demo_input() -> np.ndarray:
    return np.random.default_rng(1).random((1, 3, 64, 64), dtype=np.float32)


def save_model(path: Path, nodes, inputs, outputs, initializers=(), opset: int = 17) -> Path:
    """Writes a small ONNX model built with onnx.helper."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(list(nodes), path.stem, list(inputs), list(outputs), initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture
def add_model(tmp_path) -> Path:
    """z = x + y, x and y float32[batch, 3] (symbolic dim 'batch')."""
    from onnx import TensorProto, helper

    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 3])  # noqa: E731
    return save_model(tmp_path / "add.onnx", [helper.make_node("Add", ["x", "y"], ["z"])], [vi("x"), vi("y")],
                      [vi("z")])


def cli() -> str:
    """The kiln command line installed with the package."""
    from kiln.__main__ import cli_path

    return cli_path()

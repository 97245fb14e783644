"""Fixtures for the kiln command-line tests.

KILN_BIN: path to the kiln binary (set by tests/cli/CMakeLists.txt; when unset,
  <repo>/build/tools/kiln/kiln is tried).
KILN_MODELS_DIR: where prepare.py wrote demo.onnx (default <repo>/.models);
  when demo.onnx is missing there it is built into a temporary directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clihelp import REPO, Kiln


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

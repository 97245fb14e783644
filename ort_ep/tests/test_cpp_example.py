"""examples/ort_session: a C++ ONNX Runtime program (8 intra-op threads,
ORT_ENABLE_ALL, verbose logging) appends the kiln EP with device 0,
precision fp32 and an absolute load path to a .kiln made by `kiln compile`.
It loads without compiling and matches ORT's CPU EP; the precision option
contradicting the artifact is an error naming the option and both values;
an empty save path is an error naming the option; with
SetOptimizedModelFilePath also set, ORT's own error, never a crash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import LIB, MODELS, ROOT, assert_close, ort, reference

EXAMPLE = Path(os.environ.get("KILN_ORT_SESSION_EXAMPLE", ROOT / "build" / "examples" / "ort_session" / "ort_session_example"))
KILN = Path(os.environ.get("KILN_CLI", ROOT / "build" / "tools" / "kiln" / "kiln"))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not EXAMPLE.is_file():
        pytest.fail(f"{EXAMPLE} is not built (target ort_session_example)")
    ortlib = sorted((Path(ort().__file__).parent / "capi").glob("libonnxruntime.so*"))
    assert ortlib, "the onnxruntime wheel has no libonnxruntime.so"
    d = tmp_path_factory.mktemp("ort_session")
    art = (d / "demo.kiln").resolve()
    r = subprocess.run([str(KILN), "compile", str(MODELS / "demo.onnx"), "-o", str(art)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(ortlib[0]), art, d


def run_example(setup, *flags):
    ortlib, art, d = setup
    cmd = [str(EXAMPLE), ortlib, str(LIB), str(MODELS / "demo.onnx"), str(art), "image", "probs", "1,3,64,64",
           "--out", str(d / "out.bin"), *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_loads_the_artifact_without_compiling_and_matches_cpu_ep(lib, setup):
    r = run_example(setup)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-3000:]
    assert "(load_model_path; no compile" in log, log[-3000:]
    assert "compiled and cached" not in log and "compiled in memory" not in log
    x = (np.arange(1 * 3 * 64 * 64) % 17 / 17.0).astype(np.float32).reshape(1, 3, 64, 64)
    _, refs = reference(MODELS / "demo.onnx", {"image": x})
    got = np.fromfile(setup[2] / "out.bin", dtype=np.float32).reshape(refs[0].shape)
    assert_close(got, refs[0], what="probs")
    print("\n" + [l for l in r.stdout.splitlines() if l.startswith("session created")][0])


def test_precision_contradicting_the_artifact_names_option_and_both_values(lib, setup):
    r = run_example(setup, "--precision", "fp16")
    assert r.returncode == 1, r.stdout[-2000:]
    err = [l for l in r.stdout.splitlines() if l.startswith("error:")][0]
    assert "'precision'" in err and "'fp16'" in err and "'fp32'" in err, err


def test_empty_save_path_names_the_option(lib, setup):
    r = run_example(setup, "--save-model-path", "")
    assert r.returncode == 1, r.stdout[-2000:]
    err = [l for l in r.stdout.splitlines() if l.startswith("error:")][0]
    assert "save_model_path" in err and "empty" in err, err


def test_optimized_model_file_path_is_ort_s_error_not_a_crash(lib, setup):
    r = run_example(setup, "--optimized-model-path", str(setup[2] / "optimized.onnx"))
    assert r.returncode == 1, (r.returncode, r.stdout[-2000:])  # a crash would be a signal (negative code)
    err = [l for l in r.stdout.splitlines() if l.startswith("error:")][0]
    # ORT refuses to write an optimized model holding compiled nodes; an EP cannot intercept it.
    assert "compiled nodes" in err, err
    print("\nSetOptimizedModelFilePath: " + err)

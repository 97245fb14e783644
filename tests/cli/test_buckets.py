"""Shape buckets through the command line: --dim on compile and run, kiln
inspect listing the buckets, padding and slicing, the out-of-bucket policy.

Model: y[N,3] = x[N,4] @ W + b with W[i][j] = i - j and b = [1, 2, 3],
built here with the onnx package (N is a dim_param).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clihelp import assert_error

W = np.array([[i - j for j in range(3)] for i in range(4)], np.float32)
B = np.array([1, 2, 3], np.float32)


@pytest.fixture(scope="module")
def batch_onnx(tmp_path_factory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("models") / "batch.onnx"
    onnx.save(m, path)
    return path


def x_of(n: int) -> np.ndarray:
    return (np.arange(n * 4, dtype=np.float32).reshape(n, 4) % 7) * 0.25 - 0.5


def test_compile_with_buckets_and_inspect_lists_them(kiln, batch_onnx, tmp_path):
    out = tmp_path / "b.kiln"
    res = kiln("compile", batch_onnx, "-o", out, "--dim", "N=1..8", "--json")
    assert res.rc == 0, res.describe()
    assert res.json()["programs"] == 4, res.describe()
    res = kiln("inspect", out, "--json")
    assert res.rc == 0, res.describe()
    b = res.json()["buckets"]
    assert b["dims"] == [{"name": "N", "kind": "declared", "min": 1, "max": 8, "sizes": [1, 2, 4, 8], "pad": "batch"}], res.describe()
    assert [p["sizes"] for p in b["programs"]] == [{"N": 1}, {"N": 2}, {"N": 4}, {"N": 8}], res.describe()
    assert all(p["kind"] == "bucket" for p in b["programs"]), res.describe()
    assert res.json()["compat"]["input_signature"] == "x:float32[N,4]", res.describe()
    human = kiln("inspect", out)
    assert human.rc == 0 and "buckets: 4 program(s), constants stored once" in human.stdout, human.describe()
    assert '"pad":"batch"' in human.stdout, human.describe()


def test_padded_run_of_an_artifact_slices_back(kiln, batch_onnx, tmp_path):
    art = tmp_path / "b.kiln"
    assert kiln("compile", batch_onnx, "-o", art, "--dim", "N=2,4").rc == 0
    x = x_of(3)
    np.save(tmp_path / "x.npy", x)
    res = kiln("run", art, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "o", "--json")
    assert res.rc == 0, res.describe()
    y = np.load(tmp_path / "o" / "y.npy")
    assert y.shape == (3, 3)
    np.testing.assert_allclose(y, x @ W + B, rtol=1e-6, atol=1e-6)
    # An explicit artifact cannot compile: 5 rows fit no bucket.
    np.save(tmp_path / "x5.npy", x_of(5))
    res = kiln("run", art, "--input", f"x={tmp_path / 'x5.npy'}")
    assert_error(res, 6, "no program of this artifact can run the input shape (N=5)", "dim 'N' is 5, outside its range")


def test_run_compiles_a_bucket_once_and_caches_it(kiln, batch_onnx, tmp_path):
    cache = tmp_path / "cache"
    np.save(tmp_path / "x.npy", x_of(3))
    args = ("run", batch_onnx, "--dim", "N=1..8", "--input", f"x={tmp_path / 'x.npy'}", "--cache-dir", cache,
            "--output-dir", tmp_path / "o", "--json")
    first = kiln(*args)
    assert first.rc == 0, first.describe()
    assert first.json()["buckets"]["compiled_by_run"] == 1, first.describe()
    assert first.json()["buckets"]["programs"] == [{"N": 4}], first.describe()
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), x_of(3) @ W + B, rtol=1e-6, atol=1e-6)
    second = kiln(*args)
    assert second.rc == 0, second.describe()
    assert second.json()["cache"] == "hit", second.describe()
    assert second.json()["buckets"]["compiled_by_run"] == 0, second.describe()
    # Another bucket set is another cache entry.
    other = kiln("run", batch_onnx, "--dim", "N=1..16", "--input", f"x={tmp_path / 'x.npy'}", "--cache-dir", cache,
                 "--json")
    assert other.rc == 0 and other.json()["cache"] == "miss", other.describe()
    assert other.json()["artifact"] != second.json()["artifact"], other.describe()


def test_out_of_bucket_policy(kiln, batch_onnx, tmp_path):
    cache = tmp_path / "cache"
    np.save(tmp_path / "x9.npy", x_of(9))
    base = ("run", batch_onnx, "--dim", "N=1..8", "--input", f"x={tmp_path / 'x9.npy'}", "--cache-dir", cache)
    res = kiln(*base, "--out-of-bucket", "error")
    assert_error(res, 6, "outside every bucket", "dim 'N' is 9, outside its range 1..8")
    res = kiln(*base, "--output-dir", tmp_path / "o", "--json")
    assert res.rc == 0, res.describe()
    assert res.json()["buckets"]["programs"] == [{"N": 9}], res.describe()
    np.testing.assert_allclose(np.load(tmp_path / "o" / "y.npy"), x_of(9) @ W + B, rtol=1e-6, atol=1e-6)
    again = kiln(*base, "--json")
    assert again.rc == 0 and again.json()["buckets"]["compiled_by_run"] == 0, again.describe()


@pytest.mark.parametrize("spec,needle", [
    ("N", "expected NAME=SPEC"),
    ("N=8,4", "strictly ascending"),
    ("N=1..x", "'x' in '1..x' is not a size"),
    ("batch=1,2", "dims 'batch': the model's inputs have no symbolic dim named 'batch'"),
])
def test_bad_dim_is_a_usage_error(kiln, batch_onnx, tmp_path, spec, needle):
    res = kiln("compile", batch_onnx, "-o", tmp_path / "b.kiln", "--dim", spec)
    assert_error(res, 2, needle)
    assert not (tmp_path / "b.kiln").exists()


def test_cache_explain_takes_the_bucket_set(kiln, batch_onnx, tmp_path):
    cache = tmp_path / "cache"
    np.save(tmp_path / "x.npy", x_of(2))
    run = kiln("run", batch_onnx, "--dim", "N=1..8", "--input", f"x={tmp_path / 'x.npy'}", "--cache-dir", cache,
               "--json")
    assert run.rc == 0, run.describe()
    same = kiln("cache", "explain", batch_onnx, "--dim", "N=1..8", "--cache-dir", cache, "--json")
    assert same.rc == 0, same.describe()
    assert same.json()["status"] == "hit", same.describe()
    assert Path(run.json()["artifact"]).name.startswith(same.json()["key"]), same.describe()
    other = kiln("cache", "explain", batch_onnx, "--dim", "N=1..16", "--cache-dir", cache, "--json")
    assert other.rc == 0 and other.json()["status"] == "miss", other.describe()

"""Shape and value specialization (issue "models as their owners export them").

A model with symbolic dims runs at the speed of a fixed-shape compile with no
flags: the first run of a shape compiles a program for it, later processes
find it in the cache entry, another shape adds another program. -1 and missing
dims are anonymous symbolic dims. A scalar integer input that steers an If is
specialized on its value, so the branch that cannot run for the given shapes
is never compiled. Every comparison is against ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clihelp import assert_error

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


from small_models import branch_model as _branch_model  # noqa: E402
from small_models import conv_model as _conv_model  # noqa: E402


def _ort(model: Path, feeds: dict) -> list:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)


def _close(kiln_out: np.ndarray, ref: np.ndarray) -> None:
    assert kiln_out.shape == ref.shape and kiln_out.size > 0
    assert np.all(np.abs(kiln_out - ref) <= 1e-4 + 1e-3 * np.abs(ref)), np.abs(kiln_out - ref).max()


def _run(kiln, model, tmp_path, feeds: dict, *extra, tag="o"):
    args = ["run", model]
    for name, arr in feeds.items():
        f = tmp_path / f"{tag}_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    out = tmp_path / f"{tag}_out"
    res = kiln(*args, "--output-dir", out, "--json", *extra)
    assert res.rc == 0, res.describe()
    return res.json(), out


def test_symbolic_batch_is_specialized_cached_and_matches_ort(kiln, tmp_path):
    model = _conv_model(tmp_path / "conv.onnx", ["N", 3, "H", "W"])
    cache = tmp_path / "cache"
    sizes = [(2, 16, 16), (2, 16, 16), (5, 12, 20)]
    for i, (n, h, w) in enumerate(sizes):
        x = np.random.RandomState(i).rand(n, 3, h, w).astype(np.float32)
        j, out = _run(kiln, model, tmp_path, {"x": x}, "--cache-dir", cache, tag=f"r{i}")
        _close(np.load(out / "y.npy"), _ort(model, {"x": x})[0])
        # Specialized programs run on the cpu target's kernels, never silently on reference ones.
        assert j["reference_nodes"] == [], j["reference_nodes"]
        if i == 0:
            assert j["cache"] == "miss" and j["compiled_by_run"] == 1
        elif i == 1:
            assert j["cache"] == "hit" and j["compiled_by_run"] == 0, "the same shape compiled again"
        else:
            assert j["cache"] == "hit" and j["compiled_by_run"] == 1, "a new shape must add a program"
    entries = list(cache.glob("*.kiln"))
    assert len(entries) == 1
    ins = kiln("inspect", entries[0], "--json").json()
    kinds = {d["name"]: d["kind"] for d in ins["buckets"]["dims"]}
    assert kinds == {"N": "specialized", "H": "specialized", "W": "specialized"}
    held = sorted(tuple(p["sizes"][k] for k in ("N", "H", "W")) for p in ins["buckets"]["programs"])
    assert held == [(2, 16, 16), (5, 12, 20)]


def test_explicit_artifact_names_the_shapes_it_holds(kiln, tmp_path):
    model = _conv_model(tmp_path / "conv.onnx", ["N", 3, 16, 16])
    cache = tmp_path / "cache"
    x2 = np.random.RandomState(0).rand(2, 3, 16, 16).astype(np.float32)
    _run(kiln, model, tmp_path, {"x": x2}, "--cache-dir", cache)
    art = next(cache.glob("*.kiln"))
    np.save(tmp_path / "x3.npy", np.random.RandomState(1).rand(3, 3, 16, 16).astype(np.float32))
    res = kiln("run", art, "--input", f"x={tmp_path / 'x3.npy'}")
    assert_error(res, 6, "N=3", "N=2")


@pytest.mark.parametrize("dim", [-1, None], ids=["minus_one", "missing"])
def test_minus_one_and_missing_dims_are_anonymous_symbols(kiln, tmp_path, dim):
    model = _conv_model(tmp_path / "conv.onnx", [dim, 3, 8, 8])
    ins = kiln("inspect", model, "--json")
    assert ins.rc == 0, ins.describe()
    x = np.random.RandomState(3).rand(4, 3, 8, 8).astype(np.float32)
    j, out = _run(kiln, model, tmp_path, {"x": x}, "--no-cache")
    _close(np.load(out / "y.npy"), _ort(model, {"x": x})[0])
    assert j["reference_nodes"] == []
    # --shape fixes an anonymous dim like a named one.
    j, out = _run(kiln, model, tmp_path, {"x": x}, "--no-cache", "--shape", "x=4x3x8x8", tag="s")
    _close(np.load(out / "y.npy"), _ort(model, {"x": x})[0])


def test_no_shape_specialization_lists_the_reference_nodes_and_says_so(kiln, tmp_path):
    model = _conv_model(tmp_path / "conv.onnx", ["N", 3, 8, 8])
    x = np.random.RandomState(4).rand(2, 3, 8, 8).astype(np.float32)
    f = tmp_path / "x.npy"
    np.save(f, x)
    res = kiln("run", model, "--input", f"x={f}", "--no-cache", "--no-shape-specialization")
    assert res.rc == 0, res.describe()
    assert "run on reference kernels because their shapes are dynamic" in res.stderr, res.describe()
    j = kiln("run", model, "--input", f"x={f}", "--no-cache", "--no-shape-specialization", "--json").json()
    reasons = {r["op"]: r["reason"] for r in j["reference_nodes"]}
    assert "Conv" in reasons and reasons["Conv"].startswith("dynamic shape"), reasons


@pytest.mark.parametrize("sr,n,scale", [(16000, 512, 1.0), (8000, 256, 3.0)])
def test_scalar_that_steers_an_if_is_specialized_per_value(kiln, tmp_path, sr, n, scale):
    model = _branch_model(tmp_path / "vad.onnx")
    x = np.random.RandomState(n).rand(1, n).astype(np.float32)
    feeds = {"x": x, "sr": np.array(sr, np.int64)}
    ref = _ort(model, feeds)[0]
    assert np.allclose(ref, scale * x.reshape(1, 2, -1).mean(-1), atol=1e-6)  # the branch taken is the one meant
    cache = tmp_path / "cache"
    j, out = _run(kiln, model, tmp_path, feeds, "--cache-dir", cache)
    _close(np.load(out / "y.npy"), ref)
    ins = kiln("inspect", next(cache.glob("*.kiln")), "--json").json()
    kinds = {d["name"]: d["kind"] for d in ins["buckets"]["dims"]}
    assert kinds == {"n": "specialized", "sr": "value"}
    # Fixed shapes used to fail here: the branch that cannot run was shape-checked.
    j, out = _run(kiln, model, tmp_path, feeds, "--no-cache", "--shape", f"x=1x{n}", tag="shape")
    _close(np.load(out / "y.npy"), ref)


def test_ahead_of_time_compile_stores_one_program_per_value(kiln, tmp_path):
    model = _branch_model(tmp_path / "vad.onnx")
    art = tmp_path / "vad.kiln"
    res = kiln("compile", model, "-o", art, "--shape", "x=1x512", "--value", "sr=16000", "--json")
    assert res.rc == 0, res.describe()
    x = np.random.RandomState(7).rand(1, 512).astype(np.float32)
    feeds = {"x": x, "sr": np.array(16000, np.int64)}
    j, out = _run(kiln, art, tmp_path, feeds)
    _close(np.load(out / "y.npy"), _ort(model, feeds)[0])
    # A value the artifact holds no program for: exit 6 naming the input and the values held.
    f = tmp_path / "sr8k.npy"
    np.save(f, np.array(8000, np.int64))
    np.save(tmp_path / "x.npy", x)
    res = kiln("run", art, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"sr={f}")
    assert_error(res, 6, "sr=8000", "sr=16000")
    # Without --value the compile names the input to give.
    assert_error(kiln("compile", model, "-o", tmp_path / "b.kiln", "--shape", "x=1x512"), 2, "sr", "--value")


def test_both_values_in_one_session_give_two_programs(kiln, tmp_path):
    model = _branch_model(tmp_path / "vad.onnx")
    cache = tmp_path / "cache"
    for sr, n in [(16000, 512), (8000, 256)]:
        x = np.random.RandomState(n).rand(1, n).astype(np.float32)
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        j, out = _run(kiln, model, tmp_path, feeds, "--cache-dir", cache, tag=f"sr{sr}")
        _close(np.load(out / "y.npy"), _ort(model, feeds)[0])
    ins = kiln("inspect", next(cache.glob("*.kiln")), "--json").json()
    held = sorted((p["sizes"]["n"], p["sizes"]["sr"]) for p in ins["buckets"]["programs"])
    assert held == [(256, 8000), (512, 16000)]


def test_perf_with_inputs_only_compiles_their_shapes(kiln, tmp_path):
    model = _conv_model(tmp_path / "conv.onnx", ["N", 3, 32, 32])
    x = np.random.RandomState(5).rand(3, 3, 32, 32).astype(np.float32)
    f = tmp_path / "x.npy"
    np.save(f, x)
    j = kiln("perf", model, "--input", f"x={f}", "--runs", "3", "--warmup", "1", "--json").json()
    assert j["compiled_shapes"] == "x=3x3x32x32"
    assert j["reference_nodes"] == []
    assert j["batch"] == 3


def test_a_value_whose_branch_cannot_run_for_the_shapes_is_an_input_error(kiln, tmp_path):
    """sr = 8000 takes the branch that reshapes x into [1,2,128]: x of 512 samples cannot (ORT fails too)."""
    model = _branch_model(tmp_path / "vad.onnx")
    res = kiln("compile", model, "-o", tmp_path / "bad.kiln", "--shape", "x=1x512", "--value", "sr=8000")
    assert_error(res, 6, "input 'sr' = 8000", "Reshape")
    assert not (tmp_path / "bad.kiln").exists()
    np.save(tmp_path / "x.npy", np.zeros((1, 512), np.float32))
    np.save(tmp_path / "sr.npy", np.array(8000, np.int64))
    res = kiln("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--input", f"sr={tmp_path / 'sr.npy'}", "--no-cache")
    assert_error(res, 6, "input 'sr' = 8000", "Reshape")


def test_the_value_specialized_model_cross_compiles_for_cuda(kiln, tmp_path):
    model = _branch_model(tmp_path / "vad.onnx")
    out = tmp_path / "vad_sm90.kiln"
    res = kiln("compile", model, "-o", out, "--target", "cuda", "--arch", "sm_90", "--tuning", "heuristic",
               "--shape", "x=1x256", "--value", "sr=8000", "--json")
    if res.rc == 5 and "without CUDA" in res.stderr:
        pytest.skip("SKIPPED: this kiln was built without CUDA support (no toolkit at build time)")
    assert res.rc == 0, res.describe()
    ins = kiln("inspect", out, "--json").json()
    assert ins["compat"]["target"] == "cuda"
    assert [p["sizes"] for p in ins["buckets"]["programs"]] == [{"sr": 8000}]
    assert "If" not in ins["operators"]  # folded to the branch taken


def test_a_data_dependent_dim_is_listed_as_such(kiln, tmp_path):
    """y = 2 * float(NonZero(x)): y's length depends on x's values, so Mul runs
    on reference kernels; the reason says so and no "fix the shapes" note is printed."""
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["idx"]),
         helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["f", "two"], ["y"])],
        "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [two])
    model = tmp_path / "nz.onnx"
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(model))
    x = np.array([0, 3, 0, 1, 5, 0], np.float32)
    f = tmp_path / "x.npy"
    np.save(f, x)
    res = kiln("run", model, "--input", f"x={f}", "--no-cache", "--json", "--output-dir", tmp_path / "o")
    assert res.rc == 0, res.describe()
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), _ort(model, {"x": x})[0])
    reasons = {r["op"]: r["reason"] for r in res.json()["reference_nodes"]}
    assert reasons["Mul"].startswith("data-dependent shape"), reasons
    text = kiln("run", model, "--input", f"x={f}", "--no-cache")
    assert "because their shapes are dynamic" not in text.stderr, text.describe()


def test_question_mark_dims_are_each_their_own_symbol(kiln, tmp_path):
    """paddle2onnx declares unknown dims as dim_param '?' ([None, 3, '?', '?']): H and W may differ."""
    model = _conv_model(tmp_path / "conv.onnx", [None, 3, "?", "?"])
    x = np.random.RandomState(9).rand(1, 3, 12, 20).astype(np.float32)
    j, out = _run(kiln, model, tmp_path, {"x": x}, "--no-cache")
    _close(np.load(out / "y.npy"), _ort(model, {"x": x})[0])
    assert j["buckets"]["dims"] == ["x:0", "x:2", "x:3"]


@pytest.mark.parametrize("cmd", [("run", "--random-inputs", "--no-cache"), ("perf", "--runs", "1"), ("verify",)],
                         ids=["run", "perf", "verify"])
def test_a_random_input_of_a_dtype_kiln_cannot_make_names_it(kiln, tmp_path, cmd):
    """run --random-inputs, perf and verify share one random-input maker: an int16
    input (kiln runs it, the maker has no int16 values) is an input error naming
    the input, its dtype and --input."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["z"], ["y"])], "c",
                              [helper.make_tensor_value_info("z", TensorProto.INT16, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT16, [2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = tmp_path / "c.onnx"
    onnx.save(m, str(model))
    res = kiln(cmd[0], model, *cmd[1:])
    assert_error(res, 6, "random int16 input 'z'", "--input z=")


def _add_model(path: Path) -> Path:
    """y = a + b, both [B, 4]: the symbol B is shared, the 4 is static."""
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["B", 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["B", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "add", [a, b], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return path


def _run_rc(kiln, model, tmp_path, feeds: dict, tag: str):
    args = ["run", model]
    for name, arr in feeds.items():
        f = tmp_path / f"{tag}_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    return kiln(*args, "--output-dir", tmp_path / f"{tag}_out", "--cache-dir", tmp_path / "cache")


def test_a_shape_contradicting_a_static_dim_is_an_input_error(kiln, tmp_path):
    model = _add_model(tmp_path / "add.onnx")
    z = np.zeros((2, 5), np.float32)
    res = _run_rc(kiln, model, tmp_path, {"a": z, "b": z}, "static")
    assert_error(res, 6, "'a'", "5", "4")


def test_inputs_disagreeing_on_a_shared_symbol_is_an_input_error(kiln, tmp_path):
    model = _add_model(tmp_path / "add.onnx")
    res = _run_rc(kiln, model, tmp_path, {"a": np.zeros((2, 4), np.float32), "b": np.zeros((3, 4), np.float32)},
                  "shared")
    assert_error(res, 6, "'B'", "'a'", "'b'")
    # The same model runs when they agree, and the sum is right.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ok = _run_rc(kiln, model, tmp_path, {"a": x, "b": x}, "agree")
    assert ok.rc == 0, ok.describe()
    np.testing.assert_array_equal(np.load(tmp_path / "agree_out" / "y.npy"), 2 * x)

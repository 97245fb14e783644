"""The Python API over kiln::Session: info, stats, cache, compile / load /
check / inspect, numpy conversions, buckets, the CLI and the type stubs."""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from conftest import REPO, cli, model_path, save_model


def test_installed_package_is_tested():
    """The tests run against the installed distribution, not python/kiln."""
    if os.environ.get("KILN_TEST_SOURCE_TREE"):
        pytest.skip("KILN_TEST_SOURCE_TREE is set")
    assert not Path(kiln.__file__).resolve().is_relative_to(REPO / "python"), kiln.__file__
    version = re.search(r"project\(kiln VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
    # The whole version: release + build id (a PEP 440 local label); the
    # distribution's version is the release alone.
    assert re.fullmatch(re.escape(version) + r"\+[0-9a-f]{12}", kiln.__version__), kiln.__version__
    from importlib.metadata import version as dist_version

    assert dist_version("kiln-onnx") == version


def test_version_is_what_artifacts_record_and_the_cli_prints(demo, tmp_path):
    """kiln.__version__ is the compat block's kiln_version, and the command
    line installed with the package (same sources) prints the same."""
    out = tmp_path / "demo.kiln"
    kiln.compile(demo, out)
    assert kiln.inspect(out)["compat"]["kiln_version"] == kiln.__version__
    r = subprocess.run([cli(), "--version"], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == kiln.__version__


def test_inputs_outputs_and_stats(demo, demo_input, tmp_path):
    s = kiln.Session(demo, cache_dir=tmp_path)
    assert s.inputs == [kiln.TensorInfo("image", "float32", (1, 3, 64, 64))]
    assert s.outputs == [kiln.TensorInfo("probs", "float32", (1, 10))]
    assert s.target == "cpu"
    st = s.stats
    assert st.cache == "miss" and st.compile_ms > 0 and st.load_ms >= 0
    assert st.artifact_path and Path(st.artifact_path).parent == tmp_path
    out = s.run({"image": demo_input})
    probs = out["probs"]
    assert probs.dtype == np.float32 and probs.shape == (1, 10)
    assert abs(float(probs.sum()) - 1.0) < 1e-5  # a softmax
    # The same model and options again: loaded from the cache, not compiled.
    s2 = kiln.Session(demo, cache_dir=tmp_path)
    assert s2.stats.cache == "hit" and s2.stats.compile_ms == 0
    np.testing.assert_array_equal(s2.run({"image": demo_input})["probs"], probs)
    # No cache: compiled in memory.
    s3 = kiln.Session(demo, use_cache=False)
    assert s3.stats.cache == "none" and s3.stats.artifact_path is None
    assert "cpu" in repr(s3) and "image" in repr(s3)


def test_default_cache_dir_is_xdg(demo, demo_input, _private_cache_home):
    assert kiln.default_cache_dir() == str(_private_cache_home / "kiln")
    s = kiln.Session(demo)
    assert Path(s.stats.artifact_path).parent == _private_cache_home / "kiln"


def test_outputs_are_owned_and_writable(demo, demo_input, tmp_path):
    s = kiln.Session(demo, cache_dir=tmp_path)
    a = s.run({"image": demo_input})["probs"]
    keep = a.copy()
    a[...] = -1  # the caller owns the output
    b = s.run({"image": demo_input})["probs"]
    np.testing.assert_array_equal(b, keep)


def test_input_layouts_give_the_same_result(demo, demo_input, tmp_path):
    s = kiln.Session(demo, cache_dir=tmp_path)
    want = s.run({"image": demo_input})["probs"]
    # Not C-contiguous (a transposed copy viewed back), big-endian, unaligned, a nested list.
    fortran = np.asfortranarray(demo_input)
    assert not fortran.flags.c_contiguous
    big = demo_input.astype(">f4")
    raw = np.zeros(demo_input.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(demo_input.shape)
    unaligned[...] = demo_input
    assert not unaligned.flags.aligned
    for x in (fortran, big, unaligned, demo_input.tolist()):
        np.testing.assert_array_equal(s.run({"image": x})["probs"], want)


def test_cpu_dlpack_input(demo, demo_input, tmp_path):
    torch = pytest.importorskip("torch")
    s = kiln.Session(demo, cache_dir=tmp_path)
    want = s.run({"image": demo_input})["probs"]
    got = s.run({"image": torch.from_numpy(demo_input.copy())})["probs"]
    np.testing.assert_array_equal(got, want)


def dtype_model(tmp_path: Path) -> Path:
    """h: float16[2,2] -> h*h; b: bool[3] -> not b; i: int64[4] -> i+i; d: float64[2] -> d*d."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    return save_model(
        tmp_path / "dtypes.onnx",
        [helper.make_node("Mul", ["h", "h"], ["h2"]), helper.make_node("Not", ["b"], ["nb"]),
         helper.make_node("Add", ["i", "i"], ["i2"]), helper.make_node("Mul", ["d", "d"], ["d2"])],
        [vi("h", TensorProto.FLOAT16, [2, 2]), vi("b", TensorProto.BOOL, [3]), vi("i", TensorProto.INT64, [4]),
         vi("d", TensorProto.DOUBLE, [2])],
        [vi("h2", TensorProto.FLOAT16, [2, 2]), vi("nb", TensorProto.BOOL, [3]), vi("i2", TensorProto.INT64, [4]),
         vi("d2", TensorProto.DOUBLE, [2])])


def test_dtypes_round_trip(tmp_path):
    s = kiln.Session(dtype_model(tmp_path), cache_dir=tmp_path / "c")
    assert [i.dtype for i in s.inputs] == ["float16", "bool", "int64", "float64"]
    h = np.array([[1.5, -2], [0.25, 3]], np.float16)
    b = np.array([True, False, True])
    i = np.array([1, -2, 3, 2**40], np.int64)
    d = np.array([1e-300, 3.0])
    out = s.run({"h": h, "b": b, "i": i, "d": d})
    assert [(k, v.dtype) for k, v in out.items()] == [("h2", np.float16), ("nb", np.bool_), ("i2", np.int64),
                                                       ("d2", np.float64)]
    np.testing.assert_array_equal(out["h2"], h * h)
    np.testing.assert_array_equal(out["nb"], ~b)
    np.testing.assert_array_equal(out["i2"], i + i)
    np.testing.assert_array_equal(out["d2"], d * d)
    # Lists and scalars take the declared dtype.
    out = s.run({"h": [[1, 2], [3, 4]], "b": [False, False, True], "i": [1, 2, 3, 4], "d": [0.5, 2]})
    np.testing.assert_array_equal(out["i2"], [2, 4, 6, 8])
    assert out["h2"].dtype == np.float16 and out["h2"][1, 1] == 16


def test_symbolic_dims_and_buckets(add_model, tmp_path):
    s = kiln.Session(add_model, cache_dir=tmp_path / "c")
    assert s.inputs[0] == kiln.TensorInfo("x", "float32", ("batch", 3))
    for n in (1, 5):
        x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        np.testing.assert_array_equal(s.run({"x": x, "y": x})["z"], 2 * x)
    b = kiln.Session(add_model, cache_dir=tmp_path / "c", dims={"batch": "1..4"})
    assert b.buckets["dims"] == ["batch"]
    x = np.ones((3, 3), np.float32)
    z = b.run({"x": x, "y": x})["z"]
    assert z.shape == (3, 3) and (z == 2).all()
    e = kiln.Session(add_model, cache_dir=tmp_path / "c", dims={"batch": [1, 2]}, out_of_bucket="error")
    with pytest.raises(kiln.InvalidInput, match="batch"):
        e.run({"x": np.ones((3, 3), np.float32), "y": np.ones((3, 3), np.float32)})
    fixed = kiln.Session(add_model, cache_dir=tmp_path / "c", shapes={"x": [2, 3], "y": [2, 3]})
    assert fixed.inputs[0].shape == (2, 3)


def test_compile_load_check_inspect(demo, demo_input, tmp_path):
    art = tmp_path / "demo.kiln"
    r = kiln.compile(demo, art)
    assert isinstance(r, kiln.CompileResult)
    assert r.artifact_bytes == art.stat().st_size > 0
    assert r.nodes_imported >= r.nodes_compiled > 0 and r.compile_ms > 0 and len(r.model_digest) == 32
    s = kiln.Session.load(art)
    assert s.stats.cache == "none" and s.stats.artifact_path == str(art)
    want = kiln.Session(demo, use_cache=False).run({"image": demo_input})["probs"]
    np.testing.assert_array_equal(s.run({"image": demo_input})["probs"], want)

    c = kiln.check(art)
    assert c["runnable"] is True and c["target"] == "cpu" and c["mismatches"] == []
    bad = kiln.check(art, target="ref")
    assert bad["runnable"] is False and bad["target"] == "ref"
    assert {"field": "target", "artifact": "cpu", "here": "ref"} in bad["mismatches"]
    assert "target" in bad["reason"]

    info = kiln.inspect(art)
    assert info["compat"]["target"] == "cpu"
    assert info["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 3, 64, 64]}]
    assert info["operators"]["kiln.cpu.Conv"] >= 1 or any("Conv" in k for k in info["operators"])
    m = kiln.inspect(demo)
    assert m["opset"] == 17 and m["symbolic_dims"] == [] and m["weights"] > 0
    assert m["outputs"] == [{"name": "probs", "dtype": "float32", "shape": [1, 10]}]


def test_inspect_and_check_match_the_command_line(demo, add_model, tmp_path):
    art = tmp_path / "demo.kiln"
    kiln.compile(demo, art)
    for path in (art, demo, add_model):
        r = subprocess.run([cli(), "inspect", str(path), "--json"], capture_output=True, text=True, check=True)
        from_cli = json.loads(r.stdout)
        from_py = kiln.inspect(path)
        assert len(from_py) >= 8
        assert from_py == from_cli, str(path)  # one library function (runtime/inspect.h) makes both
    r = subprocess.run([cli(), "check", str(art), "--target", "ref", "--json"], capture_output=True, text=True)
    assert r.returncode == kiln.IncompatibleArtifact.code
    from_cli = json.loads(r.stdout)
    from_py = kiln.check(art, target="ref")
    assert from_py == from_cli and "target" in from_py["reason"]


def test_command_line_is_installed(demo, tmp_path):
    exe = cli()
    assert Path(exe).parent == Path(sys.executable).parent, exe
    r = subprocess.run([exe, "run", str(demo), "--random-inputs", "--cache-dir", str(tmp_path), "--json",
                        "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["cache"] == "miss"
    # python -m kiln runs the same program (exit codes included).
    r = subprocess.run([sys.executable, "-m", "kiln", "check", str(tmp_path / "missing.kiln")],
                       capture_output=True, text=True)
    assert r.returncode == kiln.IOError.code, (r.returncode, r.stderr)


def test_on_note_reports_an_untrusted_cache_dir(demo, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    notes = []
    s = kiln.Session(demo, cache_dir=shared, on_note=notes.append)
    assert s.stats.cache == "none"
    assert notes and notes == list(s.stats.notes), (notes, s.stats.notes)
    assert str(shared) in notes[0]
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777


def test_ort_plugin_ships_and_runs_in_onnxruntime(tmp_path):
    """kiln.ort finds the plugin in the installed package; onnxruntime (a test
    dependency only: kiln does not depend on it) loads it, and the demo model
    runs wholly on kiln and matches ORT's CPU EP."""
    import kiln.ort
    import onnxruntime as ort

    # kiln's module first: both kiln copies in one process share libspdlog,
    # and the plugin's logger must not clash with the module's.
    kiln.Session(model_path("demo"), cache_dir=tmp_path / "cache").run(
        {"image": np.zeros((1, 3, 64, 64), dtype=np.float32)})
    lib = kiln.ort.get_library_path()
    assert Path(lib).is_file() and Path(lib).parent == Path(kiln.__file__).parent / "lib"
    assert kiln.ort.get_ep_names() == ["KilnExecutionProvider"]
    ort.register_execution_provider_library("kiln_pkg_test", lib)
    devices = [d for d in ort.get_ep_devices() if d.ep_name in kiln.ort.get_ep_names()]
    assert devices, [d.ep_name for d in ort.get_ep_devices()]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_provider_for_devices(devices, {"cache_dir": str(tmp_path / "cache")})
    demo = model_path("demo")
    s = ort.InferenceSession(str(demo), so, enable_fallback=0)
    assert {sub.ep_name for sub in s.get_provider_graph_assignment_info()} == {"KilnExecutionProvider"}
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    ref = ort.InferenceSession(str(demo), providers=["CPUExecutionProvider"]).run(None, {"image": x})[0]
    np.testing.assert_allclose(s.run(None, {"image": x})[0], ref, rtol=1e-3, atol=1e-4)


def test_type_stubs_match_the_module():
    """kiln/_kiln.pyi names exactly what the C++ module defines."""
    stub = Path(kiln._kiln.__file__).parent / "_kiln.pyi"
    assert stub.is_file(), "the wheel must ship kiln/_kiln.pyi"
    assert (stub.parent / "py.typed").is_file()
    tree = ast.parse(stub.read_text())
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            stubbed[node.name] = None
    public = {n for n in dir(kiln._kiln) if not n.startswith("__")}
    assert set(stubbed) == public
    for cls, members in stubbed.items():
        if members is not None:
            have = {n for n in dir(getattr(kiln._kiln, cls)) if not n.startswith("_") or n == "__array_interface__"}
            assert members == have, cls

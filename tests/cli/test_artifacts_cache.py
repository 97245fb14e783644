"""Artifacts (.kiln) and the compile cache through the command line: corrupt
and incompatible artifacts, unwritable and default cache directories, and the
--help of every subcommand.

Exit codes: 0 ok, 3 incompatible artifact, 7 corrupt artifact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clihelp import assert_error


@pytest.fixture(scope="module")
def cpu_artifact(kiln, demo_onnx, tmp_path_factory) -> Path:
    """demo.onnx compiled for --target cpu."""
    out = tmp_path_factory.mktemp("artifacts") / "demo_cpu.kiln"
    res = kiln("compile", demo_onnx, "-o", out, "--target", "cpu")
    assert res.rc == 0 and out.is_file(), res.describe()
    return out


@pytest.fixture(scope="module")
def ref_artifact(kiln, demo_onnx, tmp_path_factory) -> Path:
    """demo.onnx compiled for --target ref."""
    out = tmp_path_factory.mktemp("artifacts") / "demo_ref.kiln"
    res = kiln("compile", demo_onnx, "-o", out, "--target", "ref")
    assert res.rc == 0 and out.is_file(), res.describe()
    return out


# ---- good artifacts ------------------------------------------------------------


def test_artifact_runs_without_compiling(kiln, cpu_artifact, tmp_path):
    res = kiln("run", cpu_artifact, "--target", "cpu", "--random-inputs", "--output-dir", tmp_path, "--json")
    assert res.rc == 0, res.describe()
    obj = res.json()
    assert obj["compile_ms"] == 0, res.describe()
    assert [o["name"] for o in obj["outputs"]] == ["probs"], res.describe()
    assert obj["outputs"][0]["shape"] == [1, 10] and obj["outputs"][0]["dtype"] == "float32", res.describe()
    assert (tmp_path / "probs.npy").is_file(), res.describe()
    # The warm start's whole cost: from the process's start (10 ms clock
    # ticks) to the first result, so at least the load and the run.
    since = obj["since_process_start_ms"]
    assert since >= obj["load_ms"] + obj["run_ms"] - 10, res.describe()
    assert since < 60_000, res.describe()


def test_check_accepts_artifact_for_this_machine(kiln, cpu_artifact):
    res = kiln("check", cpu_artifact)
    assert res.rc == 0, res.describe()


def test_inspect_json_names_target(kiln, cpu_artifact):
    res = kiln("inspect", cpu_artifact, "--json")
    assert res.rc == 0, res.describe()
    assert "cpu" in res.stdout and isinstance(res.json(), dict), res.describe()


# ---- corrupt artifacts (7) -------------------------------------------------------


def flipped_copy(src: Path, dst: Path, where: str) -> int:
    """Copies src to dst with one byte inverted; returns the offset."""
    data = bytearray(src.read_bytes())
    offset = {"first_byte": 0, "header": min(12, len(data) - 1), "middle": len(data) // 2,
              "last_byte": len(data) - 1}[where]
    data[offset] ^= 0xFF
    dst.write_bytes(bytes(data))
    return offset


@pytest.mark.parametrize("where", ["first_byte", "header", "middle", "last_byte"])
def test_flipped_byte_is_corrupt_artifact(kiln, cpu_artifact, tmp_path, where):
    bad = tmp_path / f"flipped_{where}.kiln"
    offset = flipped_copy(cpu_artifact, bad, where)
    res = kiln("run", bad, "--target", "cpu", "--random-inputs")
    assert res.rc == 7, f"byte {offset} of {cpu_artifact.stat().st_size} inverted\n{res.describe()}"
    assert_error(res, 7, bad.name)


def test_truncated_artifact_is_corrupt(kiln, cpu_artifact, tmp_path):
    bad = tmp_path / "truncated.kiln"
    data = cpu_artifact.read_bytes()
    bad.write_bytes(data[: len(data) * 2 // 3])
    res = kiln("run", bad, "--target", "cpu", "--random-inputs")
    assert_error(res, 7, bad.name)


# ---- incompatible artifacts (3) -----------------------------------------------------


def test_ref_artifact_run_for_cpu_is_incompatible(kiln, ref_artifact):
    res = kiln("run", ref_artifact, "--target", "cpu", "--random-inputs")
    assert_error(res, 3, "target", "ref", "cpu")


def test_ref_artifact_runs_for_ref(kiln, ref_artifact):
    res = kiln("run", ref_artifact, "--target", "ref", "--random-inputs", "--json")
    assert res.rc == 0, res.describe()
    assert res.json()["target"] == "ref", res.describe()


# ---- cache directories ----------------------------------------------------------------


def test_unwritable_cache_dir_still_runs(kiln, demo_onnx, tmp_path):
    # Tests run as root, where mode bits do not stop writes; a directory under
    # a regular file can never be created, whoever asks.
    blocker = tmp_path / "file"
    blocker.write_text("a regular file, not a directory\n")
    cache = blocker / "cache"
    res = kiln("run", demo_onnx, "--random-inputs", "--cache-dir", cache, "--json")
    assert res.rc == 0, res.describe()
    obj = res.json()
    assert obj["cache"] == "none", res.describe()
    notes = [n for n in obj.get("notes", []) if "cache" in n.lower()]
    assert notes, f"no note says the cache could not be written\n{res.describe()}"
    assert any(w in " ".join(notes).lower() for w in ("not", "fail", "unable", "error")), res.describe()
    assert blocker.read_text() == "a regular file, not a directory\n"


def test_default_cache_is_under_xdg_cache_home(kiln, demo_onnx, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first = kiln("run", demo_onnx, "--random-inputs", "--json", env=env)
    assert first.rc == 0, first.describe()
    assert first.json()["cache"] == "miss", first.describe()
    entries = [p for p in (tmp_path / "xdg").rglob("*") if p.is_file()]
    assert entries, f"nothing was written under XDG_CACHE_HOME={tmp_path / 'xdg'}"
    second = kiln("run", demo_onnx, "--random-inputs", "--json", env=env)
    assert second.rc == 0, second.describe()
    assert second.json()["cache"] == "hit" and second.json()["compile_ms"] == 0, second.describe()


def test_no_cache_reports_none(kiln, demo_onnx):
    res = kiln("run", demo_onnx, "--random-inputs", "--no-cache", "--json")
    assert res.rc == 0, res.describe()
    assert res.json()["cache"] == "none", res.describe()


# ---- help ---------------------------------------------------------------------------


@pytest.mark.parametrize("sub", [None, "run", "compile", "inspect", "check"])
def test_help_exits_zero(kiln, sub):
    args = ["--help"] if sub is None else [sub, "--help"]
    res = kiln(*args)
    assert res.rc == 0, res.describe()
    assert res.stdout.strip(), f"--help printed nothing on stdout\n{res.describe()}"
    if sub is not None:
        assert sub in res.stdout, res.describe()


# ---- inspect on an ONNX model ----------------------------------------------------------


def test_inspect_onnx_model_lists_inputs_operators_and_weights(kiln, demo_onnx):
    res = kiln("inspect", demo_onnx, "--json")
    assert res.rc == 0, res.describe()
    obj = res.json()
    assert obj["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 3, 64, 64]}], res.describe()
    assert [o["name"] for o in obj["outputs"]] == ["probs"], res.describe()
    assert obj["operators"].get("Conv", 0) >= 1 and obj["nodes"] == sum(obj["operators"].values()), res.describe()
    assert obj["weights"] > 0 and obj["weight_bytes"] > 0 and obj["symbolic_dims"] == [], res.describe()
    assert obj["data_dependent_dims"] == [], res.describe()
    assert obj["opset"] >= 7, res.describe()


def test_inspect_onnx_model_names_symbolic_dims(kiln, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path / "sym.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    res = kiln("inspect", path, "--json")
    assert res.rc == 0, res.describe()
    assert res.json()["symbolic_dims"] == ["batch"], res.describe()
    assert res.json()["inputs"][0]["shape"] == ["batch", 4], res.describe()
    text = kiln("inspect", path)
    assert "symbolic dims: batch" in text.stdout and "--shape" in text.stdout, text.describe()


def test_inspect_of_a_malformed_model_is_invalid_model(kiln, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\xff\xff")
    res = kiln("inspect", bad)
    assert res.rc == 4, res.describe()
    assert "bad.onnx" in res.error_message(), res.describe()

"""kiln against hostile paths, names and values found by an adversarial review
(seventh session): each used to crash, hang, replace a file that was not kiln's
to replace, or exit 1 (internal error) on a user's mistake."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from clihelp import assert_error


def _relu_model(path, node_name="relu", out_name="y"):
    """x float32 [2,3] -> Relu -> out_name; names may hold any bytes."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], [out_name], name=node_name)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("cmd", [["run", "", "--random-inputs"], ["compile", "", "-o", "x.kiln"],
                                 ["perf", ""], ["inspect", ""], ["check", ""], ["cache", "explain", ""]])
def test_empty_model_path_is_an_invalid_option(kiln, cmd):
    assert_error(kiln(*cmd), 2, "empty")


def test_empty_output_path_is_an_invalid_option(kiln, demo_onnx):
    assert_error(kiln("compile", demo_onnx, "-o", ""), 2, "empty")


def test_output_over_a_fifo_is_refused_and_the_fifo_stays(kiln, demo_onnx, tmp_path):
    fifo = tmp_path / "out.kiln"
    os.mkfifo(fifo)
    assert_error(kiln("compile", demo_onnx, "-o", fifo), 8, "out.kiln", "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.kiln"], "no temporary file left behind"


def test_output_through_a_symlink_writes_its_target(kiln, demo_onnx, tmp_path):
    target = tmp_path / "real.kiln"
    link = tmp_path / "link.kiln"
    link.symlink_to(target)
    res = kiln("compile", demo_onnx, "-o", link)
    assert res.rc == 0, res.describe()
    assert link.is_symlink(), "the link must stay a link"
    assert target.is_file() and target.stat().st_size > 0
    assert kiln("check", link).rc == 0


def test_a_fifo_in_place_of_a_cache_entry_does_not_hang(kiln, demo_onnx, tmp_path):
    cache = tmp_path / "cache"
    first = kiln("run", demo_onnx, "--random-inputs", "--cache-dir", cache, "--json")
    assert first.rc == 0, first.describe()
    entry = first.json()["artifact"]
    os.unlink(entry)
    os.mkfifo(entry)
    # clihelp's timeout turns a hang into a failure; a writer thread would
    # unblock a blocking open, so there is none.
    res = kiln("run", demo_onnx, "--random-inputs", "--cache-dir", cache, "--json")
    assert res.rc == 0, res.describe()
    assert stat.S_ISFIFO(os.lstat(entry).st_mode), "kiln must not replace what is not its file"


def _npy_with_shape_text(path, shape_text):
    """A float32 [2,3] .npy whose header's shape tuple reads `shape_text`
    (header length kept: padding spaces absorb the difference)."""
    import io
    buf = io.BytesIO()
    np.save(buf, np.ones((2, 3), np.float32))
    data = buf.getvalue()
    hlen = int.from_bytes(data[8:10], "little")
    header = data[10:10 + hlen].decode("latin1").replace("(2, 3)", shape_text).rstrip("\n").rstrip(" ")
    header = header + " " * (hlen - 1 - len(header)) + "\n"
    path.write_bytes(data[:10] + header.encode("latin1") + data[10 + hlen:])


@pytest.mark.parametrize("shape", ["(2, -3)", "(2, 3a)"])
def test_npy_header_with_a_bad_shape_is_invalid_input(kiln, tmp_path, shape):
    model = tmp_path / "relu.onnx"
    _relu_model(model)
    bad = tmp_path / "bad.npy"
    _npy_with_shape_text(bad, shape)
    res = kiln("run", model, "--input", f"x={bad}", "--no-cache")
    assert_error(res, 6, "bad.npy", "shape")


def test_names_that_are_not_utf8_print_as_json(kiln, tmp_path):
    model = tmp_path / "names.onnx"
    _relu_model(model, node_name="reXXlu", out_name="yXXy")
    raw = model.read_bytes()
    assert b"reXXlu" in raw and b"yXXy" in raw
    model.write_bytes(raw.replace(b"reXXlu", b"re\xff\xfelu").replace(b"yXXy", b"y\xff\xfey"))
    ins = kiln("inspect", model, "--json")
    assert ins.rc == 0, ins.describe()
    json.loads(ins.stdout)
    run = kiln("run", model, "--random-inputs", "--no-cache", "--json")
    assert run.rc == 0, run.describe()
    json.loads(run.stdout)


def test_a_very_long_output_name_is_shortened_not_refused(kiln, tmp_path):
    model = tmp_path / "long.onnx"
    long_name = "y" * 300
    _relu_model(model, out_name=long_name)
    out = tmp_path / "out"
    res = kiln("run", model, "--random-inputs", "--no-cache", "--output-dir", out, "--json")
    assert res.rc == 0, res.describe()
    files = [p.name for p in out.iterdir()]
    assert len(files) == 1 and files[0].endswith(".npy") and len(files[0]) <= 204, files
    assert res.json()["outputs"][0]["file"].endswith(files[0])


def test_perf_passes_the_childs_error_code_on(kiln, demo_onnx, tmp_path):
    wrong = tmp_path / "wrong.npy"
    np.save(wrong, np.ones((1, 3, 64, 64), np.int64))  # demo wants float32
    res = kiln("perf", demo_onnx, "--runs", "1", "--input", f"image={wrong}")
    assert res.rc == 6, res.describe()


@pytest.mark.parametrize("opt", [["--threads", "-1"], ["--warmup", "-1"], ["--runs", "0"]])
def test_perf_refuses_negative_counts(kiln, demo_onnx, opt):
    res = kiln("perf", demo_onnx, *opt)
    assert res.rc == 2, res.describe()


def test_an_additive_float_mask_is_not_padded(kiln, tmp_path):
    """scores = Q K^T + mask (float, added: 0 means attend), K/V/mask over a
    symbolic T bucketed 1..8: a request with T=5 must not run zero-padded to
    8 (the padded keys would be attended); the output matches numpy."""
    B, H, S, D = 1, 2, 3, 8
    g = helper.make_graph(
        [helper.make_node("Transpose", ["K"], ["Kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["Q", "Kt"], ["s"]),
         helper.make_node("Add", ["s", "mask"], ["sm"]),
         helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "V"], ["y"])], "att",
        [helper.make_tensor_value_info("Q", TensorProto.FLOAT, [B, H, S, D]),
         helper.make_tensor_value_info("K", TensorProto.FLOAT, [B, H, "T", D]),
         helper.make_tensor_value_info("V", TensorProto.FLOAT, [B, H, "T", D]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [B, 1, 1, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, S, D])])
    model = tmp_path / "att.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = np.random.default_rng(0)
    feeds = {"Q": r.standard_normal((B, H, S, D)), "K": r.standard_normal((B, H, 5, D)),
             "V": r.standard_normal((B, H, 5, D)), "mask": np.zeros((B, 1, 1, 5))}
    args = []
    for k, v in feeds.items():
        feeds[k] = v.astype(np.float32)
        np.save(tmp_path / f"{k}.npy", feeds[k])
        args += ["--input", f"{k}={tmp_path / (k + '.npy')}"]
    res = kiln("run", model, "--dim", "T=1..8", "--cache-dir", tmp_path / "c", "--output-dir", tmp_path / "o",
               "--json", *args)
    assert res.rc == 0, res.describe()
    got = np.load(res.json()["outputs"][0]["file"])
    s = feeds["Q"] @ feeds["K"].transpose(0, 1, 3, 2) + feeds["mask"]
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ feeds["V"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", ["-1", ""])
def test_a_negative_or_empty_seed_is_an_invalid_option(kiln, demo_onnx, seed):
    res = kiln("run", demo_onnx, "--random-inputs", "--no-cache", "--seed", seed)
    assert res.rc == 2, res.describe()


def test_perf_on_an_artifact_says_it_wants_the_model(kiln, demo_onnx, tmp_path):
    art = tmp_path / "demo.kiln"
    assert kiln("compile", demo_onnx, "-o", art).rc == 0
    assert_error(kiln("perf", art), 2, "demo.kiln", "ONNX model")


@pytest.mark.parametrize("array", [np.array(["ab", "c"]), np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])])
def test_npy_of_strings_or_records_names_its_dtype(kiln, tmp_path, array):
    model = tmp_path / "relu.onnx"
    _relu_model(model)
    bad = tmp_path / "bad.npy"
    np.save(bad, array)
    msg = assert_error(kiln("run", model, "--input", f"x={bad}", "--no-cache"), 6, "bad.npy")
    assert "not supported" in msg, msg


def test_a_symlink_planted_as_a_cache_entry_never_redirects_a_write(kiln, demo_onnx, tmp_path):
    cache = tmp_path / "cache"
    first = kiln("run", demo_onnx, "--random-inputs", "--cache-dir", cache, "--json")
    assert first.rc == 0, first.describe()
    entry = first.json()["artifact"]
    victim = tmp_path / "victim.txt"
    victim.write_text("not kiln's")
    os.unlink(entry)
    os.symlink(victim, entry)
    res = kiln("run", demo_onnx, "--random-inputs", "--cache-dir", cache, "--json")
    assert res.rc == 0, res.describe()
    assert victim.read_text() == "not kiln's", "the cache wrote through a planted link"


def test_an_output_path_that_is_a_symlink_loop_is_an_io_error(kiln, demo_onnx, tmp_path):
    loop = tmp_path / "loop.kiln"
    loop.symlink_to(loop)
    assert_error(kiln("compile", demo_onnx, "-o", loop), 8, "loop.kiln", "cannot resolve the symbolic link")
    assert loop.is_symlink()


@pytest.mark.parametrize("cmd", ["check", "inspect"])
def test_a_fifo_given_as_an_artifact_is_refused_not_waited_on(kiln, tmp_path, cmd):
    fifo = tmp_path / "pipe.kiln"
    os.mkfifo(fifo)
    assert_error(kiln(cmd, fifo), 8, "pipe.kiln", "not a regular file")


def test_an_error_below_a_kernel_names_the_node(kiln, tmp_path):
    """Range's output size comes from an input: 2^52 elements is too large to
    allocate, an error raised by the tensor, which does not know the node."""
    g = helper.make_graph([helper.make_node("Range", ["s", "n", "d"], ["y"], name="my_range")], "g",
                          [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, ["L"])],
                          initializer=[helper.make_tensor("s", TensorProto.INT64, [], [0]),
                                       helper.make_tensor("d", TensorProto.INT64, [], [1])])
    model = tmp_path / "range.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    n = tmp_path / "n.npy"
    np.save(n, np.array(2 ** 52, np.int64))
    assert_error(kiln("run", model, "--input", f"n={n}", "--no-cache"), 6, "my_range", "too large")

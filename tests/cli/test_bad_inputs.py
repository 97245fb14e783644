"""kiln run on bad models and bad inputs: each case checks the exit code of the
CLI contract AND that the one-line error names what is wrong.

Exit codes: 2 usage, 4 invalid model, 5 unsupported operator, 6 invalid input, 8 I/O.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from clihelp import assert_error

# A dim list such as [1,3,64,64], 1x3x64x64 or (1, 3, 64, 64), whatever the format.
def dims_rx(*dims: int) -> str:
    return r"\D{1,3}".join(str(d) for d in dims) + r"(?!\d)"


@pytest.fixture
def image_npy(tmp_path):
    """A valid input for demo.onnx: float32 [1,3,64,64] in [0,1)."""
    path = tmp_path / "image.npy"
    np.save(path, np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32))
    return path


# ---- invalid models (4) ----------------------------------------------------


def test_random_bytes_is_not_onnx(kiln, tmp_path):
    bad = tmp_path / "random_bytes.onnx"
    bad.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    res = kiln("run", bad, "--random-inputs", "--no-cache")
    assert_error(res, 4, "random_bytes.onnx")


def test_truncated_onnx(kiln, demo_onnx, tmp_path):
    data = demo_onnx.read_bytes()
    bad = tmp_path / "truncated.onnx"
    # The graph is one length-delimited field covering most of the file, so a
    # cut in the middle always leaves it shorter than its declared length.
    bad.write_bytes(data[: len(data) // 2])
    res = kiln("run", bad, "--random-inputs", "--no-cache")
    assert_error(res, 4, "truncated.onnx")


def test_missing_model_file_is_io_error(kiln, tmp_path):
    res = kiln("run", tmp_path / "no_such_model.onnx", "--random-inputs", "--no-cache")
    assert_error(res, 8, "no_such_model.onnx")


# ---- unsupported operator (5) ------------------------------------------------


@pytest.fixture
def foobar_onnx(tmp_path):
    """x [1,4] -> Relu -> FooBar (domain com.example, opset 3, node 'my_foobar_node') -> y."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
         helper.make_node("FooBar", ["r"], ["y"], name="my_foobar_node", domain="com.example")],
        "foobar",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 3)])
    model.ir_version = 8
    path = tmp_path / "foobar.onnx"
    onnx.save(model, path)
    return path


FOOBAR_NEEDLES = ("FooBar", "com.example", "my_foobar_node")
FOOBAR_OPSET_RX = (r"opset\D{0,12}\b3\b",)


def test_unsupported_operator_run(kiln, foobar_onnx):
    res = kiln("run", foobar_onnx, "--random-inputs", "--no-cache")
    assert_error(res, 5, *FOOBAR_NEEDLES, regexes=FOOBAR_OPSET_RX)


def test_unsupported_operator_compile(kiln, foobar_onnx, tmp_path):
    res = kiln("compile", foobar_onnx, "-o", tmp_path / "foobar.kiln")
    assert_error(res, 5, *FOOBAR_NEEDLES, regexes=FOOBAR_OPSET_RX)
    assert not (tmp_path / "foobar.kiln").exists(), "a failed compile must not leave an artifact"


# ---- invalid inputs (6) ----------------------------------------------------


def test_missing_input(kiln, demo_onnx):
    res = kiln("run", demo_onnx, "--no-cache")
    assert_error(res, 6, "image")


def test_missing_input_json_error_object(kiln, demo_onnx):
    res = kiln("run", demo_onnx, "--no-cache", "--json")
    msg = assert_error(res, 6, "image")
    obj = res.json()
    assert obj.get("error", {}).get("code") == "invalid_input", res.describe()
    assert obj["error"].get("message") == msg, res.describe()


def test_extra_input_name(kiln, demo_onnx, image_npy):
    res = kiln("run", demo_onnx, "--input", f"image={image_npy}", "--input", f"bogus_input={image_npy}",
               "--no-cache")
    assert_error(res, 6, "bogus_input")


def test_wrong_input_shape(kiln, demo_onnx, tmp_path):
    small = tmp_path / "small.npy"
    np.save(small, np.zeros((1, 3, 32, 32), np.float32))
    res = kiln("run", demo_onnx, "--input", f"image={small}", "--no-cache")
    assert_error(res, 6, "image", regexes=(dims_rx(1, 3, 64, 64), dims_rx(1, 3, 32, 32)))


def test_wrong_input_dtype(kiln, demo_onnx, tmp_path):
    f64 = tmp_path / "double.npy"
    np.save(f64, np.zeros((1, 3, 64, 64), np.float64))
    res = kiln("run", demo_onnx, "--input", f"image={f64}", "--no-cache")
    assert_error(res, 6, "image", regexes=(r"float64|double",))


def test_input_file_not_npy(kiln, demo_onnx, tmp_path):
    bad = tmp_path / "garbage.npy"
    bad.write_bytes(b"this is not a numpy file\n" * 10)
    res = kiln("run", demo_onnx, "--input", f"image={bad}", "--no-cache")
    assert_error(res, 6, "garbage.npy")


# ---- usage (2) ---------------------------------------------------------------


def test_empty_cache_dir_is_usage_error(kiln, tmp_path):
    # x.onnx does not exist: the option must be rejected before the model is read.
    res = kiln("run", tmp_path / "x.onnx", "--cache-dir", "")
    assert_error(res, 2, regexes=(r"cache[_-]dir",))


def test_unknown_target_is_usage_error(kiln, demo_onnx):
    res = kiln("run", demo_onnx, "--target", "tpu9000", "--random-inputs", "--no-cache")
    assert_error(res, 2, "tpu9000", regexes=(r"target",))


def test_unknown_option_is_usage_error(kiln, demo_onnx):
    res = kiln("run", demo_onnx, "--no-such-option")
    assert res.rc == 2, res.describe()
    assert "--no-such-option" in res.stderr, res.describe()


@pytest.mark.parametrize("args, needles", [
    (("--precision", "fp16"), ("precision", "fp16")),          # cpu computes fp32 only
    (("--precision", "fp8"), ("precision", "fp8")),            # unknown precision
    (("--tf32",), ("allow_tf32", "cpu")),                      # TF32 is a cuda option
])
def test_precision_options_on_cpu_are_usage_errors(kiln, demo_onnx, tmp_path, args, needles):
    res = kiln("run", demo_onnx, "--random-inputs", "--no-cache", *args)
    assert_error(res, 2, *needles)
    res = kiln("compile", demo_onnx, "-o", tmp_path / "d.kiln", *args)
    assert_error(res, 2, *needles)
    assert not (tmp_path / "d.kiln").exists()

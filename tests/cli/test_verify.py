"""`kiln verify`: the compiled program against the ref target, value by value.

Two test models built to lose precision at one node:
- lossy_layernorm (cpu, fp32): LayerNormalization of rows that are 1e5 plus a
  spread of ~0.5. The ref target accumulates the statistics in float64,
  oneDNN's layer normalization in float32, whose mean is off by ~1e-3 of the
  spread: the 'ln' value differs by ~4e-3 of its scale, 40x the fp32
  tolerance, and every value after it inherits the error.
- sigmoid_cancellation (cuda, fp16; conftest.py): Sigmoid(50 * (a - b)) of
  two feature maps near 100, where fp16's spacing is 1/16 (the issue's
  example). With the precision check off it loses precision at the
  subtraction; the check (on by default) keeps it in fp32. Needs a GPU:
  SKIPPED elsewhere.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from clihelp import assert_error, save_model

VERIFY_FAILED = 9  # docs/cli.md: some compared value is outside the tolerance


@pytest.fixture(scope="module")
def lossy_layernorm(tmp_path_factory):
    """x float32[1,256] -> MatMul + 1e5 -> LayerNormalization 'layernorm' ->
    Relu -> MatMul 'mm2' -> y float32[1,64]; returns (model, x.npy). One row:
    a matmul on every machine (two or more may run as a 1x1 convolution)."""
    d = tmp_path_factory.mktemp("verify_ln")
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.uniform(-0.05, 0.05, (256, 256)).astype(np.float32), "W1"),
        numpy_helper.from_array(np.full(256, 1e5, np.float32), "off"),
        numpy_helper.from_array(np.ones(256, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(256, np.float32), "beta"),
        numpy_helper.from_array(rng.uniform(-0.1, 0.1, (256, 64)).astype(np.float32), "W2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "off"], ["shifted"], name="shift"),
        helper.make_node("LayerNormalization", ["shifted", "gamma", "beta"], ["ln"], name="layernorm", axis=-1),
        helper.make_node("Relu", ["ln"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(nodes, "lossy_layernorm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    model = d / "lossy_layernorm.onnx"
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    x = d / "x.npy"
    np.save(x, rng.random((1, 256), dtype=np.float32))
    return model, x


def _layernorm_lowered(obj: dict) -> bool:
    ln = [v for v in obj["values"] if v["ref_value"] == "ln"]
    assert len(ln) == 1, obj["values"]
    return ln[0]["op"] != "LayerNormalization"


def test_verify_cpu_finds_the_layernorm_that_loses_precision(kiln, lossy_layernorm):
    model, x = lossy_layernorm
    res = kiln("verify", model, "--input", f"x={x}", "--json")
    obj = res.json()
    if not _layernorm_lowered(obj):
        pytest.skip("oneDNN has no fast layer normalization on this machine (the node computes like ref)")
    assert res.rc == VERIFY_FAILED, res.describe()
    assert obj["ok"] is False and obj["target"] == "cpu" and obj["precision"] == "fp32", obj
    assert obj["tolerance"] == {"rtol": 1e-4, "atol": 1e-5}, obj["tolerance"]
    values = obj["values"]
    # Execution order: the matmul with the offset Add fused into it, the
    # layer normalization, the Relu, the second matmul.
    assert [v["ref_value"] for v in values] == ["shifted", "ln", "r", "y"], values
    assert [v["index"] for v in values] == [0, 1, 2, 3]
    shifted = values[0]
    assert shifted["pass"] and shifted["op"] == "kiln.cpu::MatMul" and shifted["ref_op"] == "Add", shifted
    assert shifted["max_rel"] < 1e-6, shifted
    first = obj["first_failure"]
    assert first["node"] == "layernorm" and first["op"] == "kiln.cpu::LayerNorm" and first["value"] == "ln", first
    assert first["index"] == 1 and not first["pass"], first
    # Well over the tolerance, and a float32-statistics error, not garbage.
    assert 10 * 1e-4 < first["max_rel"] < 0.1, first
    assert first["max_rel"] == pytest.approx(first["max_abs"] / first["ref_max_abs"], rel=1e-9)
    assert first["bad_elements"] > 0 and first["elements"] == 256, first
    down = obj["downstream"]
    assert down["compared"] == 2 and down["failing"] == 2, down
    assert down["worst_value"] == "y" and down["worst_node"] == "mm2", down
    assert down["worst_rel"] > first["max_rel"], down
    assert len(obj["outputs"]) == 1 and obj["outputs"][0]["value"] == "y" and not obj["outputs"][0]["pass"]
    assert obj["compared"] == 4 and obj["skipped_count"] == 0 and obj["skipped"] == [], obj
    assert obj["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 256], "source": "file"}]

    # The same in text: the table, the first failing node and the growth.
    text = kiln("verify", model, "--input", f"x={x}")
    assert text.rc == VERIFY_FAILED, text.describe()
    assert "first failing node: layernorm (kiln.cpu::LayerNorm), value 'ln'" in text.stdout, text.describe()
    assert "downstream: 2 more values compared, 2 fail" in text.stdout, text.describe()
    assert "max rel error from there: layernorm" in text.stdout and "-> mm2" in text.stdout, text.describe()
    assert "(ref: Add 'shift')" in text.stdout, text.describe()
    assert "result: FAIL (exit 9)" in text.stdout, text.describe()

    # A tolerance that allows float32 statistics: everything passes, exit 0.
    loose = kiln("verify", model, "--input", f"x={x}", "--rtol", "0.1", "--atol", "0.001", "--json")
    assert loose.rc == 0, loose.describe()
    lobj = loose.json()
    assert lobj["ok"] is True and lobj["first_failure"] is None and lobj["downstream"] is None, lobj
    assert lobj["tolerance"] == {"rtol": 0.1, "atol": 0.001}
    assert all(v["pass"] for v in lobj["values"] + lobj["outputs"])


def test_verify_cpu_demo_passes_with_blocked_values_read_back(kiln, demo_onnx):
    res = kiln("verify", demo_onnx, "--json")
    assert res.rc == 0, res.describe()
    obj = res.json()
    assert obj["ok"] is True and obj["first_failure"] is None, obj
    assert obj["compared"] == len(obj["values"]) > 0
    assert all(v["pass"] and v["max_rel"] < 1e-5 for v in obj["values"]), obj["values"]
    # Convolutions write channel-blocked values on cpu; they are reordered back and compared.
    assert any(v["readback"] == "blocked" for v in obj["values"]), obj["values"]
    assert obj["inputs"][0]["source"] == "random"
    assert kiln("verify", demo_onnx).stdout.rstrip().splitlines()[-1].startswith("result: ok")


def test_verify_random_inputs_follow_the_seed(kiln, lossy_layernorm):
    model, _ = lossy_layernorm
    runs = [kiln("verify", model, "--seed", s, "--rtol", "1", "--json") for s in ("3", "3", "4")]
    for r in runs:
        assert r.rc == 0, r.describe()
    errs = [[v["max_abs"] for v in r.json()["values"]] for r in runs]
    assert errs[0] == errs[1], errs
    assert errs[0] != errs[2], errs


def test_verify_ref_against_itself_is_exact(kiln, sigmoid_cancellation):
    model, x = sigmoid_cancellation
    res = kiln("verify", model, "--target", "ref", "--input", f"x={x}", "--rtol", "0", "--atol", "0", "--json")
    assert res.rc == 0, res.describe()
    obj = res.json()
    assert [v["ref_value"] for v in obj["values"]] == ["a", "b", "d", "s", "y", "out"], obj["values"]
    assert all(v["max_abs"] == 0 for v in obj["values"]), obj["values"]


def test_verify_cuda_fp16_finds_the_sigmoid_that_loses_precision(kiln, sigmoid_cancellation):
    model, x = sigmoid_cancellation
    res = kiln("verify", model, "--target", "cuda", "--precision", "fp16", "--precision-check", "off",
               "--input", f"x={x}", "--json")
    if res.rc == 5 and ("no CUDA" in res.stderr or "without CUDA" in res.stderr):
        pytest.skip("SKIPPED: no CUDA device on this machine (kiln verify --target cuda needs one)")
    assert res.rc == VERIFY_FAILED, res.describe()
    obj = res.json()
    by_ref = {}
    for v in obj["values"]:
        by_ref.setdefault(v["ref_value"], []).append(v)
    # The fp16 feature maps near 100 are within tolerance (3e-4 of their scale) ...
    for fm in ("a", "b"):
        assert fm in by_ref and all(v["pass"] for v in by_ref[fm]), obj["values"]
    # ... the cancellation chain Sub -> Mul -> Sigmoid (one fused kernel) is not.
    first = obj["first_failure"]
    assert first["ref_value"] in ("d", "s", "y"), first
    assert first["max_rel"] > 0.05, first
    assert not obj["outputs"][0]["pass"], obj["outputs"]


def test_verify_cuda_fp16_passes_after_the_precision_check_keeps_the_subtraction(kiln, sigmoid_cancellation):
    """The issue's acceptance: the k = 50 head within 1e-2 once the check has
    kept its subtraction (and the convolutions feeding it) in fp32."""
    model, x = sigmoid_cancellation
    res = kiln("verify", model, "--target", "cuda", "--precision", "fp16", "--input", f"x={x}", "--json")
    if res.rc == 5 and ("no CUDA" in res.stderr or "without CUDA" in res.stderr):
        pytest.skip("SKIPPED: no CUDA device on this machine (kiln verify --target cuda needs one)")
    assert res.rc == 0, res.describe()
    obj = res.json()
    assert obj["ok"] is True, obj
    out = obj["outputs"][0]
    assert out["max_rel"] <= 1e-2, out
    assert any("precision check (fp16): kept" in n and "sub (Sub)" in n for n in obj["notes"]), obj["notes"]


def test_verify_errors(kiln, lossy_layernorm, tmp_path):
    model, x = lossy_layernorm
    art = tmp_path / "m.kiln"
    assert kiln("compile", model, "-o", art).rc == 0
    assert_error(kiln("verify", art), 2, "takes the ONNX model")
    assert_error(kiln("verify", model, "--precision", "fp16"), 2, "fp16")
    assert_error(kiln("verify", model, "--input", f"nope={x}"), 6, "unknown input 'nope'")
    assert_error(kiln("verify", model, "--input", f"x={tmp_path / 'missing.npy'}"), 8, "missing.npy")
    assert_error(kiln("verify", tmp_path / "missing.onnx"), 8, "missing.onnx")
    assert_error(kiln("verify", model, "--rtol", "-1"), 2, "--rtol")
    assert_error(kiln("verify", model, "--atol", "inf"), 2, "--atol")
    np.save(tmp_path / "bad.npy", np.zeros((4, 255), np.float32))
    res = kiln("verify", model, "--input", f"x={tmp_path / 'bad.npy'}", "--json")
    assert_error(res, 6, "'x'")
    assert res.json()["error"]["code"] == "invalid_input"

"""The precision check of fp16 / bf16 cuda compiles (issue 17, Build 4),
without a GPU: a cross-compile (`--arch sm_90 --tuning heuristic`) runs the
check on the host (ref kernels, 16-bit rounding emulated) and records it in
the artifact; `kiln inspect` shows it; `--precision-check off` skips it and
changes the cache key; a bad value is exit 2 naming the option. On a kiln
built without CUDA the cross-compile tests are SKIPPED, never passed."""

from __future__ import annotations

import numpy as np
import pytest

from clihelp import assert_error

KEPT = {"sub", "conv_a", "conv_b", "conv_a_bias", "conv_b_bias"}


def cross(kiln, model, out, *extra):
    res = kiln("compile", model, "-o", out, "--target", "cuda", "--arch", "sm_90", "--tuning", "heuristic",
               "--precision", "fp16", *extra)
    if res.rc == 5 and "without CUDA" in res.stderr:
        pytest.skip("SKIPPED: this kiln was built without CUDA support (no toolkit at build time)")
    return res


def test_cross_compile_keeps_the_cancelling_subtraction_in_fp32(kiln, sigmoid_cancellation, tmp_path):
    model, _ = sigmoid_cancellation
    out = tmp_path / "sig.kiln"
    res = cross(kiln, model, out)
    assert res.rc == 0, res.describe()
    # The compile's note names the nodes and the first reason.
    assert "kiln: note: precision check (fp16): kept 5 of 8 nodes in float32" in res.stderr, res.describe()
    assert "sub amplifies the 16-bit rounding of its inputs" in res.stderr, res.describe()

    ins = kiln("inspect", out, "--json")
    assert ins.rc == 0, ins.describe()
    check = ins.json()["precision_check"]
    assert check == ins.json()["metadata"]["precision_check"]
    assert check["state"] == "checked" and check["precision"] == "fp16", check
    assert check["inputs"] == "random (seed 0)" and check["bound"] == 0.01, check
    kept = {k["node"]: k for k in check["kept"]}
    assert set(kept) == KEPT, check["kept"]
    assert kept["sub"]["op"] == "Sub" and kept["sub"]["round"] == 1
    assert kept["sub"]["reason"].startswith("amplifies the 16-bit rounding of its inputs"), kept["sub"]
    assert kept["sub"]["error"] > 8 * kept["sub"]["input_error"], kept["sub"]
    assert kept["conv_a"]["reason"] == "feeds 'sub' (Sub), which amplifies its 16-bit rounding", kept["conv_a"]
    # Emulated: the output goes from far off to within fp16's tolerance.
    assert check["output_error_before"] > 0.1 and check["output_error_after"] < 1e-2, check
    assert check["rounds"] == 3, check

    # The share: the kept nodes and what they promote are float32, with why.
    share = ins.json()["precision_share"]
    assert share == ins.json()["metadata"]["precision_share"]
    assert share["precision"] == "fp16" and share["float_nodes"] == 8 and share["nodes_16bit"] == 1, share
    assert share["share"] == 0.125 and share["clamped_constants"] == 0, share
    why = {f["node"]: f["why"] for f in share["fp32"]}
    assert set(why) == KEPT | {"scale", "sigmoid"}, share
    assert why["sub"] == "kept in float32 by the precision check", why
    assert why["scale"] == "promoted: reads the float32 activation 'd'", why
    assert "kiln: note: 16-bit share (fp16): 1 of 8 float nodes store their values in 16 bits (12.5 %); 7 float32: " \
        in res.stderr, res.describe()

    text = kiln("inspect", out)
    assert text.rc == 0, text.describe()
    assert "16-bit share (fp16): 1 of 8 float nodes store their values in 16 bits (12.5 %)\n" in text.stdout, text.stdout
    assert "  float32: sigmoid (Sigmoid): promoted: reads the float32 activation 's'\n" in text.stdout, text.stdout
    assert "precision check (fp16): 5 of 8 nodes kept in float32 (random (seed 0) inputs;" in text.stdout, text.stdout
    assert "  sub (Sub): amplifies the 16-bit rounding of its inputs" in text.stdout, text.stdout
    assert "  conv_b (Conv): feeds 'sub' (Sub)" in text.stdout, text.stdout


def test_precision_check_off_skips_it_and_changes_the_key(kiln, sigmoid_cancellation, tmp_path):
    model, _ = sigmoid_cancellation
    on, off = tmp_path / "on.kiln", tmp_path / "off.kiln"
    assert cross(kiln, model, on, "--json").rc == 0
    res = cross(kiln, model, off, "--precision-check", "off", "--json")
    assert res.rc == 0, res.describe()
    notes = res.json()["notes"]
    assert notes[0] == "precision check (fp16) off: every node follows the precision policy", notes
    # The policy alone: every float node of the head is 16-bit.
    assert notes[1] == "16-bit share (fp16): 8 of 8 float nodes store their values in 16 bits (100.0 %)", notes
    i_on, i_off = kiln("inspect", on, "--json").json(), kiln("inspect", off, "--json").json()
    assert i_off["precision_check"] == {"state": "off", "precision": "fp16"}, i_off["precision_check"]
    assert "precision-check=off" in i_off["metadata"]["options"]
    assert i_on["compat"]["options_digest"] != i_off["compat"]["options_digest"]
    assert i_on["compat"]["cache_key"] != i_off["compat"]["cache_key"] or not i_on["compat"]["cache_key"]
    assert "precision check (fp16): off (--precision-check off)" in kiln("inspect", off).stdout
    # fp32 programs have no check, and the flag does not change their key.
    f1, f2 = tmp_path / "f1.kiln", tmp_path / "f2.kiln"
    args = ["--target", "cuda", "--arch", "sm_90", "--tuning", "heuristic"]
    assert kiln("compile", model, "-o", f1, *args).rc == 0
    assert kiln("compile", model, "-o", f2, *args, "--precision-check", "off").rc == 0
    j1, j2 = kiln("inspect", f1, "--json").json(), kiln("inspect", f2, "--json").json()
    assert j1["precision_check"] is None and j1["compat"]["options_digest"] == j2["compat"]["options_digest"]


def test_check_inputs_are_used_and_keyed(kiln, sigmoid_cancellation, tmp_path):
    model, _ = sigmoid_cancellation
    zeros = tmp_path / "zeros.npy"
    np.save(zeros, np.zeros((1, 4, 8, 8), np.float32))  # a == b exactly: nothing to amplify
    out = tmp_path / "z.kiln"
    res = cross(kiln, model, out, "--check-input", f"x={zeros}")
    assert res.rc == 0, res.describe()
    check = kiln("inspect", out, "--json").json()["precision_check"]
    assert check["inputs"] == "given for x" and check["kept"] == [], check
    digest = kiln("inspect", out, "--json").json()["compat"]["options_digest"]
    plain = tmp_path / "p.kiln"
    assert cross(kiln, model, plain).rc == 0
    assert kiln("inspect", plain, "--json").json()["compat"]["options_digest"] != digest
    assert_error(cross(kiln, model, out, "--check-input", "x"), 2, "--check-input 'x'")
    assert_error(cross(kiln, model, out, "--check-input", f"x={zeros}", "--precision-check", "off"), 2,
                 "precision_check_inputs")


@pytest.mark.parametrize("command", ["compile", "run", "verify", "perf"])
def test_a_bad_precision_check_value_is_exit_2_naming_the_option(kiln, demo_onnx, tmp_path, command):
    extra = ["-o", str(tmp_path / "x.kiln")] if command == "compile" else []
    res = kiln(command, demo_onnx, *extra, "--precision-check", "sometimes")
    assert_error(res, 2, "--precision-check", "sometimes")


@pytest.mark.parametrize("command", ["compile", "run", "verify", "perf"])
def test_check_input_is_parsed_alike_by_every_compiling_command(kiln, demo_onnx, tmp_path, command):
    # run / perf / verify take --check-input as compile does (the zoo's 16-bit cuda runs give the
    # OCR models' page to the check through `kiln run`): the same errors, exit 2 naming the flag.
    extra = ["-o", str(tmp_path / "x.kiln")] if command == "compile" else []
    assert_error(kiln(command, demo_onnx, *extra, "--check-input", "image"), 2, "--check-input 'image'",
                 "NAME=FILE.npy")
    img = tmp_path / "img.npy"
    np.save(img, np.zeros((1, 3, 64, 64), np.float32))
    assert_error(kiln(command, demo_onnx, *extra, "--check-input", f"image={img}", "--check-input",
                      f"image={img}"), 2, "--check-input", "'image' is given twice")
    assert_error(kiln(command, demo_onnx, *extra, "--check-input", f"image={img}", "--precision-check", "off"), 2,
                 "precision_check_inputs")


def test_run_refuses_check_input_with_an_artifact(kiln, demo_onnx, tmp_path):
    art = tmp_path / "demo.kiln"
    assert kiln("compile", demo_onnx, "-o", art).rc == 0
    img = tmp_path / "img.npy"
    np.save(img, np.zeros((1, 3, 64, 64), np.float32))
    assert_error(kiln("run", art, "--input", f"image={img}", "--check-input", f"image={img}"), 2,
                 "--check-input applies when compiling", str(art))


def test_perf_compiles_with_its_check_inputs(kiln, sigmoid_cancellation, tmp_path):
    # `kiln perf` compiles in its own process before timing: its --check-input reaches the check
    # (zeros: a == b exactly, nothing amplifies), where the default random samples keep 5 nodes.
    # Without a GPU the timing child fails (exit 3, the sm_90 artifact cannot load here); the
    # artifact --keep wrote is what is inspected.
    model, _ = sigmoid_cancellation
    zeros = tmp_path / "zeros.npy"
    np.save(zeros, np.zeros((1, 4, 8, 8), np.float32))
    args = ["--target", "cuda", "--arch", "sm_90", "--tuning", "heuristic", "--precision", "fp16", "--runs", "1"]
    kept = {}
    for name, extra in (("given", ["--check-input", f"x={zeros}"]), ("random", [])):
        out = tmp_path / f"{name}.kiln"
        res = kiln("perf", model, *args, *extra, "--keep", out)
        if res.rc == 5 and "without CUDA" in res.stderr:
            pytest.skip("SKIPPED: this kiln was built without CUDA support (no toolkit at build time)")
        assert res.rc in (0, 3), res.describe()
        check = kiln("inspect", out, "--json").json()["precision_check"]
        kept[name] = (check["inputs"], {k["node"] for k in check["kept"]})
    assert kept["given"] == ("given for x", set()), kept
    assert kept["random"] == ("random (seed 0)", KEPT), kept


def topk_ties_model(path):
    """x float32[1,64] -> scores = MatMul(x, Ws) [1,128] whose columns are
    equal up to 1e-6 (tied within fp16's rounding); (top, idx) = TopK 'topk'
    (scores, 4); feats = GatherElements 'pick'(MatMul(x, Wf), idx) [1,4] with
    Wf's columns far apart. Outputs top, feats."""
    from onnx import TensorProto, helper, numpy_helper, save_model

    rng = np.random.default_rng(3)
    col = rng.uniform(0, 1, (64, 1)).astype(np.float32)
    ws = (col + 1e-6 * rng.standard_normal((64, 128))).astype(np.float32)
    wf = rng.uniform(-1, 1, (64, 128)).astype(np.float32)
    inits = [numpy_helper.from_array(ws, "Ws"), numpy_helper.from_array(wf, "Wf"),
             numpy_helper.from_array(np.array([4], np.int64), "K")]
    nodes = [helper.make_node("MatMul", ["x", "Ws"], ["scores"], name="score"),
             helper.make_node("MatMul", ["x", "Wf"], ["fe"], name="feature"),
             helper.make_node("TopK", ["scores", "K"], ["top", "idx"], name="topk", axis=1),
             helper.make_node("GatherElements", ["fe", "idx"], ["feats"], name="pick", axis=1)]
    graph = helper.make_graph(nodes, "topk_ties", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, 4]),
                               helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 4])], inits)
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_selection_on_ties_bounds_the_check_instead_of_amplifying(kiln, tmp_path):
    # The gathered features differ wholesale where fp16 flips a near tie;
    # the check compares the scores deciding the TopK instead, keeps nothing,
    # and says which node bounded it (JSON and inspect's text).
    model, out = tmp_path / "ties.onnx", tmp_path / "ties.kiln"
    topk_ties_model(model)
    res = cross(kiln, model, out)
    assert res.rc == 0, res.describe()
    assert "1 selection-dependent values not compared, bounded by 1 selecting node(s): topk (TopK)" in res.stderr, \
        res.describe()
    check = kiln("inspect", out, "--json").json()["precision_check"]
    assert check["state"] == "checked" and check["kept"] == [], check
    assert check["selection_dependent"] == 1, check
    assert [(b["node"], b["op"], b["values"]) for b in check["boundaries"]] == [("topk", "TopK", ["scores"])], check
    assert check["boundaries"][0]["error"] < 1e-2 and check["output_error_after"] < 1e-2, check
    assert "control_flow" not in check, check
    text = kiln("inspect", out)
    assert text.rc == 0, text.describe()
    assert "selection: topk (TopK) decided by scores (error " in text.stdout, text.stdout

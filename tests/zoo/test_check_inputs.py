"""The zoo's precision-check wiring (tools/models/zoo.py check_one, issue 17):
a 16-bit cuda run of a model whose zoo input is representative data
(ZooModel.check_sample, the OCR pages) gives that input to kiln's precision
check with `--check-input`, the same file as `--input`; other models, fp32
runs and runs with the check off pass none. The report says which inputs the
check used and how many nodes it kept.

No export and no GPU: a two-node model made here, and a stand-in for the kiln
binary that records its command line, checks that each --check-input file
holds the same tensor as the --input of that name, computes the model's output
and prints kiln run's JSON with a precision-check note. Runs in a second."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "models"))
import zoo  # noqa: E402
from zoo_models import ZooModel, image_inputs, text_image_inputs  # noqa: E402

FAKE_KILN = textwrap.dedent("""\
    #!{python}
    # Stands in for `kiln run MODEL --input N=F ... --output-dir D ... --json`: y = 2 x; and for
    # `kiln inspect ART --json` (FAKE_KILN_INSPECT: its precision_check).
    import json, os, sys
    import numpy as np
    argv = sys.argv[1:]
    if argv[0] == "inspect":
        print(json.dumps({{"precision_check": json.loads(os.environ["FAKE_KILN_INSPECT"])}}))
        sys.exit(0)
    pairs = lambda flag: dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == flag)
    inputs, checks = pairs("--input"), pairs("--check-input")
    same = {{n: bool(np.array_equal(np.load(f), np.load(inputs[n]))) for n, f in checks.items()}}
    out_dir = argv[argv.index("--output-dir") + 1]
    os.makedirs(out_dir, exist_ok=True)
    y = os.path.join(out_dir, "y.npy")
    np.save(y, 2 * np.load(inputs["x"]))
    with open(os.environ["FAKE_KILN_LOG"], "a") as log:
        log.write(json.dumps({{"argv": argv, "check_same_as_input": same}}) + "\\n")
    notes = ["precision check (fp16): kept 1 of 1 nodes in float32: twice (Add); first: twice 16-bit rounding "
             "accumulates over the graph; output error 2.0e-02 -> 0.0e+00 (`kiln inspect` lists each and why)"]
    art = os.path.join(out_dir, "entry.kiln")
    open(art, "w").close()
    if os.environ.get("FAKE_KILN_INSPECT"):
        notes = []  # a program specialized at run time: the note went to the log
    print(json.dumps({{"run_ms": 1.0, "compile_ms": 2.0, "notes": notes, "reference_nodes": [],
                      "artifact": art, "outputs": [{{"name": "y", "file": y}}]}}))
""")


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    """(model directory, fake kiln, its log file): tiny.onnx is y = x + x over float32 [1, 3, 8, 8]."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="twice")], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "tiny.onnx"))
    kiln = tmp_path / "kiln"
    kiln.write_text(FAKE_KILN.format(python=sys.executable))
    kiln.chmod(kiln.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "kiln.log"
    monkeypatch.setenv("FAKE_KILN_LOG", str(log))
    (tmp_path / "logs").mkdir()
    return tmp_path, kiln, log


def check(setup, monkeypatch, sample: bool, kiln_args: str) -> tuple[dict, dict]:
    directory, kiln, log = setup
    monkeypatch.setenv("KILN_ZOO_KILN_ARGS", kiln_args)
    make = text_image_inputs([1, 3, 8, 8]) if sample else image_inputs([1, 3, 8, 8])
    m = ZooModel(name="tiny", family="wheel", source="test", inputs=make, check_sample=sample)
    res = zoo.check_one(m, directory, kiln, 60, False, directory / "logs")
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    log.unlink()
    assert len(runs) == 1, runs
    return res, runs[0]


def test_a_sixteen_bit_cuda_run_gives_the_zoo_input_to_the_check(setup, monkeypatch):
    res, run = check(setup, monkeypatch, True, "--target cuda --precision fp16 --tuning heuristic")
    assert res["result"] == "PASS", res
    argv = run["argv"]
    i = argv.index("--check-input")
    assert argv[i + 1] == argv[argv.index("--input") + 1], argv  # the very file kiln runs on
    assert argv.count("--check-input") == 1 and run["check_same_as_input"] == {"x": True}, run
    assert res["check_inputs"] == "the zoo's input (--check-input)", res
    assert res["check_kept"] == "kept 1 of 1 nodes", res
    # The report says what the check sampled and what it kept.
    table = zoo.table([res])
    assert "| precision check inputs |" in table.splitlines()[0], table
    assert "| the zoo's input (--check-input): kept 1 of 1 nodes |" in table.splitlines()[2], table


def test_without_a_note_the_kept_count_comes_from_the_artifact(setup, monkeypatch):
    monkeypatch.setenv("FAKE_KILN_INSPECT", json.dumps({"state": "checked", "nodes": 388, "kept": [
        {"node": f"n{i}", "op": "Conv", "reason": "16-bit rounding accumulates over the graph"} for i in range(346)]}))
    res, run = check(setup, monkeypatch, True, "--target cuda --precision fp16")
    assert res["result"] == "PASS" and res["check_kept"] == "kept 346 of 388 nodes", res
    monkeypatch.setenv("FAKE_KILN_INSPECT", json.dumps({"state": "skipped", "reason": "a subgraph"}))
    res, run = check(setup, monkeypatch, True, "--target cuda --precision fp16")
    assert res["check_kept"] is None and zoo.check_text(res) == "the zoo's input (--check-input)", res


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_model_without_a_sample_keeps_kiln_s_random_check_inputs(setup, monkeypatch, precision):
    res, run = check(setup, monkeypatch, False, f"--target cuda:0 --precision={precision}")
    assert res["result"] == "PASS", res
    assert "--check-input" not in run["argv"], run
    assert res["check_inputs"] == "random (kiln's)", res
    assert "| random (kiln's): kept 1 of 1 nodes |" in zoo.table([res]), zoo.table([res])


@pytest.mark.parametrize("args", ["--target cuda --tuning heuristic", "--target cuda --precision fp16 "
                                  "--precision-check off", "", "--target cpu --precision fp16"])
def test_no_check_no_check_inputs(setup, monkeypatch, args):
    res, run = check(setup, monkeypatch, True, args)
    assert res["result"] == "PASS", res
    assert "--check-input" not in run["argv"], run
    assert res["check_inputs"] is None, res
    # The table keeps its columns when no run was checked (cpu and fp32 reports unchanged).
    assert "precision check inputs" not in zoo.table([res]), zoo.table([res])


def test_the_ocr_models_are_the_ones_with_a_sample():
    sampled = sorted(m.name for m in zoo.select(None) if m.check_sample)
    assert sampled == ["rapidocr_cls_v2", "rapidocr_det_v4", "rapidocr_rec_v4"], sampled


@pytest.mark.parametrize("text,expected", [
    ("precision check (fp16): kept 265 of 265 nodes in float32: a (Conv); first: a x", "kept 265 of 265 nodes"),
    ("precision check (bf16): no node amplifies 16-bit rounding (12 nodes, outputs within 1e-3 of their scale on "
     "random (seed 0) inputs)", "kept 0 of 12 nodes"),
    ("precision check (fp16) off: every node follows the precision policy", None),
])
def test_the_kept_count_is_read_from_kiln_s_note(text, expected):
    assert zoo.precision_check_kept([text], "") == expected
    assert zoo.precision_check_kept([], f"kiln: note: {text}\n") == expected

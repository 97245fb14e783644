"""Every dev model through an onnxruntime session with the kiln EP on the CPU
device matches ORT's own CPU EP (|kiln - ort| <= 1e-4 + 1e-3 |ort|), and every
node is assigned to kiln, at ORT's default optimization level (ORT_ENABLE_ALL:
ORT's basic fusions, e.g. MatMul+Add -> Gemm, reach kiln first) and with
optimizations off. A second session in a new process loads from kiln's cache;
its creation time is printed against the CPU EP's and the first session's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import EP_NAME, MODELS, ROOT, assert_close, assignment, feeds_for, kiln_session, ort, reference, session_options

DEV_MODELS = ["demo", "silero_vad", "yolov8n", "mobilenet_v3_small", "resnet50", "bert_base"]


@pytest.mark.parametrize("opt_level", ["all", "off"])
@pytest.mark.parametrize("name", DEV_MODELS)
def test_dev_model_matches_cpu_ep_and_runs_whole_on_kiln(lib, name, opt_level):
    path = MODELS / f"{name}.onnx"
    feeds = feeds_for(name, path)
    names, refs = reference(path, feeds)
    sess = kiln_session(path, session_options(opt_level))
    where = assignment(sess)
    if name == "silero_vad" and tuple(int(x) for x in ort().__version__.split(".")[:2]) < (1, 31):
        # ORT before 1.31 does not pass the outer-scope values of the If's
        # branches to a fused node: kiln leaves the If (and so its branches)
        # to ORT there, and takes every other node of the main graph.
        import onnx

        main = [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node if n.op_type != "If"]
        assert "If" in where.get("CPUExecutionProvider", []), where
        assert sorted(where.get(EP_NAME, [])) == sorted(main), where
        where.pop("CPUExecutionProvider")
    assert set(where) == {EP_NAME}, f"{name}: nodes assigned to {where}"
    outs = sess.run(None, feeds)
    assert [o.name for o in sess.get_outputs()] == names
    for oname, got, want in zip(names, outs, refs):
        assert_close(got, want, what=f"{name} ({opt_level}) output {oname!r}")
    print(f"{name} ({opt_level}): {len(where[EP_NAME])} nodes on kiln")


# A fresh process: creation time of (1) a CPU EP session, (2) a kiln EP session
# on the same model (whose partition is in kiln's cache by now), as JSON.
SECOND = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import conftest
rt = conftest.ort()
model = sys.argv[1]
so = rt.SessionOptions(); so.log_severity_level = 3
t = time.perf_counter(); rt.InferenceSession(model, so, providers=["CPUExecutionProvider"]); cpu = time.perf_counter() - t
so = conftest.session_options("all", options={"cache_dir": sys.argv[2]}, record=False)
so.log_severity_level = 1
t = time.perf_counter(); s = rt.InferenceSession(model, so, enable_fallback=0); kiln = time.perf_counter() - t
print(json.dumps({"cpu_s": cpu, "kiln_s": kiln}))
"""


@pytest.mark.parametrize("name", ["resnet50", "bert_base"])
def test_second_session_in_new_process_loads_from_cache(lib, name, tmp_path):
    path = MODELS / f"{name}.onnx"
    cache = tmp_path / "cache"  # empty: the first session compiles
    t = time.perf_counter()
    kiln_session(path, session_options("all", options={"cache_dir": str(cache)}, record=False))
    first = time.perf_counter() - t
    r = subprocess.run([sys.executable, "-c", SECOND, str(path), str(cache), str(ROOT / "ort_ep" / "tests")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "loaded from kiln's cache" in r.stderr, r.stderr[-3000:]
    t2 = json.loads(r.stdout.strip().splitlines()[-1])
    rt = ort()
    print(f"\nbench: onnxruntime {rt.__version__} {name}: second kiln EP session (new process) "
          f"{t2['kiln_s']:.2f} s = {t2['kiln_s'] / t2['cpu_s']:.2f}x the CPU EP session ({t2['cpu_s']:.2f} s), "
          f"{t2['kiln_s'] / first:.2f}x the first kiln session, which compiled ({first:.2f} s)")

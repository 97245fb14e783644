#!/usr/bin/env python3
"""The kiln ONNX Runtime plugin EP on the GPU machine (issue #18's H200
acceptance), run by scripts/device/ort_ep_gpu.sh with an installed kiln wheel
built with CUDA (it holds kiln/lib/libkiln_ort_ep.so) and that machine's
onnxruntime (the PyPI CPU wheel: it discovers the GPU as an NVIDIA device).

1. The devices ORT offers the kiln EP (type, vendor, metadata), ORT's version,
   `uname -r` (GPU discovery differs between VM runtimes).
2. ResNet-50 and BERT-base (bench/make_gpu_models.py, batch 1) in fp16: an
   ORT session with the kiln EP on the GPU device against kiln's own Session
   (same precision, same cache directory), median latency of R runs on host
   (numpy) inputs each; the ratio must be <= 1.1. Outputs against ORT's CPU EP
   (fp32; fp16 tolerance).
3. EPContext with the artifact beside the model (ep.context_embed_mode=0): in a
   fresh process, with onnxruntime already imported, the InferenceSession(...)
   call on that model must take <= 0.5 s; also the time from process start to
   the first result.

4. The EP option `fallback` (kiln's SessionOptions::fallback) on a model whose
   middle node (Det) the cuda target cannot lower: `host` runs it on the host
   inside kiln's program (every node on kiln, outputs as ORT's CPU EP);
   `error` fails the session naming the node.

Writes every figure to --out (JSON) and a summary to stdout; exit 1 when a
check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

CHILD = r"""
import json, sys, time
t_import0 = time.perf_counter()
import numpy as np
import onnxruntime as ort
import kiln.ort
t_imported = time.perf_counter()
model, feeds_npz, cache = sys.argv[1:4]
ort.register_execution_provider_library("kiln", kiln.ort.get_library_path())
kind, prec = sys.argv[4:6]
devs = [d for d in ort.get_ep_devices() if d.ep_name in kiln.ort.get_ep_names() and kind in str(d.device.type)]
so = ort.SessionOptions(); so.log_severity_level = 1
so.add_provider_for_devices(devs, {"precision": prec, "cache_dir": cache})
t0 = time.perf_counter()
s = ort.InferenceSession(model, so, enable_fallback=0)
t1 = time.perf_counter()
feeds = dict(np.load(feeds_npz))
s.run(None, feeds)
t2 = time.perf_counter()
start = open("/proc/self/stat").read().split(")")[1].split()[19]
import os
clk = os.sysconf("SC_CLK_TCK"); up = float(open("/proc/uptime").read().split()[0])
since_start = up - int(start) / clk
print(json.dumps({"session_s": t1 - t0, "first_run_s": t2 - t1, "process_start_to_result_s": since_start,
                  "import_s": t_imported - t_import0}))
"""


def median_ms(fn, runs, warmup=5):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def fallback_checks(ort, devices, prec, work, res):
    """Step 4: x[2,3,3] -> Relu -> Det -> Mul 2 -> y[2] with fallback=host and =error."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.full((1,), 2.0, np.float32), "two")
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Det", ["r"], ["d"], name="det1"),
             helper.make_node("Mul", ["d", "two"], ["y"], name="scale")]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [two])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(work / "det.onnx")
    onnx.save(m, path)
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 3, 3)).astype(np.float32) + np.eye(3, dtype=np.float32)}
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = {}
    for mode in ("host", "error"):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        so.add_provider_for_devices(devices, {"precision": prec, "cache_dir": str(work / "cache"), "fallback": mode})
        try:
            s = ort.InferenceSession(path, so, enable_fallback=0)
            got = s.run(None, feeds)[0]
            r[mode] = {"ok": True, "max_abs_err": float(np.abs(got - ref).max()),
                       "assigned": sorted({sub.ep_name for sub in s.get_provider_graph_assignment_info()})}
        except Exception as e:  # noqa: BLE001 - the error's text is the result
            r[mode] = {"ok": False, "error": str(e)[-600:]}
        print(f"fallback={mode}: {r[mode]}")
    h, e = r["host"], r["error"]
    res["checks"]["fallback_host_runs_on_kiln"] = h["ok"] and h["assigned"] == ["KilnExecutionProvider"] and \
        h["max_abs_err"] <= 1e-2 * max(1.0, float(np.abs(ref).max()))
    res["checks"]["fallback_error_names_the_node"] = not e["ok"] and "det1" in e["error"] and "fallback" in e["error"]
    res["fallback"] = r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/ort_ep_gpu")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out") + "/ort_ep_gpu.json")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base"])
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                    help="cpu: the same steps on the CPU device in fp32 (tries the plumbing on a machine without a GPU)")
    a = ap.parse_args()
    kind, prec, target = ("GPU", "fp16", "cuda") if a.device == "gpu" else ("CPU", "fp32", "cpu")
    import kiln
    import kiln.ort
    import onnxruntime as ort
    import make_gpu_models as mgm

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    cache = str(work / "cache")
    res = {"uname_r": platform.release(), "onnxruntime": ort.__version__, "kiln": kiln.__version__,
           "checks": {}, "models": {}}
    ort.register_execution_provider_library("kiln", kiln.ort.get_library_path())
    res["ep_devices"] = [{"ep": d.ep_name, "type": str(d.device.type), "vendor_id": d.device.vendor_id,
                          "device_id": d.device.device_id, "metadata": dict(d.device.metadata)}
                         for d in ort.get_ep_devices()]
    print(json.dumps(res["ep_devices"], indent=1))
    gpus = [d for d in ort.get_ep_devices() if d.ep_name in kiln.ort.get_ep_names() and kind in str(d.device.type)]
    res["checks"]["kiln_gpu_device_offered"] = bool(gpus)
    if not gpus:
        print("FAIL: ORT offers the kiln EP no GPU device")
        Path(a.out).write_text(json.dumps(res, indent=1))
        return 1
    for name in a.models:
        path = str(work / f"{name}.onnx")
        if not Path(path).exists():
            mgm.export_model(name, 1, path)
        feeds = mgm.make_inputs(name, 1)
        r = {}
        t = time.perf_counter()
        ks = kiln.Session(path, target=target, precision=prec, cache_dir=cache)
        r["kiln_session_s"] = time.perf_counter() - t
        kout = ks.run(feeds)
        r["kiln_ms"] = median_ms(lambda: ks.run(feeds), a.runs)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        so.add_provider_for_devices(gpus, {"precision": prec, "cache_dir": cache})
        t = time.perf_counter()
        s = ort.InferenceSession(path, so, enable_fallback=0)
        r["ort_kiln_session_s"] = time.perf_counter() - t
        r["assigned"] = sorted({sub.ep_name for sub in s.get_provider_graph_assignment_info()})
        out = s.run(None, feeds)
        r["ort_kiln_ms"] = median_ms(lambda: s.run(None, feeds), a.runs)
        r["ratio"] = r["ort_kiln_ms"] / r["kiln_ms"]
        ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
        r["max_abs_err_vs_cpu_ep"] = float(max(np.abs(np.asarray(o, np.float64) - np.asarray(w, np.float64)).max()
                                               for o, w in zip(out, ref)))
        r["max_abs_err_vs_kiln"] = float(max(np.abs(np.asarray(o, np.float64) - np.asarray(k, np.float64)).max()
                                             for o, k in zip(out, kout.values())))
        res["checks"][f"{name}_within_1.1x"] = r["ratio"] <= 1.1
        res["checks"][f"{name}_all_on_kiln"] = r["assigned"] == ["KilnExecutionProvider"]
        print(f"{name} {prec}: kiln Session {r['kiln_ms']:.3f} ms, ORT + kiln EP {r['ort_kiln_ms']:.3f} ms "
              f"({r['ratio']:.3f}x), max |err| vs CPU EP {r['max_abs_err_vs_cpu_ep']:.3g}, vs kiln {r['max_abs_err_vs_kiln']:.3g}")
        # EPContext, artifact beside the model, then a fresh process.
        ctx = work / f"{name}_ctx.onnx"
        so = ort.SessionOptions()
        so.log_severity_level = 3
        for k, v in {"ep.context_enable": "1", "ep.context_file_path": str(ctx), "ep.context_embed_mode": "0"}.items():
            so.add_session_config_entry(k, v)
        so.add_provider_for_devices(gpus, {"precision": prec, "cache_dir": cache})
        ort.InferenceSession(path, so, enable_fallback=0)
        np.savez(work / f"{name}_feeds.npz", **feeds)
        p = subprocess.run([sys.executable, "-c", CHILD, str(ctx), str(work / f"{name}_feeds.npz"),
                            str(work / "cache_child"), kind, prec], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(p.stderr[-3000:])
            r["epcontext_error"] = p.stderr[-2000:]
            res["checks"][f"{name}_epcontext_session_le_0.5s"] = False
        else:
            c = json.loads(p.stdout.strip().splitlines()[-1])
            r["epcontext"] = c
            r["epcontext_no_compile"] = "loaded from EPContext node" in p.stderr
            res["checks"][f"{name}_epcontext_session_le_0.5s"] = c["session_s"] <= 0.5 and r["epcontext_no_compile"]
            print(f"{name} EPContext (external .kiln), fresh process: InferenceSession {c['session_s']:.3f} s, "
                  f"first run {c['first_run_s']:.3f} s, process start to first result "
                  f"{c['process_start_to_result_s']:.2f} s (import {c['import_s']:.2f} s)")
        res["models"][name] = r
    if a.device == "gpu":
        fallback_checks(ort, gpus, prec, work, res)
    Path(a.out).write_text(json.dumps(res, indent=1))
    failed = [k for k, v in res["checks"].items() if not v]
    print("uname -r:", res["uname_r"], "| onnxruntime", res["onnxruntime"])
    print("FAILED checks: " + ", ".join(failed) if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""ONNX Runtime + the kiln EP against kiln's own Session, host (numpy) inputs
and outputs, with the EP's two output paths side by side (issue #18: BERT-base
fp16 on the H200 was 1.111x of kiln's Session, goal <= 1.1x):

  in_place  the EP asks kiln for the output shapes, ORT allocates its output
            tensors first and kiln writes into them (Session::run_into): the
            cuda target's device-to-host copies land in ORT's buffers;
  copy      KILN_ORT_EP_COPY_OUTPUTS=1 (read when a partition is compiled):
            kiln allocates its own host outputs, then the EP copies each into
            ORT's tensor (the path before run_into).

All three (kiln Session, in_place, copy) live in one process and are timed in
interleaved rounds (the order rotates each round), so machine noise hits them
alike; each round gives each a median of --runs runs; the figures are the
medians over rounds, and the ratios are per round, then their median.

Models: bench/make_gpu_models.py's (random weights, batch 1, BERT sequence
128), exported into --work unless --model-dir holds NAME.onnx already; and
`io_bound`: x[1,128,768] -> Add 1 -> Relu -> y (BERT's last_hidden_state
shape, almost no compute), where the output path is most of the time.

  # here (CPU device, fp32); kiln's Python module on PYTHONPATH, the EP
  # library from the build (a kiln wheel without the plugin is fine):
  OMP_WAIT_POLICY=PASSIVE KILN_ORT_EP_LIB=build/ort_ep/libkiln_ort_ep.so \\
    .venv/bin/python bench/ort_ep_io.py --device cpu --model-dir .models --models bert_base
  # the H200 (GPU device, fp16), through scripts/device/ort_ep_gpu.sh:
  KILN_ORT_EP_GPU_SCRIPT=bench/ort_ep_io.py bash scripts/device/ort_ep_gpu.sh --device gpu

Writes --out (JSON) and a summary to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

COPY_ENV = "KILN_ORT_EP_COPY_OUTPUTS"


def median_ms(fn, runs):
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def ep_session(ort, path, devices, options, copy):
    """An ORT session with the kiln EP; `copy` sets KILN_ORT_EP_COPY_OUTPUTS
    while its partitions are compiled."""
    os.environ[COPY_ENV] = "1" if copy else "0"
    try:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        so.add_provider_for_devices(devices, options)
        s = ort.InferenceSession(str(path), so, enable_fallback=0)
    finally:
        os.environ.pop(COPY_ENV, None)
    assigned = sorted({sub.ep_name for sub in s.get_provider_graph_assignment_info()})
    return s, assigned


def io_bound_model(path):
    """x[1,128,768] fp32 -> Add 1 -> Relu -> y: BERT-base's output size, little compute."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    one = numpy_helper.from_array(np.ones((1,), np.float32), "one")
    nodes = [helper.make_node("Add", ["x", "one"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "io_bound", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 768])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 768])], [one])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return {"x": np.random.default_rng(0).standard_normal((1, 128, 768)).astype(np.float32)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--models", nargs="+", default=["bert_base", "resnet50", "io_bound"])
    ap.add_argument("--model-dir", default="", help="folder holding NAME.onnx (else exported into --work)")
    ap.add_argument("--work", default="/tmp/ort_ep_io")
    ap.add_argument("--runs", type=int, default=0, help="runs per round (default: 50 gpu, 10 cpu)")
    ap.add_argument("--rounds", type=int, default=0, help="interleaved rounds (default: 10 gpu, 5 cpu)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out") + "/ort_ep_io.json")
    a = ap.parse_args()
    gpu = a.device == "gpu"
    runs = a.runs or (50 if gpu else 10)
    rounds = a.rounds or (10 if gpu else 5)
    kind, prec, target = ("GPU", "fp16", "cuda") if gpu else ("CPU", "fp32", "cpu")

    import kiln
    import onnxruntime as ort

    lib = os.environ.get("KILN_ORT_EP_LIB")
    if not lib:
        import kiln.ort

        lib = kiln.ort.get_library_path()
    lib = Path(lib).resolve()  # ORT resolves a relative path against its own folder
    ort.register_execution_provider_library("kiln", str(lib))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "KilnExecutionProvider" and kind in str(d.device.type)]
    if not devices:
        print(f"FAIL: ORT offers the kiln EP no {kind} device")
        return 1
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    cache = str(work / "cache")
    options = {"precision": prec, "cache_dir": cache}
    res = {"uname_r": platform.release(), "onnxruntime": ort.__version__, "device": a.device, "precision": prec,
           "runs_per_round": runs, "rounds": rounds, "ep_library": str(lib), "models": {}}
    import make_gpu_models as mgm

    for name in a.models:
        if name == "io_bound":
            path = work / "io_bound.onnx"
            feeds = io_bound_model(path)
        else:
            path = Path(a.model_dir) / f"{name}.onnx" if a.model_dir else work / f"{name}.onnx"
            if not path.exists():
                mgm.export_model(name, 1, str(path))
            feeds = mgm.make_inputs(name, 1)
        ks = kiln.Session(str(path), target=target, precision=prec, cache_dir=cache)
        inplace, assigned_i = ep_session(ort, path, devices, options, copy=False)
        copy, assigned_c = ep_session(ort, path, devices, options, copy=True)
        fns = {"kiln_session": lambda: ks.run(feeds), "ep_in_place": lambda: inplace.run(None, feeds),
               "ep_copy": lambda: copy.run(None, feeds)}
        kout = list(ks.run(feeds).values())
        out_i, out_c = inplace.run(None, feeds), copy.run(None, feeds)
        for f in fns.values():  # warm-up: arenas, first touches, CUDA graphs
            for _ in range(max(3, runs // 5)):
                f()
        per = {k: [] for k in fns}
        order = list(fns)
        for r in range(rounds):
            for k in order[r % 3:] + order[:r % 3]:
                per[k].append(median_ms(fns[k], runs))
        ratio = {k: statistics.median(per[k][i] / per["kiln_session"][i] for i in range(rounds))
                 for k in ("ep_in_place", "ep_copy")}
        m = {
            "model": str(path),
            "assigned": {"in_place": assigned_i, "copy": assigned_c},
            "ms": {k: statistics.median(v) for k, v in per.items()},
            "ms_per_round": per,
            "ratio_vs_kiln_session": ratio,
            "in_place_vs_copy": statistics.median(per["ep_in_place"][i] / per["ep_copy"][i] for i in range(rounds)),
            "max_abs_diff_in_place_vs_copy": float(max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max()
                                                      for x, y in zip(out_i, out_c))),
            "max_abs_diff_in_place_vs_kiln": float(max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max()
                                                      for x, y in zip(out_i, kout))),
        }
        res["models"][name] = m
        print(f"{name} {prec} on the {kind} device: kiln Session {m['ms']['kiln_session']:.3f} ms | "
              f"ORT + kiln EP in place {m['ms']['ep_in_place']:.3f} ms ({ratio['ep_in_place']:.3f}x) | "
              f"copy {m['ms']['ep_copy']:.3f} ms ({ratio['ep_copy']:.3f}x) | in place / copy "
              f"{m['in_place_vs_copy']:.3f} | assigned {assigned_i} | max |diff| in place vs copy "
              f"{m['max_abs_diff_in_place_vs_copy']:.3g}, vs kiln {m['max_abs_diff_in_place_vs_kiln']:.3g}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print("uname -r:", res["uname_r"], "| onnxruntime", res["onnxruntime"], "| runs", runs, "x rounds", rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The Python package's GPU acceptance checks (issue #19), run on a GPU machine
by scripts/device/python_gpu.sh with an installed kiln (a wheel built with CUDA)
and torch with CUDA:

1. ResNet-50 (bench/make_gpu_models.py: torchvision, seed-0 random weights,
   1x3x224x224, exported here) compiled for cuda fp16 through a cache; a torch
   CUDA tensor through DLPack: outputs against the host (numpy) path of the same
   Session and against torch eager fp32.
2. torch.profiler over device runs: no host-to-device or device-to-host copy
   (memcpy) while run() runs; the same profile of host runs must show them (the
   control: a profile that saw no copy there could not see kiln's work at all).
3. Latency: Session.run on torch tensors (outputs preallocated, as `kiln perf`
   does, and outputs allocated by kiln) and Session.bind(...).run() against
   Session::run_device in C++ (`kiln perf --child` on the same cache entry,
   before and after); torch's own __dlpack__ cost is timed alone.
4. Threads: T Python threads share the Session, R runs each, each thread its
   own input and torch stream; every output must equal that thread's
   single-thread output (bitwise), and the throughput says whether runs overlap.
5. Processes: P processes create the same Session at once (a) on the warm cache
   (every one a hit) and (b) on an empty cache (one compiles, the others wait
   for its lock or compile too; none fails); outputs equal the reference.

Writes one JSON object (every figure, the commands) to --out and a summary on
stdout; exits 1 when a check fails. `--child` is the per-process part of 5.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
MODEL_OPTS = dict(target="cuda", precision="fp16")


def child(a: argparse.Namespace) -> int:
    """One of the P processes: Session through the cache, one host run; JSON on stdout."""
    import kiln

    t0 = time.perf_counter()
    s = kiln.Session(a.model, cache_dir=a.cache, **MODEL_OPTS)
    wall_ms = (time.perf_counter() - t0) * 1e3
    x = np.load(a.input)
    y = s.run({"input": x})["logits"]
    np.save(a.output, y)
    st = s.stats
    print(json.dumps({"pid": os.getpid(), "cache": st.cache, "compile_ms": st.compile_ms, "load_ms": st.load_ms,
                      "session_ms": wall_ms, "notes": st.notes}))
    return 0


def median_ms(samples: list) -> float:
    return statistics.median(samples) * 1e3


def time_runs(fn, runs: int, warmup: int) -> list:
    for _ in range(warmup):
        fn()
    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        lat.append(time.perf_counter() - t0)
    return lat


def cpp_latency(cli: str, artifact: str, runs: int, warmup: int) -> dict:
    """Session::run_device latency in C++ on the same artifact (kiln perf's child: device inputs and outputs)."""
    cmd = [cli, "perf", "--child", artifact, "--target", "cuda", "--runs", str(runs), "--warmup", str(warmup), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"command": " ".join(cmd), "device_io_median_ms": j["latency_device_io_ms_median"],
            "device_io_p90_ms": j["latency_device_io_ms_p90"], "host_io_median_ms": j["latency_ms_median"]}


def batch_latency(a: argparse.Namespace, kiln, torch, mgm, work: Path, batch: int, cache: str) -> dict:
    """ResNet-50 fp16 at `batch`: run() (outputs preallocated) and Session.bind(...).run() against C++ run_device."""
    path = str(work / f"resnet50_b{batch}.onnx")
    mgm.export_model("resnet50", batch, path)
    s = kiln.Session(path, cache_dir=cache, **MODEL_OPTS)
    x = torch.from_numpy(mgm.make_inputs("resnet50", batch)["input"]).cuda()
    y = torch.empty((batch, 1000), device="cuda")
    cur = torch.cuda.current_stream()
    runs = max(1, a.latency_runs // 2)
    cpp1 = cpp_latency(a.kiln_cli, s.stats.artifact_path, runs, a.warmup)
    run_lat = time_runs(lambda: s.run({"input": x}, outputs={"logits": y}, stream=cur), runs, a.warmup)
    bound = s.bind({"input": x}, outputs={"logits": y}, stream=cur)
    bound_lat = time_runs(bound.run, runs, a.warmup)
    cpp2 = cpp_latency(a.kiln_cli, s.stats.artifact_path, runs, a.warmup)
    cpp_ms = min(cpp1["device_io_median_ms"], cpp2["device_io_median_ms"])
    return {"batch": batch, "cpp_before_ms": cpp1["device_io_median_ms"], "cpp_after_ms": cpp2["device_io_median_ms"],
            "python_preallocated_median_ms": median_ms(run_lat), "python_binding_median_ms": median_ms(bound_lat),
            "ratio_preallocated": median_ms(run_lat) / cpp_ms, "ratio_binding": median_ms(bound_lat) / cpp_ms,
            "runs": runs}


def profile_copies(torch, fn, runs: int) -> dict:
    """Runs fn() `runs` times under torch.profiler (CPU + CUDA activity) and counts the GPU events by kind."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    counts = {"HtoD": 0, "DtoH": 0, "DtoD": 0, "memset": 0, "kernels": 0}
    names = {}
    for e in prof.events():
        if str(e.device_type).split(".")[-1] != "CUDA":
            continue
        n = e.name
        key = ("HtoD" if "HtoD" in n else "DtoH" if "DtoH" in n else "DtoD" if "DtoD" in n
               else "memset" if "Memset" in n else "kernels")
        counts[key] += 1
        if key != "kernels":
            names[n] = names.get(n, 0) + 1
    counts["copy_event_names"] = names
    return counts


def threads_check(torch, s, xs: list, refs: list, runs: int) -> dict:
    """len(xs) threads share Session `s`, `runs` runs each on its own input and stream; counts outputs that differ."""
    n = len(xs)
    bad = [0] * n
    max_diff = [0.0] * n
    errors = []
    walls = [0.0] * n
    start = threading.Barrier(n + 1)

    def worker(t: int) -> None:
        try:
            stream = torch.cuda.Stream()
            start.wait()
            t0 = time.perf_counter()
            with torch.cuda.stream(stream):
                for _ in range(runs):
                    y = torch.from_dlpack(s.run({"input": xs[t]}, stream=stream)["logits"])
                    if not torch.equal(y, refs[t]):
                        bad[t] += 1
                        max_diff[t] = max(max_diff[t], float((y - refs[t]).abs().max()))
            walls[t] = time.perf_counter() - t0
        except BaseException as e:  # reported, and the check fails
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
    for p in pool:
        p.start()
    start.wait()
    t0 = time.perf_counter()
    for p in pool:
        p.join()
    wall = time.perf_counter() - t0
    return {"threads": n, "runs_per_thread": runs, "wall_s": wall, "runs_per_s": n * runs / wall,
            "thread_wall_s": walls, "differing_outputs": sum(bad), "max_abs_diff": max(max_diff), "errors": errors}


def processes_check(a: argparse.Namespace, cache: str, x_path: str, ref: np.ndarray, work: Path, tag: str) -> dict:
    procs = []
    for i in range(a.processes):
        out = work / f"proc_{tag}_{i}.npy"
        cmd = [sys.executable, __file__, "--child", "--model", a.model, "--cache", cache, "--input", x_path,
               "--output", str(out)]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out))
    t0 = time.perf_counter()
    results = []
    for p, out in procs:
        so, se = p.communicate(timeout=300)
        r = {"rc": p.returncode}
        if p.returncode == 0:
            r.update(json.loads(so.strip().splitlines()[-1]))
            y = np.load(out)
            r["equal_to_reference"] = bool(np.array_equal(y, ref))
            r["max_abs_diff"] = float(np.abs(y - ref).max())
        else:
            r["stderr"] = se.strip()[-800:]
        results.append(r)
    ok = all(r["rc"] == 0 for r in results)
    return {"processes": a.processes, "wall_s": time.perf_counter() - t0, "all_succeeded": ok,
            "caches": [r.get("cache") for r in results], "results": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/kiln-python-gpu")
    ap.add_argument("--model", help="ResNet-50 ONNX file (default: exported into --work)")
    ap.add_argument("--cache", help="(child) cache directory")
    ap.add_argument("--input", help="(child) input .npy")
    ap.add_argument("--output", help="(child) output .npy")
    ap.add_argument("--child", action="store_true", help="(internal) one process of check 5")
    ap.add_argument("--kiln-cli", default="kiln", help="the kiln command line of the same build")
    ap.add_argument("--out", default="python_gpu.json")
    ap.add_argument("--latency-runs", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs-per-thread", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=4)
    a = ap.parse_args()
    if a.child:
        return child(a)

    import kiln  # before torch: the CUDA libraries kiln links are the ones the process uses

    import torch
    import torch.utils.dlpack

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    res = {"kiln": kiln.__version__, "kiln_file": kiln.__file__, "python": sys.version.split()[0],
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "checks": {}}
    failures = []
    sys.path.insert(0, str(REPO / "bench"))
    import make_gpu_models as mgm

    if not a.model:
        a.model = str(work / "resnet50.onnx")
        t0 = time.perf_counter()
        mgm.export_model("resnet50", 1, a.model)
        res["export_s"] = time.perf_counter() - t0

    try:
        # 1. Compile through the cache; a torch CUDA tensor in, DeviceArray out.
        cache = str(work / "cache")
        t0 = time.perf_counter()
        s = kiln.Session(a.model, cache_dir=cache, **MODEL_OPTS)
        res["session"] = {"wall_s": time.perf_counter() - t0, "cache": s.stats.cache, "compile_ms": s.stats.compile_ms,
                          "artifact": s.stats.artifact_path, "notes": s.stats.notes}
        feeds = mgm.make_inputs("resnet50", 1)
        x = torch.from_numpy(feeds["input"]).cuda()
        cur = torch.cuda.current_stream()
        out = s.run({"input": x}, stream=cur)
        arr = out["logits"]
        y = torch.from_dlpack(arr)
        host = s.run({"input": feeds["input"]})["logits"]
        module = mgm.build_module("resnet50").cuda()
        with torch.no_grad():
            want = module(x).float().cpu().numpy()
        got = y.cpu().numpy()
        c1 = {"output_type": type(arr).__name__, "dlpack_device": list(arr.__dlpack_device__()),
              "zero_copy_out": y.data_ptr() == arr.data_ptr, "device_equals_host_path": bool(np.array_equal(got, host)),
              "max_abs_diff_vs_torch_fp32": float(np.abs(got - want).max()), "max_abs_torch": float(np.abs(want).max())}
        c1["ok"] = (c1["zero_copy_out"] and c1["device_equals_host_path"]
                    and c1["max_abs_diff_vs_torch_fp32"] <= 0.05 * max(1.0, c1["max_abs_torch"]))
        res["checks"]["dlpack_resnet50_fp16"] = c1
        np.save(work / "x.npy", feeds["input"])
        np.save(work / "ref.npy", got)
        del module

        # 2. No host<->device copy during run() on device tensors; the host path as the control.
        prealloc = torch.empty(tuple(arr.shape), device="cuda", dtype=torch.float32)
        bound = s.bind({"input": x}, outputs={"logits": prealloc}, stream=cur)
        dev = profile_copies(torch, lambda: s.run({"input": x}, stream=cur), 20)
        dev_bound = profile_copies(torch, bound.run, 20)
        ctl = profile_copies(torch, lambda: s.run({"input": feeds["input"]}), 5)
        c2 = {"device_runs": 20, "device": dev, "binding": dev_bound, "host_runs_control": ctl,
              "ok": dev["HtoD"] == dev["DtoH"] == dev_bound["HtoD"] == dev_bound["DtoH"] == 0 and dev["kernels"] > 0
              and dev_bound["kernels"] > 0 and ctl["HtoD"] > 0 and ctl["DtoH"] > 0}
        res["checks"]["profiler_no_copies"] = c2

        # 3. Latency against Session::run_device in C++ (same cache entry), C++ before and after.
        art = s.stats.artifact_path
        cpp1 = cpp_latency(a.kiln_cli, art, a.latency_runs, a.warmup)
        py_pre = time_runs(lambda: s.run({"input": x}, outputs={"logits": prealloc}, stream=cur), a.latency_runs, a.warmup)
        py_alloc = time_runs(lambda: s.run({"input": x}, stream=cur), a.latency_runs, a.warmup)
        py_bound = time_runs(bound.run, a.latency_runs, a.warmup)
        # Where run()'s time goes besides the C++ run: torch's __dlpack__ (the DLPack stream exchange) per tensor.
        from kiln._tensors import stream_handle

        handle = stream_handle(cur)  # torch's default stream is 0, which DLPack spells 1
        t_dlpack = time_runs(lambda: x.__dlpack__(stream=handle), a.latency_runs, a.warmup)
        t_to_dlpack = time_runs(lambda: torch.utils.dlpack.to_dlpack(x), a.latency_runs, a.warmup)
        cpp2 = cpp_latency(a.kiln_cli, art, a.latency_runs, a.warmup)
        cpp_ms = min(cpp1["device_io_median_ms"], cpp2["device_io_median_ms"])
        c3 = {"cpp_before": cpp1, "cpp_after": cpp2, "python_preallocated_median_ms": median_ms(py_pre),
              "python_preallocated_p90_ms": float(np.percentile(py_pre, 90) * 1e3),
              "python_kiln_outputs_median_ms": median_ms(py_alloc),
              "python_kiln_outputs_p90_ms": float(np.percentile(py_alloc, 90) * 1e3),
              "python_binding_median_ms": median_ms(py_bound), "python_binding_p90_ms": float(np.percentile(py_bound, 90) * 1e3),
              "torch_dlpack_with_stream_us": median_ms(t_dlpack) * 1e3, "torch_to_dlpack_us": median_ms(t_to_dlpack) * 1e3,
              "runs": a.latency_runs}
        c3["ratio_preallocated"] = c3["python_preallocated_median_ms"] / cpp_ms
        c3["ratio_kiln_outputs"] = c3["python_kiln_outputs_median_ms"] / cpp_ms
        c3["ratio_binding"] = c3["python_binding_median_ms"] / cpp_ms
        c3["preallocated_output_equals_reference"] = bool(np.array_equal(prealloc.cpu().numpy(), got))
        c3["ok"] = c3["ratio_binding"] <= 1.05 and c3["preallocated_output_equals_reference"]
        res["checks"]["latency_vs_cpp_run_device"] = c3

        # 3b. The same at batch 8 (a longer run: the fixed per-call cost weighs less).
        try:
            c3b = batch_latency(a, kiln, torch, mgm, work, 8, cache)
        except Exception as e:  # reported; the other checks go on
            c3b = {"error": f"{type(e).__name__}: {e}"}
        c3b["ok"] = True  # information only
        res["checks"]["latency_batch8"] = c3b

        # 4. T threads on one Session against their single-thread outputs.
        g = torch.Generator(device="cuda").manual_seed(1)
        xs = [torch.randn(1, 3, 224, 224, device="cuda", generator=g) for _ in range(a.threads)]
        refs = [torch.from_dlpack(s.run({"input": xi}, stream=cur)["logits"]).clone() for xi in xs]
        single = time_runs(lambda: s.run({"input": xs[0]}, stream=cur), 200, 20)
        c4 = threads_check(torch, s, xs, refs, a.runs_per_thread)
        c4["single_thread_runs_per_s"] = 1.0 / statistics.mean(single)
        c4["speedup_vs_one_thread"] = c4["runs_per_s"] / c4["single_thread_runs_per_s"]
        c4["ok"] = not c4["errors"] and c4["differing_outputs"] == 0
        res["checks"]["threads"] = c4

        # 5. P processes at once: the warm cache, then an empty one.
        ref = got
        warm = processes_check(a, cache, str(work / "x.npy"), ref, work, "warm")
        warm["ok"] = warm["all_succeeded"] and all(c == "hit" for c in warm["caches"]) and all(
            r.get("equal_to_reference") for r in warm["results"])
        cold = processes_check(a, str(work / "cache-cold"), str(work / "x.npy"), ref, work, "cold")
        cold["ok"] = cold["all_succeeded"]
        res["checks"]["processes_warm_cache"] = warm
        res["checks"]["processes_empty_cache"] = cold
    except Exception:  # a check that broke: what ran so far is still reported
        import traceback

        res["error"] = traceback.format_exc()
        failures.append("error")

    for k, v in res["checks"].items():
        if not v.get("ok"):
            failures.append(k)
    res["failures"] = failures
    Path(a.out).write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: v for k, v in res.items() if k != "checks"}, default=str))
    for k, v in res["checks"].items():
        brief = {f: x for f, x in v.items() if f not in ("results", "thread_wall_s")}
        print(f"{k}: {json.dumps(brief, default=str)}")
        for r in v.get("results", []):
            print(f"   process: {json.dumps(r, default=str)}")
    print("FAILED: " + ", ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""kiln's cpu target against ONNX Runtime (CPU execution provider, all graph
optimisations on), measured in one run on this machine at one thread count.

Usage:
  .venv/bin/python bench/cpu_vs_ort.py [--kiln build/tools/kiln/kiln]
      [--models-dir .models] [--threads 2] [--runs 30] [--warmup 5]
      [--reps 3] [--out-dir bench/results] [--only NAME ...]

Models (made by `.venv/bin/python tools/models/prepare.py`, in .models/):
ResNet-50 at batch 1 and 8 (a batch-8 copy of the model is written to a
temporary directory), MobileNetV3-Small, BERT-base (sequence 128, batch 1),
YOLOv8n (NudeNet's, 320x320) and Silero VAD (512 samples at 16 kHz).

For each model and each repetition it runs, alternately:
  - `kiln perf MODEL --target cpu --threads T --json ...`: compile, then a
    fresh process that loads the artifact (load_ms: Session::load in that
    process) and times the runs;
  - a fresh Python process that creates an ONNX Runtime session (timed) and
    times the same number of runs on the same inputs.
The latency of each side is the median over repetitions of its per-repetition
median; so are the p90 and the load / session-creation times. Outputs of
`kiln run` on the compiled artifact are compared with ONNX Runtime's on the
same inputs (|kiln - ort| <= 1e-4 + 1e-3 |ort| for every element).

Prints the table, and writes it as Markdown (cpu_vs_ort.md) and as a bar
chart (cpu_vs_ort.png) to --out-dir, with the machine load (uptime) before
and after, and the OpenMP wait policy. Run it on a quiet machine without
OMP_WAIT_POLICY (the default is what users get; PASSIVE slows kiln's small
networks by 20-90%, bench/results/cpu_vs_ort_20261202_default_wait.md).
This is a benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "models"))
RTOL, ATOL = 1e-3, 1e-4


@dataclass
class Case:
    name: str            # row label
    model: str           # file stem in --models-dir
    batch: int = 1
    shapes: dict[str, list[int]] = field(default_factory=dict)  # fixed input shapes (kiln --shape)


CASES = [
    Case("resnet50", "resnet50"),
    Case("resnet50_b8", "resnet50", batch=8, shapes={"input": [8, 3, 224, 224]}),
    Case("mobilenet_v3_small", "mobilenet_v3_small"),
    Case("bert_base", "bert_base"),
    Case("yolov8n", "yolov8n", shapes={"images": [1, 3, 320, 320]}),
    Case("silero_vad", "silero_vad", shapes={"input": [1, 512], "state": [2, 1, 128]}),
]


def omp_wait_policy() -> str:
    """The OpenMP wait policy both sides ran under, for the report: PASSIVE puts
    kiln's oneDNN workers to sleep after every primitive and costs it 20-90% on
    small networks (bench/results/cpu_vs_ort_20261202_default_wait.md), so a
    figure means little without it."""
    v = os.environ.get("OMP_WAIT_POLICY")
    return f"OMP_WAIT_POLICY={v}" if v else "default (OMP_WAIT_POLICY unset; what a user gets)"


def uptime_load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def batch_variant(src: Path, batch: int, tmp: Path) -> Path:
    """A copy of an ONNX model whose first input and outputs have batch `batch`."""
    import onnx

    m = onnx.load(str(src))
    for vi in list(m.graph.input[:1]) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_param")
            dims[0].dim_value = batch
    del m.graph.value_info[:]
    out = tmp / f"{src.stem}_b{batch}.onnx"
    onnx.save(m, str(out))
    return out


def make_feeds(case: Case, model_path: Path) -> dict[str, np.ndarray]:
    """The same seeded inputs check_model.py uses; batch > 1 repeats them with noise."""
    import onnxruntime as ort
    from inputs import make_inputs

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    specs = []
    for i in sess.get_inputs():
        shape = case.shapes.get(i.name, i.shape)
        specs.append((i.name, i.type, shape))
    if case.batch == 1:
        return make_inputs(case.model, specs)
    rng = np.random.default_rng(0)
    return {name: rng.random(shape).astype(np.float32) for name, _, shape in specs}


# ---------------------------------------------------------------- ONNX Runtime side
def ort_child(args: argparse.Namespace) -> None:
    """Runs in a fresh process: session creation, warm-up, timed runs; JSON on stdout."""
    import onnxruntime as ort

    feeds = {p.stem: np.load(p) for p in Path(args.inputs_dir).glob("*.npy")}
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    t0 = time.perf_counter()
    sess = ort.InferenceSession(args.ort_child, so, providers=["CPUExecutionProvider"])
    session_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    outs = sess.run(None, feeds)
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(args.warmup):
        sess.run(None, feeds)
    lat = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        lat.append((time.perf_counter() - t0) * 1e3)
    if args.outputs_dir:
        os.makedirs(args.outputs_dir, exist_ok=True)
        for i, v in enumerate(outs):
            np.save(Path(args.outputs_dir) / f"out{i}.npy", v)
    print(json.dumps({"session_ms": session_ms, "first_run_ms": first_ms,
                      "latency_ms_median": float(np.median(lat)),
                      "latency_ms_p90": float(np.percentile(lat, 90))}))


def run_ort(model: Path, inputs_dir: Path, threads: int, runs: int, warmup: int, outputs_dir: Path | None) -> dict:
    cmd = [sys.executable, __file__, "--ort-child", str(model), "--inputs-dir", str(inputs_dir),
           "--threads", str(threads), "--runs", str(runs), "--warmup", str(warmup)]
    if outputs_dir:
        cmd += ["--outputs-dir", str(outputs_dir)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- kiln side
def kiln_inputs(feeds: dict, inputs_dir: Path) -> list[str]:
    out = []
    for name in feeds:
        out += ["--input", f"{name}={inputs_dir / (name + '.npy')}"]
    return out


def run_kiln(kiln: str, model: Path, case: Case, feeds: dict, inputs_dir: Path, threads: int, runs: int,
             warmup: int, keep: Path) -> dict:
    cmd = [kiln, "perf", str(model), "--target", "cpu", "--threads", str(threads), "--runs", str(runs),
           "--warmup", str(warmup), "--json", "--keep", str(keep)] + kiln_inputs(feeds, inputs_dir)
    for name, dims in case.shapes.items():
        cmd += ["--shape", f"{name}={'x'.join(map(str, dims))}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kiln perf failed for {case.name}: {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def kiln_outputs(kiln: str, artifact: Path, feeds: dict, inputs_dir: Path, threads: int, out_dir: Path) -> dict:
    cmd = [kiln, "run", str(artifact), "--threads", str(threads), "--output-dir", str(out_dir), "--json"]
    cmd += kiln_inputs(feeds, inputs_dir)
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    return [np.load(o["file"]) for o in res["outputs"]]  # graph output order, as ORT's


def compare(kiln_out: list, ort_dir: Path) -> tuple[float, bool]:
    worst, ok = 0.0, True
    for i, k in enumerate(kiln_out):
        o = np.load(ort_dir / f"out{i}.npy")
        if k.shape != o.shape:
            return float("inf"), False
        if not np.issubdtype(o.dtype, np.floating):
            ok &= bool(np.array_equal(k, o))
            continue
        err = np.abs(k.astype(np.float64) - o.astype(np.float64))
        worst = max(worst, float(err.max()) if err.size else 0.0)
        ok &= bool(np.all(err <= ATOL + RTOL * np.abs(o)))
    return worst, ok


def onednn_isa(kiln: str, artifact: Path) -> str:
    """The oneDNN version and ISA recorded in an artifact's compatibility block."""
    r = subprocess.run([kiln, "inspect", str(artifact), "--json"], capture_output=True, text=True)
    try:
        text = json.dumps(json.loads(r.stdout)["compat"])
    except (ValueError, KeyError):
        return "?"
    ver = re.search(r'onednn[^0-9]*([0-9][0-9.]*)', text)
    isa = re.search(r'onednn_isa[^a-z]*([a-z0-9_]+)', text)
    return f"{isa.group(1) if isa else '?'} (oneDNN {ver.group(1) if ver else '?'})"


# ---------------------------------------------------------------- report
def write_report(rows: list[dict], meta: dict, out_dir: Path) -> str:
    head = ("| model | kiln ms | ORT ms | kiln/ORT | kiln p90 | ORT p90 | kiln load ms | ORT session ms | "
            "load ratio | kiln first run ms | max abs err vs ORT | outputs match |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n")
    body = ""
    for r in rows:
        body += (f"| {r['name']} | {r['kiln_ms']:.2f} | {r['ort_ms']:.2f} | **{r['ratio']:.2f}** | "
                 f"{r['kiln_p90']:.2f} | {r['ort_p90']:.2f} | {r['kiln_load']:.1f} | {r['ort_session']:.1f} | "
                 f"{r['load_ratio']:.3f} | {r['kiln_first']:.2f} | {r['err']:.2e} | {'yes' if r['match'] else 'NO'} |\n")
    md = (f"# kiln cpu vs ONNX Runtime\n\n"
          f"- machine: {meta['cpu']}, {meta['cores']} cores; {meta['threads']} thread(s) for both\n"
          f"- load average (1/5/15 min): {meta['load_before']} before, {meta['load_after']} after\n"
          f"- OpenMP wait policy: {omp_wait_policy()}\n"
          f"- kiln {meta['kiln_version']}, ISA {meta['isa']}; onnxruntime {meta['ort_version']}\n"
          f"- {meta['reps']} repetition(s) x {meta['runs']} timed runs (after {meta['warmup']} warm-up runs); "
          f"medians of the per-repetition medians\n"
          f"- kiln load: `Session::load` of the compiled artifact in a fresh process; "
          f"ORT session: `InferenceSession(...)` in a fresh process\n"
          f"- outputs match: every element within {ATOL:g} + {RTOL:g}|ort|\n\n" + head + body)
    (out_dir / "cpu_vs_ort.md").write_text(md)
    return md


def write_chart(rows: list[dict], meta: dict, out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    x = np.arange(len(names))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, (title, k, o) in zip(axes, [("steady-state latency (ms, log)", "kiln_ms", "ort_ms"),
                                        ("load / session creation (ms, log)", "kiln_load", "ort_session")]):
        kv = [r[k] for r in rows]
        ov = [r[o] for r in rows]
        ax.bar(x - 0.2, kv, 0.4, label="kiln cpu")
        ax.bar(x + 0.2, ov, 0.4, label="ONNX Runtime")
        for i, (a, b) in enumerate(zip(kv, ov)):
            ax.text(i, max(a, b) * 1.15, f"{a / b:.2f}x", ha="center", fontsize=8)
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle(f"kiln cpu vs ONNX Runtime, {meta['threads']} thread(s), load {meta['load_before']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_dir / "cpu_vs_ort.png", dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=str(REPO / "build" / "tools" / "kiln" / "kiln"))
    ap.add_argument("--models-dir", default=str(REPO / ".models"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out-dir", default=str(REPO / "bench" / "results"))
    ap.add_argument("--only", nargs="*", help="case names to run (default: all)")
    ap.add_argument("--ort-child", help=argparse.SUPPRESS)
    ap.add_argument("--inputs-dir", help=argparse.SUPPRESS)
    ap.add_argument("--outputs-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ort_child:
        ort_child(args)
        return 0

    import onnxruntime as ort

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    models_dir = Path(args.models_dir)
    cases = [c for c in CASES if not args.only or c.name in args.only]
    version = subprocess.run([args.kiln, "--version"], capture_output=True, text=True).stdout.strip()
    meta = {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": args.threads, "load_before": uptime_load(),
            "kiln_version": version, "ort_version": ort.__version__, "reps": args.reps, "runs": args.runs,
            "warmup": args.warmup, "isa": "?"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp_s:
        tmp = Path(tmp_s)
        for case in cases:
            model = models_dir / f"{case.model}.onnx"
            if not model.exists():
                print(f"skip {case.name}: {model} missing (run tools/models/prepare.py)", file=sys.stderr)
                continue
            if case.batch > 1:
                model = batch_variant(model, case.batch, tmp)
            inputs_dir = tmp / f"{case.name}_in"
            inputs_dir.mkdir()
            feeds = make_feeds(case, model)
            for name, arr in feeds.items():
                np.save(inputs_dir / f"{name}.npy", arr)
            art = tmp / f"{case.name}.kiln"
            ort_out = tmp / f"{case.name}_ort_out"
            k_runs, o_runs = [], []
            for rep in range(args.reps):
                k_runs.append(run_kiln(args.kiln, model, case, feeds, inputs_dir, args.threads, args.runs,
                                       args.warmup, art))
                o_runs.append(run_ort(model, inputs_dir, args.threads, args.runs, args.warmup,
                                      ort_out if rep == 0 else None))
            kout = kiln_outputs(args.kiln, art, feeds, inputs_dir, args.threads, tmp / f"{case.name}_kiln_out")
            err, match = compare(kout, ort_out)
            if meta["isa"] == "?":
                meta["isa"] = onednn_isa(args.kiln, art)
            med = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
            row = {"name": case.name, "kiln_ms": med(k_runs, "latency_ms_median"),
                   "ort_ms": med(o_runs, "latency_ms_median"), "kiln_p90": med(k_runs, "latency_ms_p90"),
                   "ort_p90": med(o_runs, "latency_ms_p90"), "kiln_load": med(k_runs, "load_ms"),
                   "ort_session": med(o_runs, "session_ms"), "kiln_first": med(k_runs, "first_run_ms"),
                   "err": err, "match": match}
            row["ratio"] = row["kiln_ms"] / row["ort_ms"]
            row["load_ratio"] = row["kiln_load"] / row["ort_session"]
            rows.append(row)
            print(f"{case.name:20s} kiln {row['kiln_ms']:9.2f} ms  ORT {row['ort_ms']:9.2f} ms  ratio {row['ratio']:.2f}"
                  f" | load {row['kiln_load']:8.1f} ms vs session {row['ort_session']:8.1f} ms  ratio "
                  f"{row['load_ratio']:.3f} | max err {err:.2e} {'ok' if match else 'MISMATCH'}", flush=True)
    meta["load_after"] = uptime_load()
    if not rows:
        print("no model ran", file=sys.stderr)
        return 1
    md = write_report(rows, meta, out_dir)
    write_chart(rows, meta, out_dir)
    print()
    print(md)
    print(f"wrote {out_dir / 'cpu_vs_ort.md'} and {out_dir / 'cpu_vs_ort.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

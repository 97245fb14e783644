#!/usr/bin/env python3
"""The model zoo on the cpu target: `kiln perf` with the inputs alone (symbolic
dims resolved at run time) against the same with every input's shape fixed
(--shape), and ONNX Runtime beside them, measured in one run.

Usage:
  .venv/bin/python bench/zoo_cpu.py [--kiln build/tools/kiln/kiln] [--dir .models/zoo]
      [--only NAME|FAMILY ...] [--rounds 3] [--runs 20] [--warmup 3] [--threads 2]
      [--out bench/results/zoo_cpu.md] [--json FILE] [--timeout 900]

The models are the zoo's (`.venv/bin/python tools/models/zoo.py export`), fed the
same seeded inputs as `zoo.py check`. For each model, `--rounds` times and
interleaved (so a change in the machine's speed hits all three alike):
  1. kiln perf MODEL --input NAME=FILE.npy ...                        (dynamic)
  2. kiln perf MODEL --input NAME=FILE.npy ... --shape NAME=DxD ...   (static)
  3. ONNX Runtime in a fresh process of its own venv (.venv-bench; created
     here if missing, with the newest onnxruntime from PyPI): session, warm-up,
     the same number of timed runs, all graph optimisations, same threads.
Each side's figure is the median over rounds of its per-round median latency.
The table has both kiln figures, their ratio (dynamic / static: 1.1 or less
is the goal), ONNX Runtime's, and kiln static / ORT. A kiln that fails says
why (the first line of its error) in the notes column; the table is still
written. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_VENV = REPO / ".venv-bench"


# ---------------------------------------------------------------- ORT worker (runs in .venv-bench)
def ort_worker(args) -> int:
    """In a fresh process of .venv-bench: session creation, warm-up, timed runs; one JSON line."""
    import numpy as np
    import onnxruntime as ort

    spec = json.loads(Path(args.ort_worker).read_text())
    feeds = {name: np.load(path) for name, path in spec["inputs"].items()}
    so = ort.SessionOptions()
    so.intra_op_num_threads = spec["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    t0 = time.perf_counter()
    sess = ort.InferenceSession(spec["model"], so, providers=["CPUExecutionProvider"])
    session_ms = (time.perf_counter() - t0) * 1e3
    sess.run(None, feeds)
    for _ in range(spec["warmup"]):
        sess.run(None, feeds)
    lat = []
    for _ in range(spec["runs"]):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        lat.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"onnxruntime": ort.__version__, "session_ms": session_ms,
                      "latency_ms_median": float(np.median(lat)), "latency_ms_min": float(np.min(lat))}))
    return 0


def ensure_bench_venv() -> Path:
    """.venv-bench with the newest onnxruntime (and numpy) from PyPI; made when missing."""
    py = BENCH_VENV / "bin" / "python"
    if not py.exists():
        print(f"zoo_cpu: creating {BENCH_VENV} with the newest onnxruntime from PyPI", flush=True)
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade",
                        "onnxruntime", "numpy"], check=True)
    return py


def bench_ort_version(py: Path) -> str:
    r = subprocess.run([str(py), "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() or f"unknown ({r.stderr.strip()[-200:]})"


# ---------------------------------------------------------------- measurements
def first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln[:300]
    return (lines[-1] if lines else "no output")[:300]


def kiln_perf(kiln: Path, model: Path, inputs: dict, shapes: dict | None, args,
              env: dict | None = None) -> tuple[dict | None, str]:
    """One `kiln perf --json` in a fresh process; `env`: extra environment variables."""
    cmd = [str(kiln), "perf", str(model), "--target", "cpu", "--threads", str(args.threads),
           "--runs", str(args.runs), "--warmup", str(args.warmup), "--json"]
    for name, path in inputs.items():
        cmd += ["--input", f"{name}={path}"]
    for name, shape in (shapes or {}).items():
        cmd += ["--shape", f"{name}={'x'.join(str(d) for d in shape)}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                           env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {args.timeout:.0f} s"
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {first_error_line(r.stderr + r.stdout)}"
    try:
        return json.loads(r.stdout), ""
    except ValueError:
        return None, f"no JSON: {r.stdout[:200]!r}"


def ort_perf(py: Path, model: Path, inputs: dict, args, tmp: Path) -> tuple[dict | None, str]:
    spec = tmp / "ort_spec.json"
    spec.write_text(json.dumps({"model": str(model), "inputs": {k: str(v) for k, v in inputs.items()},
                                "threads": args.threads, "runs": args.runs, "warmup": args.warmup}))
    try:
        r = subprocess.run([str(py), __file__, "--ort-worker", str(spec)], capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, "ORT timeout"
    if r.returncode != 0:
        return None, f"ORT: {first_error_line(r.stderr)}"
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def med(values: list) -> float | None:
    v = [x for x in values if isinstance(x, (int, float))]
    return statistics.median(v) if v else None


def fmt(v, digits=2) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) else "-"


def write_report(rows: list[dict], meta: dict, out: Path) -> str:
    lines = [
        "# kiln model zoo on the cpu target: inputs only vs --shape, and ONNX Runtime",
        "",
        f"- date: {meta['date']}; machine: {meta['cpu']}, {meta['cores']} cores; {meta['threads']} thread(s) "
        f"for kiln and ORT; load before {meta['load_before']}, after {meta['load_after']}",
        "- OpenMP wait policy: " + (f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}" if os.environ.get("OMP_WAIT_POLICY")
                                    else "default (OMP_WAIT_POLICY unset; what a user gets)"),
        f"- kiln: {meta['kiln_version']}; ONNX Runtime {meta['ort_version']} (newest on PyPI, in .venv-bench; "
        f"CPU execution provider, all graph optimisations)",
        f"- latency: median over {meta['rounds']} interleaved rounds of each side's median of {meta['runs']} runs "
        f"(after {meta['warmup']} warm-up runs); `kiln perf MODEL --input ...` (dynamic: no shape flags) and "
        f"the same with `--shape` for every input (static)",
        "- dyn/static: the dynamic run's latency over the static one's (goal: 1.1 or less); static/ORT: "
        "kiln static over ONNX Runtime (below 1.0: kiln faster)",
        "- produced by `.venv/bin/python bench/zoo_cpu.py`; models and inputs: `tools/models/zoo.py` (docs/zoo.md)",
        *([f"- {meta['extra']}"] if meta.get("extra") else []),
        "- check: the model's latest `tools/models/zoo.py check` result (kiln's outputs against ORT's); the "
        "timings of a model that FAILs it measure a program that computes something else (the detectors' "
        "wrongly folded NMS branch, for one)",
        "",
        "| model | family | check | kiln dynamic ms | kiln --shape ms | dyn/static | ORT ms | static/ORT | kiln compile "
        "ms (dyn / static) | notes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        ratio = (r["dyn_ms"] / r["static_ms"]) if r["dyn_ms"] and r["static_ms"] else None
        vs_ort = (r["static_ms"] / r["ort_ms"]) if r["static_ms"] and r["ort_ms"] else None
        notes = "; ".join(r["notes"]).replace("|", "\\|")
        lines.append(f"| {r['model']} | {r['family']} | {r.get('check') or '-'} | {fmt(r['dyn_ms'])} | "
                     f"{fmt(r['static_ms'])} | "
                     f"{fmt(ratio)} | {fmt(r['ort_ms'])} | {fmt(vs_ort)} | "
                     f"{fmt(r['dyn_compile_ms'], 0)} / {fmt(r['static_compile_ms'], 0)} | {notes} |")
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, out)
    return text


def latest_checks(directory: Path) -> dict:
    """model -> PASS / FAIL / SKIP from the zoo's last check (DIR/check-results.json), if any."""
    try:
        data = json.loads((directory / "check-results.json").read_text())
    except (OSError, ValueError):
        return {}
    return {name: r.get("result") for name, r in data.items() if isinstance(r, dict)}


def render(args) -> int:
    """Re-renders the table from earlier --json outputs (e.g. a run of the whole zoo plus one of new models)."""
    sys.path.insert(0, str(REPO / "tools" / "models"))
    from zoo_models import models

    meta, by_name, later = None, {}, []
    for f in args.render:
        data = json.loads(f.read_text())
        if meta is None:
            meta = dict(data["meta"])
        else:
            m = data["meta"]
            later.append(f"{', '.join(r['model'] for r in data['rows'])} from a later run ({m['date']}, "
                         f"{m['rounds']} rounds, load before {m['load_before']}, after {m.get('load_after', '?')})")
        for r in data["rows"]:
            by_name[r["model"]] = r
    if later:
        meta["extra"] = "rows re-measured or added: " + "; ".join(later)
    checks = latest_checks(args.dir.resolve())
    rows = [by_name[n] for n in models() if n in by_name]
    for r in rows:
        r["check"] = checks.get(r["model"], r.get("check"))
    print(write_report(rows, meta, args.out))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ort-worker", help=argparse.SUPPRESS)
    ap.add_argument("--kiln", type=Path, default=REPO / "build" / "tools" / "kiln" / "kiln")
    ap.add_argument("--dir", type=Path, default=REPO / ".models" / "zoo")
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per kiln perf / ORT process")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "zoo_cpu.md")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--render", type=Path, nargs="+", metavar="JSON",
                    help="write the table from earlier --json files (later files win per model) and exit")
    args = ap.parse_args()
    if args.ort_worker:
        return ort_worker(args)
    if args.render:
        return render(args)

    import numpy as np

    sys.path.insert(0, str(REPO / "tools" / "models"))
    import zoo

    py = ensure_bench_venv()
    ort_version = bench_ort_version(py)
    print(f"zoo_cpu: ONNX Runtime peer: onnxruntime {ort_version} ({py})", flush=True)
    kiln = args.kiln.resolve()
    kv = subprocess.run([str(kiln), "--version"], capture_output=True, text=True).stdout.strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpu": cpu, "cores": os.cpu_count(), "threads": args.threads,
            "load_before": " ".join(Path("/proc/loadavg").read_text().split()[:3]), "kiln_version": kv,
            "ort_version": ort_version, "rounds": args.rounds, "runs": args.runs, "warmup": args.warmup}
    rows = []
    checks = latest_checks(args.dir.resolve())
    for m in zoo.select(args.only):
        path = args.dir.resolve() / f"{m.name}.onnx"
        row = {"model": m.name, "family": m.family, "check": checks.get(m.name),
               "dyn_ms": None, "static_ms": None, "ort_ms": None,
               "dyn_compile_ms": None, "static_compile_ms": None, "notes": []}
        rows.append(row)
        if not path.exists():
            row["notes"].append("not exported" + (f" ({zoo.GPU_NOTE})" if m.export_on == "gpu" else ""))
            print(f"zoo_cpu: {m.name}: {row['notes'][-1]}", flush=True)
            continue
        with tempfile.TemporaryDirectory(prefix=f"kiln-zoo-bench-{m.name}-") as td:
            tmp = Path(td)
            sess = zoo.ort_session(path)
            feeds = zoo.make_feeds(m, sess)
            del sess
            inputs, shapes = {}, {}
            for i, (name, arr) in enumerate(feeds.items()):
                f = tmp / f"in{i}.npy"
                np.save(f, arr)
                inputs[name] = f
                shapes[name] = list(arr.shape)
            got = {"dyn": [], "static": [], "ort": [], "dyn_c": [], "static_c": []}
            errors = {}
            for rnd in range(args.rounds):
                for kind in ("dyn", "static", "ort"):
                    if kind in errors:
                        continue
                    if kind == "ort":
                        res, err = ort_perf(py, path, inputs, args, tmp)
                    else:
                        res, err = kiln_perf(kiln, path, inputs, shapes if kind == "static" else None, args)
                    if res is None:
                        errors[kind] = err
                        continue
                    got[kind].append(res.get("latency_ms_median"))
                    if kind != "ort":
                        got[f"{kind}_c"].append(res.get("compile_ms"))
                print(f"zoo_cpu: {m.name} round {rnd + 1}: dynamic {fmt(got['dyn'][-1] if got['dyn'] else None)} ms, "
                      f"static {fmt(got['static'][-1] if got['static'] else None)} ms, "
                      f"ORT {fmt(got['ort'][-1] if got['ort'] else None)} ms"
                      + (f" ({'; '.join(f'{k}: {v}' for k, v in errors.items())})" if errors else ""), flush=True)
                if len(errors) == 3:
                    break
            row.update(dyn_ms=med(got["dyn"]), static_ms=med(got["static"]), ort_ms=med(got["ort"]),
                       dyn_compile_ms=med(got["dyn_c"]), static_compile_ms=med(got["static_c"]))
            labels = {"dyn": "dynamic", "static": "--shape", "ort": "ORT"}
            row["notes"] += [f"{labels[k]}: {v}" for k, v in errors.items()]
        # The table so far, after every model: a long run that is stopped keeps what it measured.
        meta["load_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        write_report(rows, meta, args.out)
    meta["load_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    text = write_report(rows, meta, args.out)
    print(text)
    print(f"zoo_cpu: wrote {args.out}")
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(f"zoo_cpu: wrote {args.json} (re-render a table from several runs with --render A.json B.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

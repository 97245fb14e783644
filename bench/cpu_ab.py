#!/usr/bin/env python3
"""Interleaved A/B of kiln builds (or environment settings) on the cpu target,
with ONNX Runtime (.venv-bench, the newest release) measured in the same rounds.

Usage:
  .venv/bin/python bench/cpu_ab.py --variant NAME=KILN_BINARY[,ENV=VALUE...] ... \
      --models PATH.onnx ... [--rounds 3] [--runs 100] [--warmup 3] [--threads 2] [--out FILE.md]

For each round, each model: every variant's `kiln perf --json` (fresh process,
inputs as bench/zoo_cpu.py feeds zoo models: zoo_models' seeded inputs when the
model is in the zoo, else cpu_vs_ort's seeded ones from tools/models/inputs.py),
then ORT. The table gives, per model and variant, the median over rounds
of the per-round median latency and the minimum latency over all runs (on a
machine shared with other work the minimum is the steadier figure: it is what
a run that was not interrupted takes), each divided by ORT's. The load average
before and after is printed: say it beside any figure. A benchmark: asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools" / "models"))
import zoo_cpu  # noqa: E402  (kiln_perf, ort_perf, ensure_bench_venv)


def feeds_for(model: Path, tmp: Path) -> tuple[dict, dict]:
    """Input files and shapes: the zoo's seeded inputs when model is a zoo model, else one
    static-shaped seeded input per graph input (symbolic dims 1), as
    bench/cpu_vs_ort.py makes them."""
    import zoo
    sess = zoo.ort_session(model)
    entry = next((m for m in zoo.select(None) if m.name == model.stem), None)
    if entry is not None:
        feeds = zoo.make_feeds(entry, sess)
    else:
        # cpu_vs_ort's seeded inputs (tools/models/inputs.py), of each input's own dtype:
        # BERT's int64 ids below its vocabulary size, silero's sample rate.
        from inputs import make_inputs
        specs = []
        for i in sess.get_inputs():
            # Symbolic dims: 1, but an image's height / width 320 (cpu_vs_ort's YOLOv8n size).
            shape = [d if isinstance(d, int) else (320 if k >= 2 and len(i.shape) == 4 else 1)
                     for k, d in enumerate(i.shape)]
            specs.append((i.name, i.type, shape))
        feeds = make_inputs(model.stem, specs)
    inputs, shapes = {}, {}
    for k, (name, arr) in enumerate(feeds.items()):
        f = tmp / f"{model.stem}_in{k}.npy"
        np.save(f, arr)
        inputs[name], shapes[name] = f, list(arr.shape)
    return inputs, shapes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", action="append", required=True, metavar="NAME=BIN[,ENV=V...]")
    ap.add_argument("--models", nargs="+", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    variants = []
    for v in args.variant:
        name, _, rest = v.partition("=")
        binary, *envs = rest.split(",")
        variants.append((name, Path(binary).resolve(), dict(e.split("=", 1) for e in envs)))
    py = zoo_cpu.ensure_bench_venv()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    med = {}  # (model, variant) -> per-round medians
    mins = {}
    with tempfile.TemporaryDirectory(prefix="kiln-cpu-ab-") as td:
        tmp = Path(td)
        feeds = {m: feeds_for(m.resolve(), tmp) for m in args.models}
        for rnd in range(args.rounds):
            for m in args.models:
                inputs, shapes = feeds[m]
                for name, binary, env in variants:
                    res, err = zoo_cpu.kiln_perf(binary, m.resolve(), inputs, shapes, args, env=env)
                    if res is None:
                        print(f"cpu_ab: {m.stem} {name}: {err}", file=sys.stderr)
                        continue
                    med.setdefault((m, name), []).append(res["latency_ms_median"])
                    mins.setdefault((m, name), []).append(res["latency_ms_min"])
                res, err = zoo_cpu.ort_perf(py, m.resolve(), inputs, args, tmp)
                if res is None:
                    print(f"cpu_ab: {m.stem} ORT: {err}", file=sys.stderr)
                    continue
                med.setdefault((m, "ORT"), []).append(res["latency_ms_median"])
                mins.setdefault((m, "ORT"), []).append(res["latency_ms_min"])
            print(f"cpu_ab: round {rnd + 1} done, load {Path('/proc/loadavg').read_text().split()[:3]}",
                  file=sys.stderr, flush=True)
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    names = [v[0] for v in variants]
    lines = [f"{args.threads} threads, {args.rounds} rounds x {args.runs} runs, load average before {load_before}, "
             f"after {load_after}", "",
             "| model | " + " | ".join(f"{n} ms (median / min)" for n in names + ["ORT"]) + " | "
             + " | ".join(f"{n}/ORT (median / min)" for n in names) + " |",
             "| --- |" + " ---: |" * (2 * len(names) + 1)]

    def cell(m, n):
        if (m, n) not in med:
            return None, None
        return statistics.median(med[(m, n)]), min(mins[(m, n)])

    geo = {n: [] for n in names}
    for m in args.models:
        o = cell(m, "ORT")
        row = [f"{a:.2f} / {b:.2f}" if a else "-" for a, b in (cell(m, n) for n in names + ["ORT"])]
        for n in names:
            k = cell(m, n)
            if k[0] and o[0]:
                row.append(f"{k[0] / o[0]:.2f} / {k[1] / o[1]:.2f}")
                geo[n].append((k[0] / o[0], k[1] / o[1]))
            else:
                row.append("-")
        lines.append(f"| {m.stem} | " + " | ".join(row) + " |")
    if len(args.models) > 1:
        g = [f"{np.exp(np.mean(np.log([r[0] for r in geo[n]]))):.2f} / "
             f"{np.exp(np.mean(np.log([r[1] for r in geo[n]]))):.2f}" if geo[n] else "-" for n in names]
        lines.append("| geomean | " + " | ".join([""] * (len(names) + 1)) + " | " + " | ".join(g) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The fp16 floor of zoo models, measured with ONNX Runtime alone (issue 17).

Why: the zoo's cuda acceptance compares kiln's fp16 programs with ONNX Runtime's
fp32 outputs within 1e-2 x max|ORT| (`zoo.py check` with
KILN_ZOO_TOLERANCE=maxref:1e-2; detector outputs compared as sets of rows). A
few models miss that bound (the random-weight detectors, rapidocr_rec_v4). This
script asks how much of that is the model's own sensitivity to 16-bit
rounding, before any fp16 arithmetic: every variant below runs in ORT fp32 on
the CPU, and is compared with (a) by the zoo's own comparison
(zoo.compare_outputs, at the fp16 rule).

  (a)  the model as exported, on the zoo's input (zoo.make_feeds): the reference;
  (b)  every float32 tensor the model stores (initializers and Constant nodes,
       subgraphs' too) rounded to float16 and back (numpy astype; finite values
       beyond float16's range clamped to +-65504, as kiln's 16-bit constants),
       and every float input rounded the same way. A program that stores its
       weights, constants and inputs in fp16 starts from exactly these values,
       so what (b) changes is what an all-fp16 engine incurs at the very least
       (an engine keeping some nodes in fp32, as kiln keeps the precision
       check's and the host fallback's, keeps their tensors exact);
  (bi) the initializers alone rounded (and the inputs): the learned weights of
       a torch export, its Constant nodes (box-decoding scalars, anchors, the
       mask value) exact; for a model storing its weights as Constant nodes
       (paddle2onnx: rapidocr) only the input is rounded;
  (c)  the exported model on the zoo's input moved by one fp16 ulp (the spacing
       of float16 at the value) per element, in a random direction (seeded;
       --seeds of them): how far a rounding-sized change of the input alone
       moves the outputs.

When (b) or (c) already fails the zoo's fp16 rule against (a), no fp16 program
can be expected to meet the bound on that model and input: the row measures
the model (random weights with near-tied scores, where one rounding flips a
TopK / NMS choice), not the engine.

A measurement: it asserts nothing and exits 0 whatever it finds (2 for bad
arguments or a model not exported). It prints one line per model and variant
and writes a Markdown table (--out).

Usage:
  fp16_floor.py NAME [NAME ...] [--dir DIR] [--seeds N] [--tolerance maxref:K] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "models"))
import zoo  # noqa: E402


FP16_MAX = 65504.0


def to_fp16_and_back(arr: np.ndarray) -> np.ndarray:
    """float32 rounded to float16 (nearest even) and back; finite values beyond float16's range
    clamp to +-65504 as kiln's 16-bit constants do (docs/cuda.md: a mask's -3.4e38 becomes -65504,
    not -inf, whose products with 0 would be NaN)."""
    clamped = np.where(np.isfinite(arr), np.clip(arr, -FP16_MAX, FP16_MAX), arr)
    return clamped.astype(np.float16).astype(np.float32)


def round_stored(model, constants: bool) -> tuple[object, int]:
    """A copy of `model` with every float32 initializer (main graph and subgraphs) rounded by
    to_fp16_and_back, and with `constants` every float32 Constant node's value too (paddle2onnx
    stores a model's weights as Constant nodes; torch's exporter keeps them in initializers and
    emits small constants, such as the detectors' box-decoding scalars, as Constant nodes).
    Returns (copy, number of tensors rounded)."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    count = 0

    def graphs(g):
        yield g
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from graphs(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        yield from graphs(sub)

    for g in graphs(m.graph):
        for t in g.initializer:
            if t.data_type == onnx.TensorProto.FLOAT:
                t.CopyFrom(numpy_helper.from_array(to_fp16_and_back(numpy_helper.to_array(t)), t.name))
                count += 1
        if not constants:
            continue
        for n in g.node:
            if n.op_type != "Constant" or n.domain not in ("", "ai.onnx"):
                continue
            for a in n.attribute:
                if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT:
                    a.t.CopyFrom(numpy_helper.from_array(to_fp16_and_back(numpy_helper.to_array(a.t)), a.t.name))
                    count += 1
                elif a.name == "value_float":
                    a.CopyFrom(helper.make_attribute("value_float", float(to_fp16_and_back(np.float32(a.f)))))
                    count += 1
                elif a.name == "value_floats":
                    vals = to_fp16_and_back(np.array(a.floats, np.float32))
                    a.CopyFrom(helper.make_attribute("value_floats", [float(v) for v in vals]))
                    count += 1
    return m, count


def round_inputs(feeds: dict) -> dict:
    """Float inputs rounded to float16 and back (others unchanged)."""
    return {k: to_fp16_and_back(v).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in feeds.items()}


def ulp_nudge(feeds: dict, rng: np.random.Generator) -> dict:
    """Each float element moved by float16's spacing at its value, up or down at random."""
    out = {}
    for k, v in feeds.items():
        if v.dtype.kind != "f":
            out[k] = v
            continue
        step = np.spacing(np.abs(v).astype(np.float16)).astype(np.float64)
        sign = rng.choice(np.array([-1.0, 1.0]), size=v.shape)
        out[k] = (v.astype(np.float64) + sign * step).astype(v.dtype)
    return out


def session(model_or_path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    src = str(model_or_path) if isinstance(model_or_path, Path) else model_or_path.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def verdict(m, names: list[str], got: list, ref: list) -> dict:
    """The zoo's comparison of one variant with (a): pass / fail, worst error, problems, and a
    short count ('3 of 300 rows', '8 of 265000 elements')."""
    worst, problems = zoo.compare_outputs(m, names, dict(zip(names, got)), dict(zip(names, ref)))
    counts = []
    for p in problems:
        # The zoo's texts say "kiln" for the side compared; here that side is the variant.
        hit = re.search(r"(\d+) of (\d+) ORT rows", p) or re.search(r"(\d+) of (\d+) elements", p)
        if hit:
            unit = "rows" if "rows" in hit.group(0) else "elements"
            counts.append(f"{hit.group(1)} of {hit.group(2)} {unit}")
        rows = re.search(r"kiln returned (\d+) rows, ORT (\d+)", p)
        if rows:
            counts.append(f"{rows.group(1)} rows vs {rows.group(2)}")
    scale = max([float(np.abs(r).max()) for r in ref if r.dtype.kind == "f" and r.size] or [0.0])
    return {"pass": not problems, "worst": worst, "problems": problems, "counts": counts, "scale": scale,
            "rel": worst / scale if scale and np.isfinite(worst) else None}


def cell(v: dict) -> str:
    if v["pass"]:
        rel = f" (max err {v['rel']:.1e} x max\\|ref\\|)" if v["rel"] is not None else ""
        return f"pass{rel}"
    what = "; ".join(v["counts"]) or v["problems"][0][:120]
    return f"**FAIL**: {what} differ"


def floor_one(m, directory: Path, seeds: int) -> dict:
    import onnx

    path = directory / f"{m.name}.onnx"
    sess = zoo.ort_session(path)
    feeds = zoo.make_feeds(m, sess)
    names = [o.name for o in sess.get_outputs()]
    t0 = time.perf_counter()
    ref = sess.run(None, feeds)
    ort_s = time.perf_counter() - t0
    model = onnx.load(str(path))
    stored, n_stored = round_stored(model, constants=True)
    inits, n_init = round_stored(model, constants=False)
    res = {"model": m.name, "stored": n_stored, "initializers": n_init, "ort_s": ort_s,
           "inputs": {k: f"{v.dtype}{list(v.shape)}" for k, v in feeds.items()}}
    res["b"] = verdict(m, names, session(stored).run(None, round_inputs(feeds)), ref)
    res["bi"] = verdict(m, names, session(inits).run(None, round_inputs(feeds)), ref)
    res["c"] = []
    if any(v.dtype.kind == "f" for v in feeds.values()):
        for s in range(seeds):
            res["c"].append(verdict(m, names, sess.run(None, ulp_nudge(feeds, np.random.default_rng(s))), ref))
    return res


def c_cell(cs: list[dict]) -> str:
    if not cs:
        return "- (no float input)"
    fails = [c for c in cs if not c["pass"]]
    if not fails:
        worst = max((c["rel"] or 0.0) for c in cs)
        return f"pass in {len(cs)} of {len(cs)} (max err {worst:.1e} x max\\|ref\\|)"
    return f"**FAIL** in {len(fails)} of {len(cs)}: " + ", ".join("; ".join(c["counts"]) or "?" for c in fails) + " differ"


def table(rows: list[dict], tol: str, seeds: int) -> str:
    lines = ["| model | (b) stored tensors and inputs fp16-rounded vs (a) | (bi) initializers and inputs "
             "fp16-rounded vs (a) | "
             f"(c) input +-1 fp16 ulp vs (a), {seeds} seeds |",
             "| --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['error']} | | |")
            continue
        lines.append(f"| {r['model']} | {cell(r['b'])} | {cell(r['bi'])} | {c_cell(r['c'])} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="zoo models or families (zoo.py's --only)")
    ap.add_argument("--dir", type=Path, default=zoo.DEFAULT_DIR, help="model directory (default %(default)s)")
    ap.add_argument("--seeds", type=int, default=3, help="random directions for (c) (default %(default)s)")
    ap.add_argument("--tolerance", default="maxref:1e-2",
                    help="the zoo's rule, as KILN_ZOO_TOLERANCE (default %(default)s: issue 17's fp16 bound)")
    ap.add_argument("--out", type=Path, help="also write the table and the problems as Markdown here")
    a = ap.parse_args()
    os.environ["KILN_ZOO_TOLERANCE"] = a.tolerance  # zoo.tolerance() reads it
    rows = []
    for m in zoo.select(a.names):
        if not (a.dir / f"{m.name}.onnx").exists():
            print(f"fp16_floor: {m.name}: not exported in {a.dir} (tools/models/zoo.py export --only {m.name})",
                  file=sys.stderr)
            return 2
        t0 = time.perf_counter()
        try:
            r = floor_one(m, a.dir, a.seeds)
        except Exception as e:  # a model ORT cannot run is a row, not a crash
            r = {"model": m.name, "error": f"{type(e).__name__}: {str(e)[:200]}"}
        rows.append(r)
        if "error" in r:
            print(f"fp16_floor: {m.name}: {r['error']}", flush=True)
            continue
        line = (f"fp16_floor: {m.name} ({time.perf_counter() - t0:.0f} s; {r['stored']} float tensors stored, "
                f"{r['initializers']} of them initializers): (b) {cell(r['b'])}; (bi) {cell(r['bi'])}; "
                f"(c) {c_cell(r['c'])}")
        print(line.replace("\\|", "|").replace("**", ""), flush=True)
        for key in ("b", "bi"):
            for p in r[key]["problems"][:3]:
                print(f"fp16_floor:   ({key}) {' '.join(p[:400].split())}", flush=True)
    text = table(rows, a.tolerance, a.seeds)
    print("\n" + text)
    if a.out:
        import onnxruntime

        details = []
        for r in rows:
            if "error" in r:
                continue
            details.append(f"- **{r['model']}** (inputs {r['inputs']}; {r['stored']} float tensors stored, "
                           f"{r['initializers']} of them initializers; "
                           f"max\\|ref\\| {r['b']['scale']:.4g}):")
            for key, label in (("b", "(b)"), ("bi", "(bi)")):
                for p in r[key]["problems"][:3]:
                    details.append(f"  - {label} {' '.join(p[:500].split())}".replace("|", "\\|"))
            for i, c in enumerate(r["c"]):
                for p in c["problems"][:1]:
                    details.append(f"  - (c) seed {i}: {' '.join(p[:500].split())}".replace("|", "\\|"))
        cmd = "bench/fp16_floor.py " + " ".join(sys.argv[1:])
        head = (f"# fp16 floor of zoo models, ONNX Runtime alone\n\n{time.strftime('%Y-%m-%d %H:%M')}; "
                f"onnxruntime {onnxruntime.__version__} (CPU, fp32); `{cmd}`.\n"
                f"Comparison: the zoo's (`zoo.compare_outputs`: sets of rows for NMS outputs), rule "
                f"`{zoo.tolerance_text()}` (KILN_ZOO_TOLERANCE={a.tolerance}). \"rows\": ORT rows of (a) with no "
                f"row of the variant within the rule.\n\n")
        a.out.write_text(head + text + "\n\nProblems (the zoo's texts; \"kiln\" there is the variant):\n\n"
                         + "\n".join(details) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

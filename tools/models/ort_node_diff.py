#!/usr/bin/env python3
"""Where kiln and ONNX Runtime first differ inside a model, node by node.

`zoo.py check` compares final outputs; `kiln verify` compares a target with
kiln's own ref target. This compares kiln with ONNX Runtime at every value:
both run a copy of the model in which every main-graph node output is also a
graph output (ORT on the CPU execution provider, kiln with `run --no-cache
--output-dir` per target), and each node output is compared exactly and with
the zoo's tolerance (|kiln - ort| <= 1e-4 + 1e-3 |ort|).

A node is an *origin* when all its inputs are bit-identical on both sides and
its output is not: the two operator implementations differ there (a kernel
difference, or a different rounding), as opposed to a difference carried in
from earlier nodes. `--from-ort OP ...` removes the nodes of those operators
and feeds their outputs from ORT's values instead: when everything after them
then matches, every difference came from those operators.

Exposing every value changes what both sides fuse (kiln's cpu target and ORT
keep each exposed value), so a difference that only a fused kernel makes is
not seen here; the final outputs are reported as well.

Usage: ort_node_diff.py MODEL [--input NAME=FILE.npy ...] [--target ref cpu]
       [--from-ort OP ...] [--kiln PATH] [--dir DIR] [--show N]
MODEL is a zoo model's name (its seeded inputs, from --dir) or an .onnx path
(inputs from --input). Exit 0 (a diagnostic, not a check); 2 on bad options;
1 with a message when kiln's run fails or --from-ort names no operator of the
model.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402
from zoo_compare import ATOL, RTOL  # noqa: E402


@dataclass
class Row:
    """One node output compared: `n_diff` elements differ bitwise (shape or
    dtype mismatch: n_diff = -1), the largest absolute difference, the number
    outside the zoo's tolerance, and whether the node is an origin."""

    node: str
    op: str
    output: str
    size: int
    n_diff: int
    max_abs: float
    n_outside: int
    origin: bool


def expose_all(model):
    """A copy of `model` whose main-graph node outputs are all graph outputs
    (untyped value infos: both runtimes infer them)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    present = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o and o not in present:
                present.add(o)
                m.graph.output.append(onnx.ValueInfoProto(name=o))
    return m


def feed_from_ort(model, ops: set[str], values: dict) -> tuple[object, dict]:
    """(copy of `model` without the nodes of `ops`, feeds): each removed
    node's outputs become graph inputs carrying ORT's `values`."""
    import onnx
    from onnx import helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    cut = [n for n in m.graph.node if n.op_type in ops]
    if not cut:
        raise SystemExit(f"ort_node_diff: no node of {sorted(ops)} in the model")
    fed = {o: values[o] for n in cut for o in n.output if o}
    keep = [n for n in m.graph.node if n.op_type not in ops]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    outs = [o for o in m.graph.output if o.name not in fed]
    del m.graph.output[:]
    m.graph.output.extend(outs)
    for name, v in fed.items():
        elem = helper.np_dtype_to_tensor_dtype(v.dtype)
        m.graph.input.append(helper.make_tensor_value_info(name, elem, list(v.shape)))
    return m, fed


def run_ort(model, feeds: dict) -> dict:
    """Every graph output of `model` from ONNX Runtime (CPU EP, default options)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def run_kiln(kiln: Path, model, feeds: dict, target: str, work: Path) -> dict:
    """Every graph output of `model` from `kiln run --target target --no-cache`."""
    import onnx

    work.mkdir(parents=True, exist_ok=True)
    path = work / "model.onnx"
    onnx.save(model, str(path))
    args = [str(kiln), "run", str(path), "--target", target, "--no-cache", "--output-dir", str(work / "out"), "--json"]
    for i, (name, v) in enumerate(feeds.items()):
        np.save(work / f"in{i}.npy", v)
        args += ["--input", f"{name}={work / f'in{i}.npy'}"]
    p = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise SystemExit(f"ort_node_diff: kiln run --target {target} exit {p.returncode}: {p.stderr.strip()}")
    files = {o["name"]: o["file"] for o in json.loads(p.stdout)["outputs"]}  # kiln's file name per output
    return {o.name: np.load(files[o.name]) for o in model.graph.output}


def compare(model, ref: dict, got: dict, fed: dict) -> list[Row]:
    """One Row per main-graph node output present in both `ref` and `got`, in
    graph order. Values in `fed` (graph inputs given to both) count as equal."""
    same = {name: True for name in fed}
    same.update({i.name: True for i in model.graph.input})
    same.update({t.name: True for t in model.graph.initializer})
    rows = []
    for n in model.graph.node:
        inputs_same = all(same.get(i, False) for i in n.input if i)
        for o in n.output:
            if not o or o not in ref or o not in got:
                continue
            r, g = ref[o], got[o]
            if r.shape != g.shape or r.dtype != g.dtype:
                rows.append(Row(n.name, n.op_type, o, r.size, -1, float("inf"), r.size, inputs_same))
                same[o] = False
                continue
            equal = r == g
            if r.dtype.kind == "f":
                equal |= np.isnan(r) & np.isnan(g)
            differ = ~equal
            n_diff = int(differ.sum())
            same[o] = n_diff == 0
            r64, g64 = r.astype(np.float64), g.astype(np.float64)
            with np.errstate(invalid="ignore"):
                d = np.where(differ, np.abs(g64 - r64), 0.0)
            outside = int((d > ATOL + RTOL * np.abs(r64)).sum()) if r.dtype.kind == "f" else n_diff
            rows.append(Row(n.name, n.op_type, o, r.size, n_diff, float(np.nan_to_num(d, nan=np.inf).max(initial=0)),
                            outside, inputs_same and n_diff != 0))
    return rows


def describe(row: Row) -> str:
    if row.n_diff < 0:
        return f"{row.op} '{row.node}' -> '{row.output}': shape or dtype differs"
    return (f"{row.op} '{row.node}' -> '{row.output}': {row.n_diff} of {row.size} elements differ, "
            f"max abs {row.max_abs:.3g}, {row.n_outside} outside the tolerance")


def report(target: str, finals: set[str], rows: list[Row], show: int) -> None:
    """Prints, for one target, the first difference, the origins, the first
    value outside the tolerance and the model's own outputs (`finals`)."""
    differing = [r for r in rows if r.n_diff != 0]
    print(f"== kiln {target} vs ONNX Runtime: {len(differing)} of {len(rows)} node outputs differ")
    if not differing:
        return
    print(f"first difference: {describe(differing[0])}")
    origins = [r for r in rows if r.origin]
    print(f"origins (inputs identical, output not): {len(origins)}")
    for r in origins[:show]:
        print(f"  {describe(r)}")
    outside = [r for r in rows if r.n_outside]
    if outside:
        print(f"first outside the tolerance: {describe(outside[0])}")
    for r in rows:
        if r.output in finals and r.n_diff:
            print(f"graph output: {describe(r)}")


def parse_inputs(items: list[str]) -> dict:
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"ort_node_diff: --input '{item}' is not NAME=FILE.npy")
        feeds[name] = np.load(path)
    return feeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo model's name or an .onnx path")
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy (for an .onnx path)")
    ap.add_argument("--target", nargs="+", default=["ref", "cpu"], help="kiln targets (default ref cpu)")
    ap.add_argument("--from-ort", nargs="+", default=[], metavar="OP",
                    help="operators whose outputs are fed from ORT's values instead of computed by kiln")
    ap.add_argument("--kiln", type=Path, default=zoo.DEFAULT_KILN, help="kiln binary (default %(default)s)")
    ap.add_argument("--dir", type=Path, default=zoo.DEFAULT_DIR, help="zoo model directory (default %(default)s)")
    ap.add_argument("--show", type=int, default=10, help="origins listed per target (default %(default)s)")
    args = ap.parse_args()
    import onnx

    if args.model.endswith(".onnx"):
        model = onnx.load(args.model)
        feeds = parse_inputs(args.input)
    else:
        (m,) = zoo.select([args.model])
        path = args.dir / f"{m.name}.onnx"
        model = onnx.load(str(path))
        feeds = zoo.make_feeds(m, zoo.ort_session(path))
    exposed = expose_all(model)
    ref = run_ort(exposed, feeds)
    fed = {}
    if args.from_ort:
        exposed, fed = feed_from_ort(exposed, set(args.from_ort), ref)
        print(f"fed from ORT: every output of {', '.join(args.from_ort)} ({len(fed)} values)")
    with tempfile.TemporaryDirectory(prefix="ort_node_diff.") as tmp:
        for target in args.target:
            got = run_kiln(args.kiln, exposed, {**feeds, **fed}, target, Path(tmp) / target)
            report(target, {o.name for o in model.graph.output}, compare(exposed, ref, got, fed), args.show)
    return 0


if __name__ == "__main__":
    sys.exit(main())

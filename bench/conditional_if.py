#!/usr/bin/env python3
"""Latency of an If on a data condition on the cuda target: a conditional node
inside the CUDA graph (kiln.cuda.If) against host fallback of the same If
(KILN_CUDA_CONDITIONAL=0: the If runs in a host segment, with its copies).

The model (per size [B,D]): cond = ReduceSum(x) > 0; then_branch:
Relu(MatMul(x, W[D,D])); else_branch: Tanh(x) * 3; y = If + x. `kiln perf
--target cuda --no-value-specialization` measures each variant with an
input whose elements are all positive (then) or all negative (else): median
latency with host I/O. `kiln inspect --json` of the conditional variant's
artifact shows its conditional node.

Usage: conditional_if.py --kiln PATH [--out DIR] [--runs N]
Writes DIR/conditional_if.json and DIR/conditional_if.md; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SIZES = [(1, 256), (16, 1024), (64, 2048)]


def model(path: Path, b: int, d: int) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), "W")
    three = numpy_helper.from_array(np.array(3, dtype=np.float32), "three")
    zero = numpy_helper.from_array(np.array(0, dtype=np.float32), "zero")
    out = lambda n: [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, d])]
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
                                helper.make_node("Relu", ["m"], ["t"], name="relu")], "then", [], out("t"))
    else_g = helper.make_graph([helper.make_node("Tanh", ["x"], ["h"], name="tanh"),
                                helper.make_node("Mul", ["h", "three"], ["e"], name="mul")], "else", [], out("e"))
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["br"], then_branch=then_g, else_branch=else_g, name="if"),
             helper.make_node("Add", ["br", "x"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, d])], out("y"),
                          [w, three, zero])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def run(cmd: list[str], conditional: bool) -> subprocess.CompletedProcess:
    # The cache key does not see KILN_CUDA_CONDITIONAL: one cache per variant.
    env = dict(os.environ, KILN_CUDA_CONDITIONAL="1" if conditional else "0",
               XDG_CACHE_HOME=f"/tmp/kiln_cif_cache_{int(conditional)}")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-800:]}")
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--runs", type=int, default=500)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, inspected = [], None
    for b, d in SIZES:
        m = model(out / f"cif_{b}x{d}.onnx", b, d)
        for branch, sign in (("then", 1.0), ("else", -1.0)):
            x = out / f"cif_x_{b}x{d}_{branch}.npy"
            np.save(x, (sign * (0.1 + np.abs(np.random.default_rng(1).standard_normal((b, d))))).astype(np.float32))
            row = {"batch": b, "dim": d, "branch": branch}
            for name, cond in (("conditional", True), ("host", False)):
                cmd = [a.kiln, "perf", str(m), "--target", "cuda", "--no-value-specialization", "--input", f"x={x}",
                       "--runs", str(a.runs), "--warmup", "50", "--json"]
                row[f"{name}_ms"] = json.loads(run(cmd, cond).stdout)["latency_ms_median"]
            rows.append(row)
            x.unlink()
        if inspected is None:
            art = out / "cif.kiln"
            run([a.kiln, "compile", str(m), "-o", str(art), "--target", "cuda", "--no-value-specialization"], True)
            inspected = json.loads(run([a.kiln, "inspect", str(art), "--json"], True).stdout)["conditional_nodes"]
            art.unlink()
        m.unlink()
    (out / "conditional_if.json").write_text(json.dumps({"rows": rows, "conditional_nodes": inspected}, indent=1))
    lines = ["| x | branch | conditional node (ms) | host fallback (ms) | host / conditional |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| [{r['batch']},{r['dim']}] | {r['branch']} | {r['conditional_ms']:.4f} | {r['host_ms']:.4f} | "
                     f"{r['host_ms'] / r['conditional_ms']:.2f} |")
    text = "\n".join(lines) + f"\n\nkiln inspect (conditional variant, first size): {json.dumps(inspected)}\n"
    (out / "conditional_if.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

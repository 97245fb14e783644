#!/usr/bin/env python3
"""ddddocr_common_old (ONNX Runtime's dynamic quantization: DynamicQuantizeLinear,
ConvInteger, MatMulInteger, com.microsoft DynamicQuantizeLSTM) end to end: the cpu
target's integer kernels against the ref target, bit for bit.

The cpu program is compiled with its float operators kept on the reference kernels
(KILN_DEBUG_CPU_SKIP), so that every difference could only come from the quantized
operators, which run on the cpu target's kernels (checked: none of them is a
reference node; with VNNI / AMX they run on oneDNN's int8 kernels, without on its
float32 ones, exact for this model's weights: their sums reach 0.22 of the bound
2^24 / 255). Every
output must then equal the ref target's bit for bit on the zoo's seeded input.
The full cpu program (float operators on oneDNN too) is run as well and its largest
difference from ref printed (not asserted: oneDNN's float Sigmoid differs from the
reference's by an ulp, which this ill-conditioned model amplifies; docs/zoo.md).

Usage: int8_exact.py --kiln build/tools/kiln/kiln [--dir .models/zoo]
Exit 0 pass, 1 fail, 77 skipped (the model is not exported: `tools/models/zoo.py
export --only ddddocr_common_old`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = "ddddocr_common_old"
QUANT_OPS = {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"}
FLOAT_OPS = "Mul,Add,Sub,Div,Max,Min,Sigmoid,Tanh,Relu,Transpose,Concat,Split,Softmax,Gemm,MatMul,Conv,Floor,Round,Clip"


def run(cmd: list[str], env: dict | None = None) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}")
    return r.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", type=Path, required=True)
    ap.add_argument("--dir", type=Path, default=REPO / ".models" / "zoo")
    args = ap.parse_args()
    path = args.dir / f"{MODEL}.onnx"
    if not path.exists():
        print(f"SKIPPED: {path} is not exported (tools/models/zoo.py export --only {MODEL})")
        return 77
    import numpy as np

    sys.path.insert(0, str(REPO / "tools" / "models"))
    import zoo

    m = next(z for z in zoo.select([MODEL]) if z.name == MODEL)
    sess = zoo.ort_session(path)
    feeds = zoo.make_feeds(m, sess)
    del sess
    kiln = str(args.kiln.resolve())
    with tempfile.TemporaryDirectory(prefix="kiln-int8-exact-") as td:
        tmp = Path(td)
        inputs, shapes = [], []
        for i, (name, arr) in enumerate(feeds.items()):
            f = tmp / f"in{i}.npy"
            np.save(f, arr)
            inputs += ["--input", f"{name}={f}"]
            shapes += ["--shape", f"{name}={'x'.join(str(d) for d in arr.shape)}"]
        outs = {}
        for label, target, env in (("ref", "ref", None), ("cpu-int8", "cpu", {"KILN_DEBUG_CPU_SKIP": FLOAT_OPS}),
                                   ("cpu", "cpu", None)):
            art = tmp / f"{label}.kiln"
            run([kiln, "compile", str(path), "-o", str(art), "--target", target] + shapes, env)
            if label == "cpu-int8":
                info = json.loads(run([kiln, "inspect", str(art), "--json"]))
                ref_ops = {n.get("op") for n in info.get("reference_nodes", [])}
                left = sorted(ref_ops & QUANT_OPS)
                if left:
                    print(f"FAIL: quantized operators left on reference kernels: {left}")
                    return 1
                print(f"{label}: quantized operators on reference kernels: {left or 'none'}")
            od = tmp / f"out-{label}"
            run([kiln, "run", str(art), "--output-dir", str(od)] + inputs, env)
            outs[label] = {f.stem: np.load(f) for f in sorted(od.glob("*.npy"))}
    ok = True
    for name, want in outs["ref"].items():
        got = outs["cpu-int8"].get(name)
        same = got is not None and got.shape == want.shape and got.dtype == want.dtype and \
            np.array_equal(got.view(np.uint8), want.view(np.uint8))
        full = outs["cpu"].get(name)
        full_err = float(np.abs(full.astype(np.float64) - want).max()) if full is not None else float("nan")
        print(f"output {name} {list(want.shape)}: cpu (integer kernels) vs ref {'bit-identical' if same else 'DIFFERENT'}; "
              f"full cpu vs ref max abs {full_err:.3g} (max |ref| {float(np.abs(want).max()):.3g})")
        ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

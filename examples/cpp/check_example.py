#!/usr/bin/env python3
"""Checks kiln_example_run's printed outputs against ONNX Runtime.

Usage: check_example.py MODEL.onnx RUN_OUTPUT.txt

Feeds ONNX Runtime the inputs run.cpp makes (element i: ((i % 17) - 8) / 8
for floats, i % 7 for integers, i % 2 for bools; symbolic dims 1) and checks
each "output NAME DTYPE[SHAPE] sum=S first=..." line: same dtype and shape,
the sum within 1e-4 + 1e-3 * sum(|ORT|), the first values within 1e-4 + 1e-3 * |ORT|.
Exit 0 when every output matches, 1 otherwise.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import onnxruntime as ort

_NP = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
       "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


def pattern(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.int64)
    if dtype in (np.float32, np.float64):
        v = ((i % 17) - 8) / 8.0
    elif dtype == np.bool_:
        v = (i % 2) != 0
    else:
        v = i % 7
    return v.astype(dtype).reshape(shape)


def main(model: str, printed: str) -> int:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in i.shape]
        feeds[i.name] = pattern(_NP[i.type], shape)
    refs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    lines = [l for l in open(printed).read().splitlines() if l.startswith("output ")]
    problems = []
    if len(lines) != len(refs):
        problems.append(f"{len(lines)} output lines for {len(refs)} outputs")
    for line in lines:
        m = re.match(r"output (\S+) (\w+)\[([\d,]*)\] sum=(\S+) first=(\S*)$", line)
        if not m:
            problems.append(f"unreadable line: {line}")
            continue
        name, dtype, shape, total, first = m.groups()
        ref = refs.get(name)
        if ref is None:
            problems.append(f"{name}: not an output of the model")
            continue
        shape = [int(d) for d in shape.split(",")] if shape else []
        if dtype != str(ref.dtype) or shape != list(ref.shape):
            problems.append(f"{name}: {dtype}{shape} but ONNX Runtime gives {ref.dtype}{list(ref.shape)}")
            continue
        r = ref.astype(np.float64).ravel()
        if abs(float(total) - r.sum()) > 1e-4 + 1e-3 * np.abs(r).sum():
            problems.append(f"{name}: sum {total} but ONNX Runtime's is {r.sum():.9g}")
        for k, v in enumerate(first.split(",") if first else []):
            if abs(float(v) - r[k]) > 1e-4 + 1e-3 * abs(r[k]):
                problems.append(f"{name}[{k}]: {v} but ONNX Runtime gives {r[k]:.9g}")
        print(f"check_example: {name} {dtype}{shape} matches ONNX Runtime (sum {total})")
    for p in problems:
        print(f"check_example: FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))

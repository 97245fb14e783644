#!/usr/bin/env python3
"""How far one-ulp differences in an operator's outputs move a zoo model's
outputs, measured inside ONNX Runtime alone.

For each zoo model named, it runs ORT twice on the zoo's inputs: the model as
it is, and the model with every output of the chosen operators (default:
Sigmoid) multiplied by nextafter(1, 2) = 1 + 2^-23 (a one-ulp change of about
half the elements). When the two ORT runs already differ beyond the zoo's
tolerance (|a - b| <= 1e-4 + 1e-3 |b|), the model cannot be compared with
`zoo.py check` at that tolerance unless kiln reproduces ORT's operator
bit-for-bit: e.g. dynamically quantized networks, where a one-ulp change moves
a DynamicQuantizeLinear range or rounds a value to the next integer, and the
changes avalanche through the following quantized layers.

Usage: ort_ulp_sensitivity.py NAME [NAME ...] [--dir DIR] [--op Sigmoid ...]
Prints one line per model and output: max abs difference and the number of
elements outside the tolerance. Exit 0 (a diagnostic, not a check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402


def perturbed(model, ops: set[str]):
    """A copy of `model` with each output of an `ops` node multiplied by 1 + 2^-23."""
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    g.initializer.append(numpy_helper.from_array(np.nextafter(np.float32(1), np.float32(2)), "kiln_one_ulp_up"))
    nodes = []
    for n in g.node:
        nodes.append(n)
        if n.op_type in ops and n.domain in ("", "ai.onnx"):
            out = n.output[0]
            n.output[0] = out + "_kiln_unperturbed"
            nodes.append(helper.make_node("Mul", [n.output[0], "kiln_one_ulp_up"], [out]))
    del g.node[:]
    g.node.extend(nodes)
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="zoo models")
    ap.add_argument("--dir", type=Path, default=zoo.DEFAULT_DIR, help="model directory (default %(default)s)")
    ap.add_argument("--op", nargs="+", default=["Sigmoid"], help="operators whose outputs move (default Sigmoid)")
    args = ap.parse_args()
    import onnx
    import onnxruntime as ort

    for m in zoo.select(args.names):
        path = args.dir / f"{m.name}.onnx"
        model = onnx.load(str(path))
        sess = zoo.ort_session(path)
        feeds = zoo.make_feeds(m, sess)
        names = [o.name for o in sess.get_outputs()]
        base = sess.run(None, feeds)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        moved = ort.InferenceSession(perturbed(model, set(args.op)).SerializeToString(), so,
                                     providers=["CPUExecutionProvider"]).run(None, feeds)
        for n, a, b in zip(names, moved, base):
            if a.dtype.kind != "f":
                print(f"{m.name}: {n}: {'equal' if np.array_equal(a, b) else 'differs'} ({a.dtype})")
                continue
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            out = int((d > 1e-4 + 1e-3 * np.abs(b.astype(np.float64))).sum())
            print(f"{m.name}: {n}: {'+'.join(args.op)} outputs x (1 + 2^-23): max abs diff {d.max():.3g}, "
                  f"{out} of {d.size} elements outside the zoo's tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())

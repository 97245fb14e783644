#!/usr/bin/env python3
"""Rewrites an eager-form attention ONNX model (transformers' BERT exported by
torch 1.13: scores = MatMul(Q, K^T) / sqrt(d)) into the form torch.onnx gives
F.scaled_dot_product_attention (torch >= 2.0): each operand is scaled by
sqrt(1/sqrt(d)) before the product, scores = MatMul(Q * c, K^T * c), and the
Div is gone. The values are the same up to float32 rounding.

Debian's torch 1.13 cannot export that form itself; this makes a real-size
model of it for measuring the cpu target's recognize_attention pass (with the
pass both forms compile to the same program).

Usage: make_sdpa_form.py IN.onnx OUT.onnx [--head-dim 64]
"""
import argparse

import numpy as np
import onnx
from onnx import helper, numpy_helper


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--head-dim", type=int, default=64)
    args = ap.parse_args()

    m = onnx.load(args.src)
    g = m.graph
    producer = {o: n for n in g.node for o in n.output}
    c = np.array(1.0 / np.sqrt(np.sqrt(float(args.head_dim))), dtype=np.float32)
    g.initializer.append(numpy_helper.from_array(c, "sdpa_c"))

    # Div(MatMul(Q, K^T), sqrt(d)) -> the MatMul it divides.
    divided = {}
    for n in g.node:
        if n.op_type == "Div" and n.input[0] in producer and producer[n.input[0]].op_type == "MatMul":
            divided[n.output[0]] = producer[n.input[0]]
    scores_matmuls = {id(mm) for mm in divided.values()}

    nodes = []
    for n in g.node:
        if n.output and n.output[0] in divided:
            continue  # the Div goes
        if id(n) in scores_matmuls:
            q, kt = n.input
            nodes.append(helper.make_node("Mul", [q, "sdpa_c"], [q + "_sdpa"]))
            nodes.append(helper.make_node("Mul", [kt, "sdpa_c"], [kt + "_sdpa"]))
            n.input[0], n.input[1] = q + "_sdpa", kt + "_sdpa"
        for i, x in enumerate(n.input):
            if x in divided:  # the Div's readers read the unscaled scores' MatMul
                n.input[i] = divided[x].output[0]
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, args.dst)
    print(f"{len(divided)} attention blocks rewritten into the scaled_dot_product_attention form")


if __name__ == "__main__":
    main()

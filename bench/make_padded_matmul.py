#!/usr/bin/env python3
"""Writes an ONNX model that is one MatMul by a constant B [k, n] (GPT-2's LM
head by default: x float32[32, 128, 768] @ W[768, 50257] -> logits), for
timing kiln's padded-n matmuls (issue #20, KILN_CUDA_GEMM_PAD_N; docs/cuda.md,
"Matmuls whose rows are not 16-byte aligned"). Random weights (seed 0), opset
17, static shapes, float32 (kiln's --precision fp16 makes it 16-bit; the
logits stay float32, as in GPT-2).
Usage: make_padded_matmul.py OUT.onnx [--rows 32,128] [--k 768] [--n 50257] [--bias]
Needs numpy and the onnx package; without onnx, torch's exporter is used.
"""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--rows", default="32,128", help="A's dims before k (their product is m)")
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--n", type=int, default=50257)
    ap.add_argument("--bias", action="store_true", help="add a [n] bias after the MatMul")
    a = ap.parse_args()
    rows = [int(d) for d in a.rows.split(",")]
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((a.k, a.n), dtype=np.float32) / np.sqrt(a.k)).astype(np.float32)
    b = rng.standard_normal((a.n,), dtype=np.float32) * 0.1 if a.bias else None
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        onnx = None
    if onnx is not None:
        inits = [numpy_helper.from_array(w, "W")]
        nodes = [helper.make_node("MatMul", ["x", "W"], ["mm" if a.bias else "logits"])]
        if a.bias:
            inits.append(numpy_helper.from_array(b.astype(np.float32), "b"))
            nodes.append(helper.make_node("Add", ["mm", "b"], ["logits"]))
        g = helper.make_graph(nodes, "padded_matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, rows + [a.k])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, rows + [a.n])], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-bench")
        onnx.save(m, a.out)
    else:
        import torch

        class Head(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.from_numpy(w), requires_grad=False)
                self.b = torch.nn.Parameter(torch.from_numpy(b), requires_grad=False) if a.bias else None

            def forward(self, x):
                y = torch.matmul(x, self.w)
                return y + self.b if self.b is not None else y

        torch.onnx.export(Head().eval(), (torch.zeros(rows + [a.k]),), a.out, input_names=["x"],
                          output_names=["logits"], opset_version=17, dynamo=False)
    print(f"{a.out}: x {rows + [a.k]} @ W [{a.k}, {a.n}]{' + b' if a.bias else ''}")


if __name__ == "__main__":
    main()

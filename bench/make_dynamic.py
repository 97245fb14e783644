#!/usr/bin/env python3
"""Makes dynamic-shape copies of the static benchmark models (for bench/buckets_stream.py).

The models in .models/ were exported with fixed shapes: BERT-base takes
[1,128] token ids and bakes 1 and 128 into its Reshape targets and its
position ids; ResNet-50 takes [1,3,224,224]. Shape buckets need symbolic dims
(ONNX dim_param), so this script writes equivalent models with them:

  bert_base_dyn.onnx: inputs [batch, sequence]; Reshape targets [1,128,...]
      become [0,0,...] (copy the input's dim); position ids become
      Range(0, Shape(input_ids)[1]) instead of the constant 0..127; outputs
      [batch, sequence, 768] and [batch, 768].
  resnet50_dyn.onnx: input [N,3,224,224], output [N,1000].

The rewritten graphs compute the same values as the originals (checked here
with ONNX Runtime at the original shape). Weights are written to one external
data file next to each model.

Usage: bench/make_dynamic.py [--models .models] [--out /tmp/kiln-dyn]
"""
import argparse
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto


def set_dims(vi, dims):
    shape = vi.type.tensor_type.shape
    for d, v in zip(shape.dim, dims):
        d.Clear()
        if isinstance(v, str):
            d.dim_param = v
        else:
            d.dim_value = v


def bert(m):
    g = m.graph
    consts = {n.output[0]: n for n in g.node if n.op_type == "Constant"}
    for n in g.node:
        if n.op_type == "Reshape" and n.input[1] in consts:
            c = consts[n.input[1]]
            v = numpy_helper.to_array(c.attribute[0].t).copy()
            assert v[0] == 1 and v[1] == 128, (n.name, v)
            v[0] = 0
            v[1] = 0
            c.attribute[0].t.CopyFrom(numpy_helper.from_array(v.astype(np.int64)))
    # Each Reshape has its own Constant in this export; check none is shared with another consumer.
    for n in g.node:
        if n.op_type == "Gather" and n.name.endswith("position_embeddings/Gather"):
            nodes = [
                helper.make_node("Shape", ["input_ids"], ["dyn/shape"]),
                helper.make_node("Constant", [], ["dyn/one"], value=numpy_helper.from_array(np.array(1, np.int64))),
                helper.make_node("Constant", [], ["dyn/zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
                helper.make_node("Gather", ["dyn/shape", "dyn/one"], ["dyn/seq"], axis=0),
                helper.make_node("Range", ["dyn/zero", "dyn/seq", "dyn/one"], ["dyn/range"]),
                helper.make_node("Constant", [], ["dyn/axes"], value=numpy_helper.from_array(np.array([0], np.int64))),
                helper.make_node("Unsqueeze", ["dyn/range", "dyn/axes"], ["dyn/position_ids"]),
            ]
            n.input[1] = "dyn/position_ids"
            idx = list(g.node).index(n)
            for k, x in enumerate(nodes):
                g.node.insert(idx + k, x)
            break
    else:
        raise SystemExit("position embedding Gather not found")
    for vi in g.input:
        set_dims(vi, ["batch", "sequence"])
    for vi in g.output:
        set_dims(vi, ["batch", "sequence", 768] if len(vi.type.tensor_type.shape.dim) == 3 else ["batch", 768])
    del g.value_info[:]


def resnet(m):
    g = m.graph
    set_dims(g.input[0], ["N", 3, 224, 224])
    set_dims(g.output[0], ["N", 1000])
    del g.value_info[:]


def check(orig, dyn, feeds):
    import onnxruntime as ort
    a = ort.InferenceSession(orig, providers=["CPUExecutionProvider"]).run(None, feeds)
    b = ort.InferenceSession(dyn, providers=["CPUExecutionProvider"]).run(None, feeds)
    for x, y in zip(a, b):
        err = float(np.max(np.abs(x - y)))
        assert err < 1e-4, err
    print(f"  {os.path.basename(dyn)}: same outputs as the original at its shape (max |diff| {err:.2e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=".models")
    ap.add_argument("--out", default="/tmp/kiln-dyn")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, fix, feeds in [
        ("bert_base", bert, {"input_ids": rng.integers(0, 30000, (1, 128)), "attention_mask": np.ones((1, 128), np.int64),
                             "token_type_ids": np.zeros((1, 128), np.int64)}),
        ("resnet50", resnet, {"input": rng.random((1, 3, 224, 224), np.float32)}),
    ]:
        src = os.path.join(a.models, name + ".onnx")
        dst = os.path.join(a.out, name + "_dyn.onnx")
        m = onnx.load(src)
        fix(m)
        onnx.checker.check_model(m)
        onnx.save(m, dst, save_as_external_data=True, all_tensors_to_one_file=True, location=name + "_dyn.data")
        feeds = {k: (v.astype(np.int64) if v.dtype.kind == "i" else v) for k, v in feeds.items()}
        check(src, dst, feeds)
        print(dst)


if __name__ == "__main__":
    main()

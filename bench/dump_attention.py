"""Prints the nodes of the first encoder layer's self-attention of a BERT ONNX
export (op type, name, input and output shapes, attributes): what an exporter
wrote, for the cuda target's attention fusion (fuse_attention.cpp).
Usage: dump_attention.py MODEL.onnx [NAME_PART]  (default "layer.0/attention/self")"""
import sys

import onnx

path = sys.argv[1]
part = sys.argv[2] if len(sys.argv) > 2 else "layer.0/attention/self"
m = onnx.shape_inference.infer_shapes(onnx.load(path))
shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in list(m.graph.value_info) + list(m.graph.input)}
for n in m.graph.node:
    if part in n.name:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute if a.name != "value"}
        print(n.op_type, n.name, [(i, shapes.get(i)) for i in n.input], [(o, shapes.get(o)) for o in n.output], attrs)

"""Prints a window of an ONNX graph around its first node of an op type (op type, name, input and output
shapes, attributes): what an exporter wrote around, e.g., the first attention's Softmax, for the cuda
target's fusions (fuse_attention.cpp) when the node names say nothing (torch.onnx's dynamo exporter).
Usage: dump_window.py MODEL.onnx [OP_TYPE [BEFORE [AFTER]]]  (default Softmax 30 8)"""
import sys

import onnx

path = sys.argv[1]
op = sys.argv[2] if len(sys.argv) > 2 else "Softmax"
before = int(sys.argv[3]) if len(sys.argv) > 3 else 30
after = int(sys.argv[4]) if len(sys.argv) > 4 else 8
m = onnx.shape_inference.infer_shapes(onnx.load(path, load_external_data=False))
vals = list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)
shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in vals}
consts = {i.name: list(onnx.numpy_helper.to_array(i).ravel()[:6]) if onnx.numpy_helper.to_array(i).size <= 6 else
          f"init{list(i.dims)}" for i in m.graph.initializer if i.data_location != onnx.TensorProto.EXTERNAL}
nodes = list(m.graph.node)
at = next((k for k, n in enumerate(nodes) if n.op_type == op), None)
if at is None:
    sys.exit(f"no {op} node in {path}")
for n in nodes[max(0, at - before):at + after + 1]:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute if a.name != "value"}
    ins = [(i, consts[i]) if i in consts else (i, shapes.get(i)) for i in n.input]
    print(n.op_type, n.name, ins, [(o, shapes.get(o)) for o in n.output], attrs)

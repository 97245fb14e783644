"""Small ONNX models the plugin tests build (onnx.helper), each for one case."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def conv_net(path):
    """x[1,3,16,16] -> Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax (all kiln's)."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    fw = numpy_helper.from_array(rng.standard_normal((5, 4 * 8 * 8)).astype(np.float32), "fw")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw"], ["g"], transB=1, name="fc"),
        helper.make_node("Softmax", ["g"], ["y"], axis=1, name="softmax"),
    ]
    g = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, b, fw])
    onnx.save(_model(g), str(path))
    return {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def with_op_kiln_lacks(path):
    """Conv -> Relu -> MaxRoiPool (no kiln parser) -> Relu -> Mul: kiln takes
    the nodes on both sides (two partitions), ORT's CPU EP the MaxRoiPool."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    rois = numpy_helper.from_array(np.array([[0, 0, 0, 7, 7], [0, 4, 4, 15, 15]], dtype=np.float32), "rois")
    k = numpy_helper.from_array(np.float32(0.5).reshape(()), "k")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxRoiPool", ["r", "rois"], ["m"], pooled_shape=[2, 2], name="roipool"),
        helper.make_node("Relu", ["m"], ["r2"], name="relu2"),
        helper.make_node("Mul", ["r2", "k"], ["y"], name="scale"),
    ]
    g = helper.make_graph(nodes, "roi_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 2, 2])], [w, rois, k])
    onnx.save(_model(g), str(path))
    return {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}


def with_if(path):
    """An If whose branches read only their own values (no outer-scope value),
    taken by kiln on every ORT version. Each branch is a ConstantOfShape,
    whose `value` is a tensor attribute (ORT turns Constant nodes into
    initializers before any EP sees them, ConstantOfShape it does not)."""
    def branch(name, value):
        shape = numpy_helper.from_array(np.array([2, 2], dtype=np.int64), f"{name}_shape")
        t = numpy_helper.from_array(np.array([value], dtype=np.float32), f"{name}_v")
        n = helper.make_node("ConstantOfShape", [f"{name}_shape"], [f"{name}_out"], value=t, name=f"{name}_cos")
        return helper.make_graph([n], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 2])],
                                 [shape])

    nodes = [
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.float32(0).reshape(()), "zv"),
                         name="zero_const"),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["b"], then_branch=branch("then", 2.0), else_branch=branch("else", -3.0),
                         name="if"),
        helper.make_node("Mul", ["x", "b"], ["y"], name="mul"),
    ]
    g = helper.make_graph(nodes, "if_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    onnx.save(_model(g), str(path))
    return {"x": np.array([[1, 2], [3, 4]], dtype=np.float32)}


def dynamic_batch_mlp(path):
    """x[N,4] -> MatMul -> Add -> Relu -> y[N,3] and Sigmoid -> z[N,3]: the
    batch is symbolic (kiln specialises a program per batch size seen)."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
        helper.make_node("Sigmoid", ["a"], ["z"], name="sigmoid"),
    ]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])], [w, b])
    onnx.save(_model(g), str(path))

#!/usr/bin/env python3
"""Writes dynamic_quantize_lstm_refs.inc: small com.microsoft DynamicQuantizeLSTM
cases (inputs and ONNX Runtime's outputs) for test_dynamic_quantize_lstm.cpp.

Run with the project venv (onnx, numpy, onnxruntime 1.32.0):
  .venv/bin/python tests/unit/ops/gen_dynamic_quantize_lstm_refs.py
ONNX Runtime runs with one intra-op thread: with more it may split the batch
into several H*R products, each quantized with its own range (see
src/ops/dynamic_quantize_lstm.cpp); kiln computes the one-thread result.
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dynamic_quantize_lstm_refs.inc")


def case(name, rng, *, direction="forward", seq=3, batch=1, inp=3, hidden=2, wtype=np.int8, per_column=False,
         bias=True, lens=None, init_state=False, peep=False, want_y=True, input_forget=0, clip=None):
    dirs = 2 if direction == "bidirectional" else 1
    gh = 4 * hidden
    x = np.round(rng.uniform(-1, 1, (seq, batch, inp)), 2).astype(np.float32)
    lo, hi = (-127, 127) if wtype == np.int8 else (0, 255)
    w = rng.integers(lo, hi + 1, (dirs, inp, gh)).astype(wtype)
    r = rng.integers(lo, hi + 1, (dirs, hidden, gh)).astype(wtype)
    qshape = (dirs, gh) if per_column else (dirs,)
    w_scale = np.round(rng.uniform(0.002, 0.01, qshape), 4).astype(np.float32)
    r_scale = np.round(rng.uniform(0.002, 0.01, qshape), 4).astype(np.float32)
    if wtype == np.int8:
        w_zp = np.zeros(qshape, np.int8)
        r_zp = np.zeros(qshape, np.int8)
    else:  # uint8: per direction (per-column ones must be one value)
        w_zp = np.full(qshape, 0, np.uint8)
        r_zp = np.full(qshape, 0, np.uint8)
        for d in range(dirs):
            w_zp[d] = rng.integers(100, 156)
            r_zp[d] = rng.integers(100, 156)
        if per_column:
            w_zp[:] = w_zp[0]
            r_zp[:] = r_zp[0]
    inits = {"W": w, "R": r}
    b = np.round(rng.uniform(-0.5, 0.5, (dirs, 2 * gh)), 2).astype(np.float32) if bias else None
    if b is not None:
        inits["B"] = b
    lens_a = np.array(lens, np.int32) if lens is not None else None
    if lens_a is not None:
        inits["sequence_lens"] = lens_a
    h0 = np.round(rng.uniform(-1, 1, (dirs, batch, hidden)), 2).astype(np.float32) if init_state else None
    c0 = np.round(rng.uniform(-1, 1, (dirs, batch, hidden)), 2).astype(np.float32) if init_state else None
    if init_state:
        inits["initial_h"], inits["initial_c"] = h0, c0
    p = np.round(rng.uniform(-0.5, 0.5, (dirs, 3 * hidden)), 2).astype(np.float32) if peep else None
    if p is not None:
        inits["P"] = p
    inits.update({"W_scale": w_scale, "W_zero_point": w_zp, "R_scale": r_scale, "R_zero_point": r_zp})
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P", "W_scale", "W_zero_point",
             "R_scale", "R_zero_point"]
    node_in = [n if (n == "X" or n in inits) else "" for n in order]
    outs = ["Y" if want_y else "", "Y_h", "Y_c"]
    attrs = {"hidden_size": hidden, "direction": direction, "input_forget": input_forget}
    if clip is not None:
        attrs["clip"] = clip
    node = helper.make_node("DynamicQuantizeLSTM", node_in, outs, domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o],
        [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    res = dict(zip([o for o in outs if o], sess.run(None, {"X": x})))
    return dict(name=name, direction=direction, hidden=hidden, input_forget=input_forget, clip=clip or 0.0, x=x,
                signed=wtype == np.int8, w=w, r=r, b=b, lens=lens_a, h0=h0, c0=c0, p=p, w_scale=w_scale, w_zp=w_zp,
                r_scale=r_scale, r_zp=r_zp, y=res.get("Y"), yh=res["Y_h"], yc=res["Y_c"])


def lit(v):
    """A float32 value as a C++ float literal."""
    t = f"{float(v):.9g}"
    return t + ("f" if any(ch in t for ch in ".e") else ".0f")


def f32(a):
    if a is None:
        return "{}"
    return "{" + ", ".join(lit(v) for v in a.ravel()) + "}"


def ints(a):
    if a is None:
        return "{}"
    return "{" + ", ".join(str(int(v)) for v in a.ravel()) + "}"


def dims(a):
    return "{" + ", ".join(str(d) for d in a.shape) + "}"


def emit(c):
    return f"""    {{"{c['name']}", "{c['direction']}", {c['hidden']}, {c['input_forget']}, {lit(c['clip'])},
     {dims(c['x'])}, {f32(c['x'])},
     {str(c['signed']).lower()}, {ints(c['w'])}, {ints(c['r'])},
     {f32(c['b'])}, {ints(c['lens'])}, {f32(c['h0'])}, {f32(c['c0'])}, {f32(c['p'])},
     {dims(c['w_scale'])}, {f32(c['w_scale'])}, {ints(c['w_zp'])}, {f32(c['r_scale'])}, {ints(c['r_zp'])},
     {str(c['y'] is not None).lower()}, {f32(c['y'])}, {f32(c['yh'])}, {f32(c['yc'])}}},
"""


def main():
    rng = np.random.default_rng(16)
    cases = [
        case("forward_per_tensor_int8", rng),
        case("reverse_per_column_int8_state_peepholes", rng, direction="reverse", batch=2, hidden=3,
             per_column=True, init_state=True, peep=True),
        case("bidirectional_uint8_sequence_lens", rng, direction="bidirectional", seq=4, batch=3, hidden=2,
             wtype=np.uint8, lens=[4, 1, 0], init_state=True),
        case("bidirectional_per_column_uint8_no_y", rng, direction="bidirectional", seq=3, batch=2, hidden=2,
             wtype=np.uint8, per_column=True, lens=[1, 3], want_y=False),
        case("forward_input_forget_clip", rng, seq=4, batch=2, inp=4, hidden=3, input_forget=1, clip=0.4,
             lens=[2, 4]),
    ]
    with open(OUT, "w") as f:
        f.write("// Generated by gen_dynamic_quantize_lstm_refs.py (onnxruntime "
                f"{ort.__version__}, one intra-op thread); do not edit.\n")
        f.write("// Fields: see DqLstmCase in test_dynamic_quantize_lstm.cpp.\n")
        for c in cases:
            f.write(emit(c))
    print("wrote", OUT)


if __name__ == "__main__":
    main()

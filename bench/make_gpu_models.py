#!/usr/bin/env python3
"""Writes the models scripts/gpu_check.sh and bench/cuda_vs_torch.py time, with
random weights and no download (for GPU machines that have torch, torchvision
and transformers but no network), at opset 17 with static shapes, the recipes
of tools/models/prepare.py:
  OUTDIR/bert_base.onnx   transformers BertModel(BertConfig()), seed 0, batch 1 x seq 128
  OUTDIR/resnet50.onnx    torchvision resnet50(weights=None), seed 0, 1x3x224x224
With --batch B (B != 1) the files are OUTDIR/bert_base_bB.onnx and
OUTDIR/resnet50_bB.onnx, batch B (same weights: the weights depend only on the
seed).
Usage: make_gpu_models.py OUTDIR [--batch B | --dynamic] [bert_base] [resnet50]

bench/cuda_vs_torch.py imports build_module() and make_inputs() from here, so
the PyTorch side it times is the very module exported here, with the same
weights and inputs.
"""
import argparse
import os
import sys

import numpy as np

MODELS = ("resnet50", "bert_base")
SEQ = 128  # BERT sequence length

# Graph inputs and outputs of each exported model, in order.
INPUT_NAMES = {"resnet50": ["input"], "bert_base": ["input_ids", "attention_mask", "token_type_ids"]}
OUTPUT_NAMES = {"resnet50": ["logits"], "bert_base": ["last_hidden_state", "pooler_output"]}


def build_module(name: str):
    """The model (a torch.nn.Module) with its seed-0 random weights, in eval mode, on the CPU, fp32. torch is
    imported here, not at the top, so that make_inputs() needs only numpy."""
    import torch

    if name == "bert_base":
        from transformers import BertConfig, BertModel

        class BertTupleOutputs(torch.nn.Module):
            """BertModel with positional inputs and a tuple of outputs (what the ONNX export and torch.compile
            see)."""

            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask, token_type_ids):
                out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                 return_dict=True)
                return out.last_hidden_state, out.pooler_output

        torch.manual_seed(0)
        bert = BertModel(BertConfig()).eval()
        return BertTupleOutputs(bert).eval()
    if name == "resnet50":
        import torchvision

        torch.manual_seed(0)
        return torchvision.models.resnet50(weights=None).eval()
    raise ValueError(f"unknown model {name!r} (expected one of {', '.join(MODELS)})")


def make_inputs(name: str, batch: int) -> dict:
    """Seeded numpy inputs, by graph input name: ResNet-50 a normal image batch;
    BERT ids < 30522, an attention mask whose last 10..59 positions (varying by
    row) are 0, token types 0 then 1 from position 64."""
    rng = np.random.default_rng(0)
    if name == "resnet50":
        return {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    if name == "bert_base":
        ids = rng.integers(0, 30522, (batch, SEQ), dtype=np.int64)
        mask = np.ones((batch, SEQ), np.int64)
        for i in range(batch):
            mask[i, SEQ - (10 + (7 * i) % 50):] = 0
        types = np.zeros((batch, SEQ), np.int64)
        types[:, 64:] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    raise ValueError(f"unknown model {name!r}")


def onnx_name(name: str, batch: int) -> str:
    return f"{name}.onnx" if batch == 1 else f"{name}_b{batch}.onnx"


DYNAMIC_AXES = {
    "resnet50": {"input": {0: "N"}, "logits": {0: "N"}},
    "bert_base": {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                  "token_type_ids": {0: "batch", 1: "sequence"},
                  "last_hidden_state": {0: "batch", 1: "sequence"}, "pooler_output": {0: "batch"}},
}


def export(module, args, path, input_names, output_names, dynamic_axes=None):
    import torch

    kw = dict(opset_version=17, input_names=input_names, output_names=output_names, do_constant_folding=True)
    if dynamic_axes:
        kw["dynamic_axes"] = dynamic_axes
    with torch.no_grad():
        try:
            torch.onnx.export(module, args, path, dynamo=False, **kw)
        except TypeError:  # older torch: no `dynamo` argument
            torch.onnx.export(module, args, path, **kw)


def export_model(name: str, batch: int, path: str, dynamic: bool = False) -> None:
    """Exports `name` at `batch` (static shapes; with `dynamic` the batch, and
    BERT's sequence, are symbolic: N / batch, sequence) to `path`, written atomically."""
    import torch

    module = build_module(name)
    feeds = make_inputs(name, batch)
    args = tuple(torch.from_numpy(feeds[n]) for n in INPUT_NAMES[name])
    tmp = path + f".tmp-{os.getpid()}.onnx"
    export(module, args, tmp, INPUT_NAMES[name], OUTPUT_NAMES[name], DYNAMIC_AXES[name] if dynamic else None)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"models to write (default: all): {', '.join(MODELS)}")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dynamic", action="store_true",
                    help="symbolic batch (N for resnet50; batch and sequence for bert_base): OUTDIR/NAME_dyn.onnx, "
                         "for shape buckets (bench/buckets_stream.py)")
    a = ap.parse_intermixed_args()
    bad = [n for n in a.names if n not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {', '.join(bad)} (expected {', '.join(MODELS)})")
    os.makedirs(a.outdir, exist_ok=True)
    for n in a.names or ["bert_base", "resnet50"]:
        path = os.path.join(a.outdir, f"{n}_dyn.onnx" if a.dynamic else onnx_name(n, a.batch))
        export_model(n, a.batch, path, a.dynamic)
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

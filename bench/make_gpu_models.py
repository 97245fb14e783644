#!/usr/bin/env python3
"""Writes the models scripts/gpu_check.sh times, with random weights and no
download (for GPU machines that have torch, torchvision and transformers but
no network), at opset 17 with static shapes, the recipes of
tools/models/prepare.py:
  OUTDIR/bert_base.onnx   transformers BertModel(BertConfig()), seed 0, batch 1 x seq 128
  OUTDIR/resnet50.onnx    torchvision resnet50(weights=None), seed 0, 1x3x224x224
Usage: make_gpu_models.py OUTDIR [bert_base] [resnet50]
"""
import os
import sys

import torch


def export(module, args, path, input_names, output_names):
    kw = dict(opset_version=17, input_names=input_names, output_names=output_names, do_constant_folding=True)
    with torch.no_grad():
        try:
            torch.onnx.export(module, args, path, dynamo=False, **kw)
        except TypeError:  # older torch: no `dynamo` argument
            torch.onnx.export(module, args, path, **kw)


def bert_base(path):
    from transformers import BertConfig, BertModel

    class TupleOutputs(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                             return_dict=True)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(0)
    config = BertConfig()
    bert = BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, 128), dtype=torch.int64)
    mask = torch.ones(1, 128, dtype=torch.int64)
    mask[:, -20:] = 0
    types = torch.zeros(1, 128, dtype=torch.int64)
    export(TupleOutputs(bert), (ids, mask, types), path, ["input_ids", "attention_mask", "token_type_ids"],
           ["last_hidden_state", "pooler_output"])


def resnet50(path):
    import torchvision

    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None).eval()
    export(m, (torch.randn(1, 3, 224, 224),), path, ["input"], ["logits"])


def main() -> int:
    out = sys.argv[1]
    names = sys.argv[2:] or ["bert_base", "resnet50"]
    os.makedirs(out, exist_ok=True)
    for n in names:
        {"bert_base": bert_base, "resnet50": resnet50}[n](os.path.join(out, n + ".onnx"))
        print("wrote", os.path.join(out, n + ".onnx"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes BERT-base (transformers BertModel(BertConfig()), seed 0, random
weights, batch 1 x seq 128, opset 17, static shapes) to the given path, the
same recipe as tools/models/prepare.py's bert_base but standalone: for GPU
machines that have torch and transformers and no network (scripts/gpu_check.sh).
Usage: make_bert_base.py OUT.onnx
"""
import sys

import torch
from transformers import BertConfig, BertModel


class TupleOutputs(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         return_dict=True)
        return out.last_hidden_state, out.pooler_output


def main() -> int:
    torch.manual_seed(0)
    config = BertConfig()
    bert = BertModel(config).eval()
    seq = 128
    ids = torch.randint(0, config.vocab_size, (1, seq), dtype=torch.int64)
    mask = torch.ones(1, seq, dtype=torch.int64)
    mask[:, -20:] = 0
    types = torch.zeros(1, seq, dtype=torch.int64)
    kw = dict(opset_version=17, input_names=["input_ids", "attention_mask", "token_type_ids"],
              output_names=["last_hidden_state", "pooler_output"], do_constant_folding=True)
    with torch.no_grad():
        try:
            torch.onnx.export(TupleOutputs(bert), (ids, mask, types), sys.argv[1], dynamo=False, **kw)
        except TypeError:  # older torch: no `dynamo` argument
            torch.onnx.export(TupleOutputs(bert), (ids, mask, types), sys.argv[1], **kw)
    return 0


if __name__ == "__main__":
    sys.exit(main())

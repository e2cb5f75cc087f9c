#!/usr/bin/env python3
"""Exports small torch.export programs as seeds for fuzz_pt2 and fuzz_pt2_zip.

The test fixtures are whole transformers models: 240 to 450 KB of graph JSON,
which the importer fuzzers run at tens to hundreds of inputs a second. These
programs exercise the same readers (the archive, the model JSON, the weights
config, payloads, every node kind: call_function, get_attr-free parameters,
buffers, symbolic shapes) in a few KB each, so a campaign reaches millions of
executions. Run where torch is installed (the GPU machine):

    python3 fuzz/make-small-pt2.py fuzz/seeds/pt2_small
"""
import os
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class NormSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.register_buffer("bias", torch.arange(8, dtype=torch.float32))

    def forward(self, x):
        return torch.softmax(self.norm(x) + self.bias, dim=-1)


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 4).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 8)


class EmbedNormHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, 16, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        return self.head(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "fuzz/seeds/pt2_small"
    os.makedirs(out, exist_ok=True)
    batch = torch.export.Dim("batch", min=1, max=64)
    cases = [
        ("mlp", Mlp(), (torch.randn(2, 3, 8),), None),
        ("mlp_dyn", Mlp(), (torch.randn(2, 3, 8),), ({0: batch},)),
        ("norm_softmax", NormSoftmax(), (torch.randn(2, 8),), None),
        ("attention", Attention(), (torch.randn(1, 5, 8),), None),
        ("embed_head", EmbedNormHead(), (torch.randint(0, 16, (2, 4)),), ({0: batch},)),
    ]
    for name, module, args, shapes in cases:
        program = torch.export.export(module.eval(), args, dynamic_shapes=shapes)
        path = os.path.join(out, name + ".pt2")
        torch.export.save(program, path)
        print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes PyTorch's first-step loss and parameter gradients for the frontend
fixtures, the references Loom's training step is checked against.

Run where torch is installed (the device machine):

    python3 examples/gradient_references.py test/frontend/Inputs/fixtures OUTDIR

For each fixture directory holding model.pt2 (ids -> logits, exported by
export_models.py), it loads the exported program, draws tokens [B, S+1] from
a fixed seed, computes the causal-LM loss (cross-entropy of logits for
tokens[:, :-1] against tokens[:, 1:], mean over all positions) and its
gradients, and writes OUTDIR/<fixture>/tokens.npy, loss.npy and
grads/<parameter name>.npy.
"""
import os
import sys

import numpy as np
import torch


def main(fixtures, out):
    failed = []
    for name in sorted(os.listdir(fixtures)):
        path = os.path.join(fixtures, name, "model.pt2")
        if not os.path.exists(path):
            continue
        try:
            reference(fixtures, name, path, out)
        except Exception as e:  # one fixture's failure leaves the others' references
            lines = str(e).strip().splitlines()
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, lines[0] if lines else ""))
            failed.append(name)
    if failed:
        sys.exit("gradient_references.py: no references for %s" % ", ".join(failed))


def reference(fixtures, name, path, out):
    ep = torch.export.load(path)
    module = ep.module()
    ids = np.load(os.path.join(fixtures, name, "ids.npy"))
    batch, seq = ids.shape
    vocab = int(np.load(os.path.join(fixtures, name, "logits.npy")).shape[-1])
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    # A tied tensor goes under the first of its names in the signature,
    # the parameter Loom makes of it.
    order = {spec.target: i for i, spec in enumerate(ep.graph_signature.input_specs)}
    named = {}
    for pname, p in module.named_parameters(remove_duplicate=False):
        if id(p) not in named or order.get(pname, 1 << 30) < order.get(named[id(p)][0], 1 << 30):
            named[id(p)] = (pname, p)
    params = dict(named.values())
    for p in params.values():
        p.requires_grad_(True)
        p.grad = None
    logits = module(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab).float(),
                                             tokens[:, 1:].reshape(-1))
    loss.backward()
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "grads"), exist_ok=True)
    np.save(os.path.join(d, "tokens.npy"), tokens.numpy().astype(np.int64))
    np.save(os.path.join(d, "loss.npy"), np.array(loss.item(), dtype=np.float32))
    for pname, p in params.items():
        if p.grad is not None:
            np.save(os.path.join(d, "grads", pname + ".npy"), p.grad.float().numpy())
    print(name, "loss %.6f" % loss.item(), "%d gradients" % len(params))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

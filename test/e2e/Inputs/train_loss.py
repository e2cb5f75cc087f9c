#!/usr/bin/env python3
"""train_loss.py FIXTURE_DIR WORK_DIR [--model NAME] [--rtol R]

The training step's loss against PyTorch's logits: compiles FIXTURE_DIR's
model (default model.onnx) with --mode=gradients at the batch of ids.npy
and one token less than its sequence, runs it on ids.npy as the tokens on
the CPU backend, and exits non-zero unless the loss is the mean
cross-entropy of logits.npy's first seq-1 positions against ids[:, 1:]
(causal: those positions see the same tokens) within R relative (default
1e-5). An attention_mask or the like the model takes is the training
step's to fill (--loom-bind-training-inputs). loom-compile and loom-run
come from PATH.
"""
import argparse
import os
import sys

import numpy as np

from tool_run import run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("work")
    ap.add_argument("--model", default="model.onnx")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args()
    name = os.path.basename(os.path.normpath(a.fixture))
    os.makedirs(a.work, exist_ok=True)
    ids = np.load(os.path.join(a.fixture, "ids.npy"))
    logits = np.load(os.path.join(a.fixture, "logits.npy")).astype(np.float64)
    batch, seq = ids.shape
    exe = os.path.join(a.work, "gradients.loomx")
    out = os.path.join(a.work, "out")
    run(["loom-compile", os.path.join(a.fixture, a.model), "--mode=gradients", "--batch",
         str(batch), "--seq", str(seq - 1), "-o", exe])
    run(["loom-run", exe, "--backend=cpu", "--input", "tokens=" + os.path.join(a.fixture, "ids.npy"),
         "--output-dir", out])
    got = float(np.load(os.path.join(out, "loss.npy")))
    scores = logits[:, :seq - 1]
    top = scores.max(-1, keepdims=True)
    lse = np.log(np.exp(scores - top).sum(-1)) + top[..., 0]
    want = float((lse - np.take_along_axis(scores, ids[:, 1:, None], -1)[..., 0]).mean())
    err = abs(got - want) / max(abs(want), 1e-30)
    print("%s %s: training loss %.6f, PyTorch's logits give %.6f (rel err %.1e)" % (
        name, a.model, got, want, err))
    if not err <= a.rtol:
        sys.exit("train_loss.py: FAIL: %s: the loss differs by %.1e (tolerance %.0e)" % (
            name, err, a.rtol))


if __name__ == "__main__":
    main()

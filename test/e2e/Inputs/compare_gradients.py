#!/usr/bin/env python3
"""compare_gradients.py LOOM_DIR REF_DIR --rtol R: every gradient PyTorch
computed (REF_DIR/grads/<name>.npy) must have Loom's counterpart
(LOOM_DIR/grad.<name>.npy) within R relative error (max abs difference over
max abs reference), and the losses must agree likewise."""
import argparse
import os
import sys

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("loom")
ap.add_argument("ref")
ap.add_argument("--rtol", type=float, required=True)
args = ap.parse_args()

failures = []
loss, ref_loss = np.load(os.path.join(args.loom, "loss.npy")), np.load(os.path.join(args.ref, "loss.npy"))
loss_err = abs(float(loss) - float(ref_loss)) / abs(float(ref_loss))
print("loss: loom %.6f torch %.6f (rel err %.2e)" % (float(loss), float(ref_loss), loss_err))
if not loss_err <= args.rtol:
    failures.append("loss")
names = sorted(f[:-4] for f in os.listdir(os.path.join(args.ref, "grads")))
worst = 0.0
for name in names:
    ref = np.load(os.path.join(args.ref, "grads", name + ".npy")).astype(np.float64)
    path = os.path.join(args.loom, "grad." + name + ".npy")
    if not os.path.exists(path):
        if np.abs(ref).max() == 0:
            continue  # PyTorch's gradient is zero; Loom prunes parameters the loss ignores
        failures.append(name + " (missing)")
        continue
    got = np.load(path).astype(np.float64)
    if got.shape != ref.shape:
        failures.append("%s (shape %s vs %s)" % (name, got.shape, ref.shape))
        continue
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    worst = max(worst, err)
    if not err <= args.rtol:
        failures.append("%s (rel err %.2e)" % (name, err))
print("%d gradients compared, worst rel err %.2e (tolerance %.1e)" % (len(names), worst, args.rtol))
if failures:
    sys.exit("FAIL: " + ", ".join(failures))

#!/usr/bin/env python3
"""ep_same.py FIXTURE_DIR WORK_DIR TOKENS [--steps N] [--layout FLAGS] [--common FLAGS] [--rtol R]

Compiles FIXTURE_DIR/model.pt2 for training twice, on one rank and with the
layout FLAGS (default "--ep 2"; batch 4), both with the --common FLAGS, trains each from
FIXTURE_DIR/model.safetensors (else the weights in the .pt2) on TOKENS for --steps steps on the CPU
backend, and exits non-zero unless the losses and gradient norms agree
within R relative (default 1e-6). With --other, the second run compiles
FIXTURE_DIR/NAME instead (another export of the same model; --layout "" for
no other flags). loom-compile and loom-run come from PATH.
"""
import argparse
import json
import os
import sys

from tool_run import run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("work")
    ap.add_argument("tokens")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layout", default="--ep 2")
    ap.add_argument("--common", default="",
                    help="compile flags of both runs (e.g. --moe-aux-loss-coef 0.01)")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--model", default="model.pt2")
    ap.add_argument("--other", help="the second run's model (default: --model)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    name = os.path.basename(os.path.normpath(a.fixture))
    rows = {}
    common = a.common.split()
    for label, model, extra in (("one", a.model, common),
                                ("layout", a.other or a.model, a.layout.split() + common)):
        exe = os.path.join(a.work, label + ".loomx")
        metrics = os.path.join(a.work, label + ".jsonl")
        run(["loom-compile", os.path.join(a.fixture, model), "--mode=train", "--batch", "4",
             "-o", exe] + extra)
        # The weights from model.safetensors by name where the fixture has
        # one, else those the .pt2 holds.
        weights = os.path.join(a.fixture, "model.safetensors")
        weights = ["--weights", weights] if os.path.exists(weights) else []
        run(["loom-run", exe, "--backend=cpu"] + weights + ["--steps", str(a.steps), "--data",
             a.tokens, "--lr", "3e-3", "--metrics", metrics])
        rows[label] = [json.loads(line) for line in open(metrics)]
    for key in ("loss", "grad_norm"):
        one = [r[key] for r in rows["one"]]
        ep = [r[key] for r in rows["layout"]]
        if len(one) != a.steps or len(ep) != a.steps:
            sys.exit("ep_same.py: FAIL: %s: %d and %d steps of %s, expected %d" %
                     (name, len(one), len(ep), key, a.steps))
        for step, (x, y) in enumerate(zip(one, ep), 1):
            if abs(x - y) > a.rtol * max(abs(x), 1e-12):
                sys.exit("ep_same.py: FAIL: %s step %d: %s %.7g from %s, %.7g from %s %s" %
                         (name, step, key, x, a.model, y, a.other or a.model, a.layout))
    losses = " ".join("%.5f" % r["loss"] for r in rows["one"])
    if a.other:
        print("%s: %s %s trains as %s does (%s)" % (name, a.other, a.layout, a.model, losses))
    else:
        print("%s: %s gives one rank's losses (%s)" % (name, a.layout, losses))


if __name__ == "__main__":
    main()

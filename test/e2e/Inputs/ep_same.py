#!/usr/bin/env python3
"""ep_same.py FIXTURE_DIR WORK_DIR TOKENS [--steps N] [--ep N]

Compiles FIXTURE_DIR/model.pt2 for training twice, on one rank and under
--ep N (default 2; batch 4), trains each from FIXTURE_DIR/model.safetensors
on TOKENS for --steps steps on the CPU backend, and exits non-zero unless
the losses and gradient norms agree within 1e-5 relative. loom-compile and
loom-run come from PATH.
"""
import argparse
import json
import os
import subprocess
import sys


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("ep_same.py: FAIL: %s exited %d:\n%s" % (" ".join(cmd), proc.returncode,
                                                          proc.stdout.strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("work")
    ap.add_argument("tokens")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ep", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    name = os.path.basename(os.path.normpath(a.fixture))
    rows = {}
    for label, extra in (("one", []), ("ep", ["--ep", str(a.ep)])):
        exe = os.path.join(a.work, label + ".loomx")
        metrics = os.path.join(a.work, label + ".jsonl")
        run(["loom-compile", os.path.join(a.fixture, "model.pt2"), "--mode=train", "--batch", "4",
             "-o", exe] + extra)
        run(["loom-run", exe, "--backend=cpu", "--weights",
             os.path.join(a.fixture, "model.safetensors"), "--steps", str(a.steps), "--data",
             a.tokens, "--lr", "3e-3", "--metrics", metrics])
        rows[label] = [json.loads(line) for line in open(metrics)]
    for key in ("loss", "grad_norm"):
        one = [r[key] for r in rows["one"]]
        ep = [r[key] for r in rows["ep"]]
        if len(one) != a.steps or len(ep) != a.steps:
            sys.exit("ep_same.py: FAIL: %s: %d and %d steps of %s, expected %d" %
                     (name, len(one), len(ep), key, a.steps))
        for step, (x, y) in enumerate(zip(one, ep), 1):
            if abs(x - y) > 1e-5 * max(abs(x), 1e-12):
                sys.exit("ep_same.py: FAIL: %s step %d: %s %.7g on one rank, %.7g under --ep %d" %
                         (name, step, key, x, y, a.ep))
    print("%s: --ep %d gives one rank's losses (%s)" %
          (name, a.ep, " ".join("%.5f" % r["loss"] for r in rows["one"])))


if __name__ == "__main__":
    main()

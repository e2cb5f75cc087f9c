#!/usr/bin/env python3
"""compare_metrics.py RUN.jsonl REFERENCE.jsonl --steps N --rtol R: a
parallel run's loss and grad_norm match the reference run's at every step
1..N within relative tolerance R; prints the largest relative differences."""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("run")
ap.add_argument("reference")
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--rtol", type=float, required=True)
args = ap.parse_args()


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    steps = [r["step"] for r in rows]
    if steps != list(range(1, args.steps + 1)):
        sys.exit("%s: steps are %s, expected 1..%d" % (path, steps, args.steps))
    return rows


run, ref = load(args.run), load(args.reference)
worst = {"loss": 0.0, "grad_norm": 0.0}
for a, b in zip(run, ref):
    for key in worst:
        rel = abs(a[key] - b[key]) / max(abs(b[key]), 1e-30)
        worst[key] = max(worst[key], rel)
        if rel > args.rtol:
            sys.exit("step %d: %s %.9g differs from the reference's %.9g by %.2e (relative), "
                     "more than %.0e" % (a["step"], key, a[key], b[key], rel, args.rtol))
print("max relative difference over %d steps: loss %.2e, grad_norm %.2e"
      % (args.steps, worst["loss"], worst["grad_norm"]))

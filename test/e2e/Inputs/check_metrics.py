#!/usr/bin/env python3
"""check_metrics.py FILE.jsonl --steps N [--falls] [--same-as OTHER.jsonl]:
checks a training run's metrics: one line per step 1..N with the required
fields; with --falls, the mean loss of the last quarter is below the first
quarter's; with --same-as, loss and grad_norm equal OTHER's exactly (or within
a relative --rtol)."""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("metrics")
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--falls", action="store_true")
ap.add_argument("--same-as")
ap.add_argument("--rtol", type=float, default=0.0)
args = ap.parse_args()


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    for r in rows:
        for key in ("step", "loss", "lr", "grad_norm", "tokens_per_s"):
            if key not in r:
                sys.exit("%s: step %s lacks '%s'" % (path, r.get("step"), key))
    return rows


rows = load(args.metrics)
steps = [r["step"] for r in rows]
if steps != list(range(1, args.steps + 1)):
    sys.exit("steps are %s, expected 1..%d" % (steps, args.steps))
if args.falls:
    q = max(1, args.steps // 4)
    first = sum(r["loss"] for r in rows[:q]) / q
    last = sum(r["loss"] for r in rows[-q:]) / q
    print("loss: first %d steps %.4f, last %d steps %.4f" % (q, first, q, last))
    if not last < first:
        sys.exit("the loss did not fall")
if args.same_as:
    other = load(args.same_as)
    if len(other) != len(rows):
        sys.exit("%s has %d steps, %s has %d" % (args.metrics, len(rows), args.same_as, len(other)))

    def differs(x, y):
        return abs(x - y) > args.rtol * abs(y) if args.rtol else x != y

    for a, b in zip(rows, other):
        if differs(a["loss"], b["loss"]) or differs(a["grad_norm"], b["grad_norm"]):
            sys.exit("step %d differs: loss %r vs %r, grad_norm %r vs %r" % (
                a["step"], a["loss"], b["loss"], a["grad_norm"], b["grad_norm"]))
    print("%d steps %s" % (len(rows), "within rtol %g" % args.rtol if args.rtol else "identical"))

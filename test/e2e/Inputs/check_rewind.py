#!/usr/bin/env python3
"""check_rewind.py ROLLED.jsonl REFERENCE.jsonl --steps N [--events K]:
a run that rolled back on anomalies (--on-anomaly=skip|rewind) against a
run that never saw the batches it left out (--skip-batches). ROLLED's
metrics hold each step as it ran, an "anomaly" event after the step that
went wrong, then the steps again from the restored one; the trajectory that
survived (each event drops the steps after its restored_step) must equal
REFERENCE's steps 1..N bit for bit, loss and gradient norm. --events: how
many anomaly events ROLLED must hold."""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("rolled")
ap.add_argument("reference")
ap.add_argument("--steps", type=int, required=True)
ap.add_argument("--events", type=int)
args = ap.parse_args()

kept, events = [], []
for line in open(args.rolled):
    if not line.strip():
        continue
    r = json.loads(line)
    if r.get("event") == "anomaly":
        events.append(r)
        kept = [k for k in kept if k["step"] <= r["restored_step"]]
    else:
        kept.append(r)
reference = [json.loads(l) for l in open(args.reference) if l.strip()]
if args.events is not None and len(events) != args.events:
    sys.exit("%d anomaly events, expected %d" % (len(events), args.events))
for name, rows in (("rolled", kept), ("reference", reference)):
    steps = [r["step"] for r in rows]
    if steps != list(range(1, args.steps + 1)):
        sys.exit("%s run: steps %s, expected 1..%d" % (name, steps, args.steps))
for a, b in zip(kept, reference):
    if a["loss"] != b["loss"] or a["grad_norm"] != b["grad_norm"]:
        sys.exit("step %d differs: loss %r vs %r, grad_norm %r vs %r" %
                 (a["step"], a["loss"], b["loss"], a["grad_norm"], b["grad_norm"]))
print("%d steps identical to the reference after %d anomaly event(s): %s" % (
    args.steps, len(events),
    "; ".join("step %d %s to %d, batches %s" % (e["step"], e["action"], e["restored_step"],
                                                  e["skipped_batches"]) for e in events)))

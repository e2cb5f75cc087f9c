#!/usr/bin/env python3
"""check_stragglers.py FILE.jsonl --ranks N [--straggler R --from-step S]:
every step of a multi-rank run's metrics holds each rank's step time,
compute time and time in collectives (compute + wait = step time); with
--straggler, rank R is named in "stragglers" on every step from S on and no
other rank ever is; without it, no rank is ever named."""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("metrics")
ap.add_argument("--ranks", type=int, required=True)
ap.add_argument("--straggler", type=int)
ap.add_argument("--from-step", type=int, default=1)
args = ap.parse_args()

rows = [json.loads(l) for l in open(args.metrics) if l.strip()]
for r in rows:
    for key in ("rank_step_time_s", "rank_compute_s", "rank_comm_wait_s"):
        if len(r.get(key, [])) != args.ranks:
            sys.exit("step %d: '%s' is not a list of %d ranks" % (r["step"], key, args.ranks))
    for s, c, w in zip(r["rank_step_time_s"], r["rank_compute_s"], r["rank_comm_wait_s"]):
        if min(s, c, w) < 0 or abs(c + w - s) > 1e-6:
            sys.exit("step %d: compute %g + wait %g != step %g" % (r["step"], c, w, s))
    named = [x["rank"] for x in r.get("stragglers", [])]
    expected = [args.straggler] if args.straggler is not None and r["step"] >= args.from_step else []
    if args.straggler is None and named:
        sys.exit("step %d names stragglers %s" % (r["step"], named))
    if args.straggler is not None and named != expected:
        sys.exit("step %d names stragglers %s, expected %s" % (r["step"], named, expected))
print("%d steps: %s" % (len(rows), "rank %d named from step %d" % (args.straggler, args.from_step)
                        if args.straggler is not None else "no straggler"))

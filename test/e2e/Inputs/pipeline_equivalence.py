#!/usr/bin/env python3
"""pipeline_equivalence.py: compiles a model pipelined under each schedule,
trains it with loom-run (ranks as threads on the CPU backend) and checks its
per-step loss and grad_norm against a single-rank reference run's --metrics
within --rtol. Prints one line per schedule; exits 1 at the first mismatch.

  pipeline_equivalence.py --model M.pt2 --work DIR --data TOKENS \\
      --reference ONE.jsonl --pp 2 --microbatches 4 --batch 8 \\
      --schedules 1f1b,interleaved,zb-h1,dualpipe,dualpipev
"""
import argparse
import json
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--model", required=True)
ap.add_argument("--work", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--reference", required=True)
ap.add_argument("--pp", type=int, required=True)
ap.add_argument("--microbatches", type=int, required=True)
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--schedules", required=True)
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--rtol", type=float, default=1e-4)
ap.add_argument("--extra", default="", help="more loom-compile flags")
args = ap.parse_args()


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s%s" % (p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if [r["step"] for r in rows] != list(range(1, args.steps + 1)):
        sys.exit("%s: expected steps 1..%d" % (path, args.steps))
    return rows


reference = load(args.reference)
for schedule in args.schedules.split(","):
    name = "%s-pp%d" % (schedule, args.pp)
    exe = "%s/%s.loomx" % (args.work, name)
    metrics = "%s/%s.jsonl" % (args.work, name)
    cmd = ["loom-compile", args.model, "--mode=train", "--batch", str(args.batch),
           "--pp", str(args.pp), "--microbatches", str(args.microbatches),
           "--schedule=" + schedule, "-o", exe]
    if schedule == "interleaved":
        cmd += ["--vpp", "2"]
    cmd += args.extra.split()
    run(cmd)
    listing = run(["loom-inspect", exe])
    ranks = next(int(l.split()[1]) for l in listing.splitlines() if l.strip().startswith("ranks:"))
    run(["loom-run", exe, "--steps", str(args.steps), "--data", args.data, "--lr", "3e-3",
         "--seed", "7", "--metrics", metrics, "--comm-timeout", "120"])
    worst = {"loss": 0.0, "grad_norm": 0.0}
    for a, b in zip(load(metrics), reference):
        for key in worst:
            rel = abs(a[key] - b[key]) / max(abs(b[key]), 1e-30)
            worst[key] = max(worst[key], rel)
            if not rel <= args.rtol:
                sys.exit("%s pp=%d: step %d: %s %.9g differs from the single-rank %.9g by %.2e"
                         % (schedule, args.pp, a["step"], key, a[key], b[key], rel))
    print("%s pp=%d: ranks %d, %d steps match (max relative difference: loss %.1e, "
          "grad_norm %.1e)" % (schedule, args.pp, ranks, args.steps, worst["loss"],
                               worst["grad_norm"]))
    sys.stdout.flush()

#!/usr/bin/env python3
"""plan_best.py PLAN.json MODEL WORK_DIR

Compiles the best plan of a `loom-plan --json` file with its own flags and
trains it for two steps on CPU ranks (loom-run, ranks as threads), beside
the same model compiled for one rank: the plan must build, run, and give the
one-rank losses. loom-compile and loom-run come from PATH."""
import json
import os
import re
import shlex
import subprocess
import sys


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit("plan_best.py: FAIL: %s exited %d:\n%s" % (" ".join(cmd), proc.returncode, proc.stdout))
    return proc.stdout


def losses(text):
    return [float(m) for m in re.findall(r"loss ([0-9.]+)", text)]


plan_path, model, work = sys.argv[1:4]
plan = json.load(open(plan_path))["plans"][0]
flags = shlex.split(plan["flags"])
exe = os.path.join(work, "best.loomx")
run(["loom-compile", model, *flags, "--memory-report", "-o", exe])
one = os.path.join(work, "one.loomx")
batch = flags[flags.index("--batch") + 1]
precision = [f for f in flags if f.startswith("--precision=")]
run(["loom-compile", model, "--mode=train", "--target=cpu", *precision, "--batch", batch, "-o", one])
common = ["--steps", "2", "--data", "synthetic:96", "--log-every", "1"]
got = losses(run(["loom-run", exe, *common]))
want = losses(run(["loom-run", one, *common]))
print("best plan: %s" % plan["flags"])
print("losses: plan %s, one rank %s" % (got, want))
if len(got) != 2 or len(want) != 2 or any(abs(a - b) > 2e-2 * abs(b) for a, b in zip(got, want)):
    sys.exit("plan_best.py: FAIL: the plan's losses differ from one rank's")
print("plan_best.py: OK")

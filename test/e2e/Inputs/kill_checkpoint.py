#!/usr/bin/env python3
"""Crash safety of checkpoints: kill -9 a training run at random moments,
resume it, and check that it continues with exactly the losses of a run
that was never interrupted.

usage:
  kill_checkpoint.py LOOM_RUN EXECUTABLE WORKDIR --kills N --steps S [--async] -- RUN_ARGS...

First runs the executable uninterrupted (RUN_ARGS plus --steps S) for the
reference losses. Then, N times: starts the same run with a checkpoint
after every step (--checkpoint-every 1; with --async, written in the
background: --checkpoint-async), sends it SIGKILL after a random delay (seeded, spread
over the uninterrupted run's duration, so kills land during writes, between
them, before the first and after the last), then resumes it from its
checkpoint directory (--resume) to step S. The resumed run must start right
after the step of the checkpoint it loaded and log, step for step, the
reference's loss and gradient norm (bit for bit, as JSON numbers). A
half-written checkpoint taken for complete fails the resume or its losses.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time


def metrics(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loom_run")
    ap.add_argument("executable")
    ap.add_argument("workdir")
    ap.add_argument("--kills", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--async", dest="background", action="store_true")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:split])
    run_args = argv[split + 1:]
    os.makedirs(args.workdir, exist_ok=True)
    base = [args.loom_run, args.executable, "--steps", str(args.steps)] + run_args

    ref_path = os.path.join(args.workdir, "reference.jsonl")
    if os.path.exists(ref_path):
        os.remove(ref_path)
    start = time.monotonic()
    subprocess.run(base + ["--metrics", ref_path], check=True, stdout=subprocess.DEVNULL)
    duration = time.monotonic() - start
    reference = {r["step"]: (r["loss"], r["grad_norm"]) for r in metrics(ref_path)}
    if sorted(reference) != list(range(1, args.steps + 1)):
        sys.exit("the reference run logged steps %s" % sorted(reference))

    rng = random.Random(args.seed)
    resumed_from = []
    for kill in range(args.kills):
        ckpt = os.path.join(args.workdir, "ckpt")
        shutil.rmtree(ckpt, ignore_errors=True)
        saving = ["--checkpoint-dir", ckpt, "--checkpoint-every", "1"] + (
            ["--checkpoint-async"] if args.background else [])
        killed = subprocess.Popen(base + saving,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, duration * 1.1))
        killed.kill()  # SIGKILL: no handler, no cleanup
        killed.wait()
        out = os.path.join(args.workdir, "resumed.jsonl")
        if os.path.exists(out):
            os.remove(out)
        # As a restart script would: resume where a checkpoint was
        # published (`latest`), else start over.
        again = ["--resume"] if os.path.exists(os.path.join(ckpt, "latest")) else []
        result = subprocess.run(base + saving + again + ["--metrics", out],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            sys.exit("kill %d: the resumed run failed:\n%s" % (kill, result.stdout))
        rows = metrics(out)
        first = rows[0]["step"] if rows else args.steps + 1
        steps = [r["step"] for r in rows]
        if steps != list(range(first, args.steps + 1)):
            sys.exit("kill %d: the resumed run logged steps %s" % (kill, steps))
        for r in rows:
            if (r["loss"], r["grad_norm"]) != reference[r["step"]]:
                sys.exit("kill %d: step %d: loss %r grad_norm %r, the uninterrupted run's %r" % (
                    kill, r["step"], r["loss"], r["grad_norm"], reference[r["step"]]))
        resumed_from.append(first - 1)
    starts = sorted(set(resumed_from))
    print("%d kills: every resumed run matched the uninterrupted one; resumed after steps %s"
          % (args.kills, ", ".join(str(s) for s in starts)))


if __name__ == "__main__":
    main()

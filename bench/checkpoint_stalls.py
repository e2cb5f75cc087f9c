#!/usr/bin/env python3
"""What a checkpoint costs the training loop, synchronous beside asynchronous.

Runs `loom-run` twice on one training executable, each run writing one
checkpoint at step --at of --steps, once with --checkpoint-async=false and
once with --checkpoint-async, and prints for each: the median step time, the
loop's stall at the checkpoint (the metrics' `checkpoint_stall_s`), and what
the steps after it took beyond the median (the device-side cost of an
asynchronous snapshot: its copy shares the GPU with those steps).

  python3 bench/checkpoint_stalls.py --loom-run build/bin/loom-run \\
      --executable m095.loomx --checkpoint-dir /dev/shm/ck [--at 10 --steps 14]

On the GPU machine, `--checkpoint-dir /dev/shm/...` keeps the disk's speed
out of the asynchronous run's wall time (its writer runs in the background).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def run(args, mode, workdir):
    metrics = os.path.join(workdir, mode + ".jsonl")
    ckdir = os.path.join(args.checkpoint_dir, mode)
    shutil.rmtree(ckdir, ignore_errors=True)
    command = [args.loom_run, args.executable, "--steps", "100", "--stop-after", str(args.steps),
               "--data", args.data, "--log-every", "100", "--checkpoint-every", str(args.at),
               "--keep-checkpoints", "1", "--checkpoint-dir", ckdir, "--metrics", metrics,
               "--checkpoint-async=" + ("true" if mode == "async" else "false")] + args.extra
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit("%s run failed (exit %d):\n%s" % (mode, done.returncode, done.stdout[-2000:]))
    shutil.rmtree(ckdir, ignore_errors=True)
    with open(metrics) as f:
        return [line for line in (json.loads(l) for l in f) if "step_time_s" in line]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loom-run", required=True)
    p.add_argument("--executable", required=True, help="a training executable (loom-compile --mode=train)")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--data", default="synthetic:32000")
    p.add_argument("--at", type=int, default=10, help="the step whose checkpoint is measured")
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("extra", nargs="*", help="more loom-run flags (after --)")
    args = p.parse_args()
    if args.steps < args.at + 2:
        sys.exit("--steps must leave at least two steps after --at")
    workdir = tempfile.mkdtemp(prefix="loom-ckbench-")
    rows = []
    for mode in ("sync", "async"):
        lines = run(args, mode, workdir)
        median = statistics.median(l["step_time_s"] for l in lines[2:])
        at = next(i for i, l in enumerate(lines) if "checkpoint_stall_s" in l)
        stall = lines[at]["checkpoint_stall_s"]
        after = sum(l["step_time_s"] - median for l in lines[at + 1:at + 3])
        rows.append((mode, median, stall, after))
    print("\n| | median step | loop stall at the checkpoint | % of a step | the next two steps beyond the median |")
    print("|---|---|---|---|---|")
    for mode, median, stall, after in rows:
        print("| %s | %.4f s | %.4f s | %.2f%% | %+.4f s |" % (mode, median, stall, 100 * stall / median, after))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()

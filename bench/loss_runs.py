#!/usr/bin/env python3
"""Trains several Loom executables side by side on one GPU from the same data
and seed, and prints each run's final loss, its mean over the last 50 steps,
the gap to the first run, the steps with FP8 clipping and whether any loss
was not finite: the FP8 numerics comparison of docs/performance.md (bf16
beside each recipe, 1,000 steps on real text) in one device call.

  python3 bench/loss_runs.py --loom-run build/bin/loom-run --text corpus.txt \\
      --out OUT bf16=bf16.loomx tensorwise=tw.loomx delayed=d16.loomx [--steps 1000]

The text becomes byte tokens (loom-tokenize's flat format: every byte one
little-endian u16 token). The runs go --concurrent at a time (default: all
of them; a 0.95B model takes about 70 GiB a run on an H200, so three fit),
each with `--backend=cuda --data TOKENS --seed S --lr 3e-4 --lr-schedule
cosine --warmup-steps 100 --metrics OUT/LABEL.jsonl` (change with --lr,
--warmup, --seed, --extra). Runs sharing the GPU are slower, so their tokens/s
are not speed figures. bench/plot_losses.py draws the curves from OUT.
"""
import argparse
import json
import math
import os
import subprocess
import sys


def summarize(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("loss") is not None:
                    rows.append(r)
    if not rows:
        return None
    losses = [r["loss"] for r in rows]
    tail = losses[-50:]
    return {"steps": len(rows), "final": losses[-1], "last50": sum(tail) / len(tail),
            "clipped": sum(1 for r in rows if r.get("fp8_overflows", 0)),
            "finite": all(math.isfinite(v) for v in losses)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=EXECUTABLE")
    ap.add_argument("--loom-run", required=True)
    ap.add_argument("--text", required=True, help="a text file: its bytes are the tokens")
    ap.add_argument("--out", required=True, help="folder for the tokens, metrics and logs")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lr", default="3e-4")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--concurrent", type=int, default=0, help="runs at a time (0: all)")
    ap.add_argument("--extra", default="", help="more loom-run flags for every run")
    ap.add_argument("--backend", default="cuda", help="loom-run's --backend (cpu for a smoke test)")
    args = ap.parse_args(argv)

    runs = []
    for item in args.runs:
        label, sep, exe = item.partition("=")
        if not sep or not label or not exe:
            ap.error("%r: expected LABEL=EXECUTABLE" % item)
        if not os.path.isfile(exe):
            ap.error("%s: no such executable" % exe)
        runs.append((label, exe))
    if not os.path.isfile(args.text):
        ap.error("--text %s: no such file" % args.text)
    os.makedirs(args.out, exist_ok=True)
    tokens = os.path.join(args.out, "tokens.u16")
    import numpy as np
    np.fromfile(args.text, dtype=np.uint8).astype("<u2").tofile(tokens)

    width = args.concurrent or len(runs)
    failed = []
    for i in range(0, len(runs), width):
        procs = []
        for label, exe in runs[i:i + width]:
            cmd = [args.loom_run, exe, "--backend=" + args.backend, "--steps", str(args.steps), "--data",
                   tokens, "--seed", str(args.seed), "--lr", args.lr, "--lr-schedule", "cosine",
                   "--warmup-steps", str(args.warmup), "--metrics",
                   os.path.join(args.out, label + ".jsonl"), "--log-every", "100"]
            cmd += args.extra.split()
            log = open(os.path.join(args.out, label + ".log"), "w")
            procs.append((label, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        for label, proc, log in procs:
            if proc.wait() != 0:
                failed.append(label)
            log.close()

    print("| run | steps | final loss | mean of last 50 | gap to %s | steps with clipping | finite |"
          % runs[0][0])
    print("|---|---:|---:|---:|---:|---:|---|")
    base = None
    for label, _ in runs:
        path = os.path.join(args.out, label + ".jsonl")
        s = summarize(path) if os.path.exists(path) else None
        if s is None:
            print("| %s | — | no metrics (see %s.log) | | | | |" % (label, label))
            continue
        if base is None:
            base = s["last50"]
        print("| %s | %d | %.4f | %.4f | %+.2f%% | %d | %s |" % (
            label, s["steps"], s["final"], s["last50"], 100 * (s["last50"] - base) / base,
            s["clipped"], "yes" if s["finite"] else "NO"))
    if failed:
        print("loss_runs.py: these runs failed: %s" % ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Loss curves of several loom-run --metrics files, as one SVG (no plotting
library needed).

usage:
  plot_losses.py OUT.svg LABEL=RUN.jsonl... [--smooth N] [--title TEXT]

Each curve is the run's loss, averaged over a trailing window of N steps
(default 20), against the step; the legend gives each run's mean loss over
its last 50 steps and its gap to the first run's. Written for the FP8
recipes beside bf16 (docs/performance.md), usable for any runs that log
the same steps.
"""
import argparse
import json
import sys

COLORS = ["#222222", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("loss") is not None:
                    rows.append((r["step"], r["loss"]))
    if not rows:
        sys.exit("%s: no steps with a loss" % path)
    return rows


def smooth(rows, n):
    out, window = [], []
    for step, loss in rows:
        window.append(loss)
        if len(window) > n:
            window.pop(0)
        out.append((step, sum(window) / len(window)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="LABEL=RUN.jsonl")
    ap.add_argument("--smooth", type=int, default=20)
    ap.add_argument("--title", default="loss")
    args = ap.parse_args()
    runs = []
    for spec in args.runs:
        if "=" not in spec:
            sys.exit("expected LABEL=RUN.jsonl, got '%s'" % spec)
        label, path = spec.split("=", 1)
        raw = load(path)
        tail = [l for _, l in raw[-50:]]
        runs.append((label, smooth(raw, args.smooth), sum(tail) / len(tail)))
    W, H, L, R, T, B = 900, 520, 70, 290, 40, 50
    steps = [s for _, curve, _ in runs for s, _ in curve]
    # The first steps' losses dwarf the rest: scale the y axis to the part
    # after a tenth of the run.
    skip = min(steps) + (max(steps) - min(steps)) // 10
    losses = [l for _, curve, _ in runs for s, l in curve if s >= skip]
    x0, x1, y0, y1 = min(steps), max(steps), min(losses), max(losses)
    pad = (y1 - y0) * 0.05 or 0.1
    y0, y1 = y0 - pad, y1 + pad

    def px(s):
        return L + (s - x0) / max(x1 - x0, 1) * (W - L - R)

    def py(l):
        return T + (y1 - min(max(l, y0), y1)) / (y1 - y0) * (H - T - B)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (L, args.title)]
    for i in range(6):  # grid and y labels
        v = y0 + (y1 - y0) * i / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, py(v), py(v)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>' % (L - 6, py(v) + 4, v))
    for i in range(6):  # x labels
        s = x0 + (x1 - x0) * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(s), H - B + 18, s))
    out.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((L + W - R) // 2, H - 10))
    base = runs[0][2]
    for i, (label, curve, final) in enumerate(runs):
        color = COLORS[i % len(COLORS)]
        pts = " ".join("%.1f,%.1f" % (px(s), py(l)) for s, l in curve if s >= skip)
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.4" points="%s"/>' % (color, pts))
        y = T + 20 + 22 * i
        gap = "" if i == 0 else " (%+.2f%%)" % (100 * (final - base) / base)
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>' % (W - R + 15, W - R + 40, y - 4, y - 4, color))
        out.append('<text x="%d" y="%d">%s: %.4f%s</text>' % (W - R + 46, y, label, final, gap))
    out.append('<text x="%d" y="%d" fill="#666">last-50-step mean; curves: %d-step mean</text>'
               % (W - R + 15, T + 20 + 22 * len(runs) + 6, args.smooth))
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Find the first node of a .pt2 whose value in Loom departs from PyTorch's.

    pt2_bisect.py DIR WORK [--trace FILE] [--rtol R] [--node NAME ...]

DIR holds model.pt2, ids.npy and a trace of every node's value in PyTorch
(scripts/export-hf.py --trace-nodes trace.npz). For a node, the .pt2 is
rewritten to return that node's value, compiled with loom-compile
(--mode=infer, CPU) and run on ids.npy; the result is compared with the
trace. Without --node, a binary search over the traced top-level nodes, in
graph order, finds the first one that differs (it assumes a value computed
from a wrong one is wrong too, which ties can break: check the answer's
inputs with --node). loom-compile and loom-run are found on PATH."""
import argparse, json, os, shutil, subprocess, sys, zipfile
import numpy as np


def node_order(model_json):
    order = []
    for node in model_json["graph_module"]["graph"]["nodes"]:
        for out in node["outputs"]:
            if "as_tensor" in out:
                order.append(out["as_tensor"]["name"])
            elif "as_tensors" in out:
                order += [t["name"] for t in out["as_tensors"]]
    return order


def with_output(src, dst, model_json, name):
    m = json.loads(json.dumps(model_json))
    arg = {"as_tensor": {"name": name}}
    m["graph_module"]["graph"]["outputs"] = [arg]
    m["graph_module"]["signature"]["output_specs"] = [{"user_output": {"arg": arg}}]
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith("models/model.json"):
                data = json.dumps(m).encode()
            zout.writestr(item, data)


def loom_value(args, model_json, name):
    pt2 = os.path.join(args.work, "at.pt2")
    exe = os.path.join(args.work, "at.loomx")
    out = os.path.join(args.work, "at.npy")
    with_output(os.path.join(args.dir, "model.pt2"), pt2, model_json, name)
    for cmd in (["loom-compile", pt2, "--mode=infer", "--target=cpu", "-o", exe],
                ["loom-run", exe, "--input", os.path.join(args.dir, "ids.npy"), "--output", out]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    return np.load(out), None


def differs(args, model_json, trace, name):
    want = trace[name]
    got, err = loom_value(args, model_json, name)
    if err:
        print("%-24s loom failed: %s" % (name, err))
        return True
    if got.shape != want.shape:
        print("%-24s shape %s, PyTorch %s" % (name, got.shape, want.shape))
        return True
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))  # equal infinities too
    finite = np.abs(want64[np.isfinite(want64)])
    scale = max(finite.max(initial=0.0), 1e-30)
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(got64 - want64))
    err = np.nan_to_num(diff, nan=np.inf).max(initial=0.0) / scale
    bad = not (err <= args.rtol)
    print("%-24s %s rel err %.2e%s" % (name, list(want.shape), err, "  DIFFERS" if bad else ""))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("work")
    ap.add_argument("--trace", default="trace.npz")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--node", action="append", default=[])
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    for needed in ("model.pt2", "ids.npy", args.trace):
        if not os.path.isfile(os.path.join(args.dir, needed)):
            sys.exit("pt2_bisect.py: %s has no %s (the trace comes from scripts/export-hf.py "
                     "--trace-nodes)" % (args.dir, needed))
    trace = np.load(os.path.join(args.dir, args.trace))
    with zipfile.ZipFile(os.path.join(args.dir, "model.pt2")) as z:
        name = next(n for n in z.namelist() if n.endswith("models/model.json"))
        model_json = json.loads(z.read(name))
    if args.node:
        for n in args.node:
            differs(args, model_json, trace, n)
        return 0
    order = [n for n in node_order(model_json) if n in trace.files]
    lo, hi = 0, len(order) - 1
    if not differs(args, model_json, trace, order[hi]):
        print("the last traced node matches")
        return 0
    while lo < hi:
        mid = (lo + hi) // 2
        if differs(args, model_json, trace, order[mid]):
            hi = mid
        else:
            lo = mid + 1
    print("first differing node: %s" % order[lo])
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Where a training step's GPU time goes, Loom beside PyTorch.

Reads what `bench/train_llama.py bench --count-steps N --out OUT` writes:
  OUT/loom_trace.json      loom-run --trace (every instruction, every step)
  OUT/compile_kernels.json torch.profiler's kernels of one torch.compile step
  OUT/eager_kernels.json   the same for eager
and the executable's listing (`loom-inspect --json train.loomx`), which names
each instruction's kernel and operand shapes. Prints, per run, the time of
one step by category, and Loom's largest instruction groups (kernel and
shapes), so a change can be read against the step it changes.

  python3 bench/step_profile.py --out OUT --inspect listing.json [--top 25]
"""
import argparse
import collections
import json
import os


def torch_category(name):
    n = name.lower()
    if any(k in n for k in ("flash", "fmha", "cudnn", "sdpa", "attention")):
        return "attention"
    if any(k in n for k in ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "cublas")):
        return "gemm"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    if "nll" in n or "log_softmax" in n or "cross_entropy" in n:
        return "loss"
    if n.startswith("triton"):
        if "red" in n or "per_fused" in n:
            return "fused reduction (triton)"
        return "fused elementwise (triton)"
    if "reduce" in n or "norm" in n:
        return "reduction"
    if "embedding" in n or "index" in n or "scatter" in n or "sort" in n:
        return "embedding/index"
    return "elementwise/other"


def loom_category(kernel):
    k = kernel.split(".", 1)[-1]
    if k in ("matmul", "scaled_matmul", "matmul_bias"):
        return "gemm"
    if k.startswith("attention"):
        return "attention"
    if k.startswith("adamw"):
        return "optimizer"
    if k == "sum_squares_multi":
        return "gradient norm"
    if k.startswith("cross_entropy") or k in ("log_softmax",):
        return "loss"
    if k == "fused":
        return "fused elementwise (nvrtc)"
    if k.startswith(("rms_norm", "layer_norm", "norm_weight_grad")):
        return "norm"
    if k.startswith("reduce") or k in ("softmax",):
        return "reduction"
    if k.startswith(("embedding", "gather", "scatter")):
        return "embedding/index"
    if k in ("transpose", "slice", "concat", "pad", "broadcast", "split", "copy"):
        return "data movement"
    if k in ("cast", "cast_multi"):
        return "cast"
    if k == "rope" or k.startswith("rope"):
        return "rope"
    return "elementwise/other"


def table(title, rows, total):
    print("\n" + title)
    print("| %-46s | %10s | %7s | %6s |" % ("", "ms a step", "share", "calls"))
    print("| %s | %s | %s | %s |" % ("-" * 46, "-" * 10, "-" * 7, "-" * 6))
    for name, (us, calls) in rows:
        print("| %-46s | %10.2f | %6.1f%% | %6d |" % (name[:46], us / 1e3, 100 * us / total, calls))
    print("| %-46s | %10.2f | %6s | %6s |" % ("total (kernel time, not wall)", total / 1e3, "", ""))


def loom(out, listing, top):
    trace = json.load(open(os.path.join(out, "loom_trace.json")))
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    last = max(e["args"]["step"] for e in events)
    events = [e for e in events if e["args"]["step"] == last]
    rank = listing["ranks"][0]
    buffers = {b["index"]: b for b in rank["buffers"]}
    instructions = {i["index"]: i for i in rank["instructions"]}

    def signature(index):
        ins = instructions.get(index, {})
        shapes = lambda ids: ",".join("x".join(map(str, buffers[b]["shape"])) + buffers[b]["dtype"]
                                      for b in ids if b in buffers)
        return "%s (%s)->(%s)" % (ins.get("kernel", "?"), shapes(ins.get("inputs", [])),
                                  shapes(ins.get("outputs", [])))

    by_cat, by_sig = collections.defaultdict(lambda: [0.0, 0]), collections.defaultdict(lambda: [0.0, 0])
    total = 0.0
    for e in events:
        kernel = instructions.get(e["args"]["instruction"], {}).get("kernel", e["name"])
        for d, key in ((by_cat, loom_category(kernel)), (by_sig, signature(e["args"]["instruction"]))):
            d[key][0] += e["dur"]
            d[key][1] += 1
        total += e["dur"]
    table("Loom, step %d (replayed graph: %s), by category" % (last, events[0]["args"]["graph"]),
          sorted(by_cat.items(), key=lambda kv: -kv[1][0]), total)
    table("Loom, the %d largest instruction groups (kernel and shapes)" % top,
          sorted(by_sig.items(), key=lambda kv: -kv[1][0])[:top], total)


def torch_table(out, name, top):
    path = os.path.join(out, "%s_kernels.json" % name)
    if not os.path.exists(path):
        return
    kernels = json.load(open(path))
    by_cat, by_name = collections.defaultdict(lambda: [0.0, 0]), collections.defaultdict(lambda: [0.0, 0])
    total = 0.0
    for k in kernels:
        for d, key in ((by_cat, torch_category(k["name"])), (by_name, k["name"])):
            d[key][0] += k["us"]
            d[key][1] += 1
        total += k["us"]
    table("PyTorch %s, one step, by category" % name, sorted(by_cat.items(), key=lambda kv: -kv[1][0]),
          total)
    table("PyTorch %s, the %d largest kernels" % (name, top),
          sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top], total)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="train_llama.py bench's --out directory")
    ap.add_argument("--inspect", required=True, help="loom-inspect --json of the executable")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    loom(args.out, json.load(open(args.inspect)), args.top)
    for name in ("compile", "eager"):
        torch_table(args.out, name, args.top)


if __name__ == "__main__":
    main()

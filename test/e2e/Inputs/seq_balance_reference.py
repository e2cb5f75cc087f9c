#!/usr/bin/env python3
"""The NumPy reference of --moe-seq-aux-loss-coef (DeepSeek-V3's complementary
sequence-wise balance loss), from the routers' own values.

  seq_balance_reference.py expose IN.mlir OUT.mlir softmax|sigmoid
      adds each router's affinities (every nn.softmax, or nn.sigmoid, result)
      and the expert ids each MoE layer sorts (an i64 nn.sort's input) to
      main's results, in program order (nn IR as `loom-compile
      --compile-to=input` prints it);
  seq_balance_reference.py check FWD_DIR LOSS0_DIR LOSSC_DIR C softmax|sigmoid
      from FWD_DIR (loom-run --output-dir of that program: output0 the
      logits [B, S, V], then the exposed values), computes for each layer
      and sequence sum_i f_i P_i, f_i = E / (k S) x the choices of expert i,
      P_i = the mean over the sequence of the affinities (a sigmoid router's
      divided by their sum over the experts); the mean over sequences, summed
      over layers; and compares it with (loss(C) - loss(0)) / C of two
      --mode=gradients runs on the same tokens (within 1e-4 relative).
"""
import glob
import re
import sys

import numpy as np


def expose(src, dst, kind):
    lines = open(src).read().split("\n")
    types = {}
    for line in lines:
        m = re.match(r"\s*(%[\w]+)(?:, (%[\w]+))? = nn\.[\w]+ .* -> \(?(tensor<[^>]*>)"
                     r"(?:, (tensor<[^>]*>))?\)?$", line)
        if m:
            types[m.group(1)] = m.group(3)
            if m.group(2):
                types[m.group(2)] = m.group(4)
            continue
        m = re.match(r"\s*(%[\w]+) = nn\.[\w]+ .*: (tensor<[^>]*>)$", line)
        if m:
            types[m.group(1)] = m.group(2)
    extra = []
    for line in lines:
        m = re.match(r"\s*(%[\w]+) = nn\." + kind + " ", line)
        if m:
            extra.append(m.group(1))
        m = re.match(r"\s*%[\w]+, %[\w]+ = nn\.sort (%[\w]+) ", line)
        if m and "xi64>" in types.get(m.group(1), ""):
            extra.append(m.group(1))
    if not extra:
        sys.exit("seq_balance_reference.py: no nn.%s or nn.sort in %s" % (kind, src))
    out = []
    for line in lines:
        m = re.match(r"(\s*)return (.*) : (.*)$", line)
        if m:
            line = "%sreturn %s, %s : %s, %s" % (m.group(1), m.group(2), ", ".join(extra),
                                                m.group(3), ", ".join(types[e] for e in extra))
        if line.lstrip().startswith("func.func @main"):
            line = re.sub(r"\) \{$", ", " + ", ".join(types[e] for e in extra) + ") {", line)
        out.append(line)
    open(dst, "w").write("\n".join(out))


def check(fwd, loss0, lossc, c, kind):
    n = len(glob.glob(fwd + "/output*.npy"))
    logits = np.load(fwd + "/output0.npy")
    batch, seq = logits.shape[0], logits.shape[1]
    outs = [np.load("%s/output%d.npy" % (fwd, i)) for i in range(1, n)]
    total, layers, i = 0.0, 0, 0
    while i < len(outs):
        a = outs[i]
        # A router's affinities [tokens, experts], then its layer's sorted ids.
        if (a.ndim == 2 and a.dtype != np.int64 and a.shape[0] == batch * seq and
                i + 1 < len(outs) and outs[i + 1].dtype == np.int64):
            experts = a.shape[1]
            ids = outs[i + 1]
            k = ids.size // (batch * seq)
            s = a.astype(np.float64).reshape(batch, seq, experts)
            if kind == "sigmoid":
                s = s / s.sum(-1, keepdims=True)
            ids = ids.reshape(batch, seq * k)
            per = [(experts / (k * seq) * np.bincount(ids[b], minlength=experts) *
                    s[b].mean(0)).sum() for b in range(batch)]
            total += float(np.mean(per))
            layers += 1
            i += 2
        else:
            i += 1
    if layers == 0:
        sys.exit("seq_balance_reference.py: no router found among %s's outputs" % fwd)
    loom = (float(np.load(lossc + "/loss.npy")) - float(np.load(loss0 + "/loss.npy"))) / c
    rel = abs(loom - total) / abs(total)
    print("sequence balance loss over %d layers: numpy %.6f, loom %.6f (rel err %.1e)" %
          (layers, total, loom, rel))
    if rel > 1e-4:
        sys.exit("seq_balance_reference.py: FAIL: rel err %.1e above 1e-4" % rel)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "expose":
        expose(*sys.argv[2:])
    elif len(sys.argv) == 7 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
    else:
        sys.exit(__doc__)

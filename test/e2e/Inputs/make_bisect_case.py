#!/usr/bin/env python3
"""A case for pt2_bisect.py without PyTorch: the hand-made program of
test/frontend/torch_export/Inputs/synthetic_pt2.py, its input as ids.npy,
and a trace of its first nodes' values computed with NumPy. With --from
NODE, every traced value from NODE on is off by one, as a PyTorch run that
departs there would be.

usage: make_bisect_case.py DIR [--from NODE]"""
import os
import subprocess
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1]
subprocess.run([sys.executable, os.path.join(here, "..", "..", "frontend", "torch_export", "Inputs",
                                             "synthetic_pt2.py"), out], check=True)
x = np.load(os.path.join(out, "x.npy")).astype(np.float64)
np.save(os.path.join(out, "ids.npy"), np.load(os.path.join(out, "x.npy")))
e = np.exp(x - x.max(axis=-1, keepdims=True))
sm = e / e.sum(axis=-1, keepdims=True)
values = {"sm": sm,
          "g": 0.5 * sm * (1 + np.tanh(np.sqrt(2 / np.pi) * (sm + 0.044715 * sm ** 3))),
          "xt": x.T, "mm": x @ x.T, "s": (x @ x.T).sum(axis=1)}
order = ["sm", "g", "xt", "mm", "s"]
start = order.index(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--from" else len(order)
for name in order[start:]:
    values[name] = values[name] + 1
np.savez(os.path.join(out, "trace.npz"), **{k: v.astype(np.float32) for k, v in values.items()})

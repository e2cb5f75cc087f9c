#!/usr/bin/env python3
"""tp2_row_parallel.py DIR: writes DIR/x.npy and the expected outputs of
Inputs/tp2-row-parallel.mlir (computed in float64 from the global tensors)."""
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(7)
x = rng.uniform(-1.0, 1.0, size=(4, 8)).astype(np.float32)
w = np.array([[((i * 3 + j) % 5) - 2 for j in range(3)] for i in range(8)], dtype=np.float64)
y = x.astype(np.float64) @ w
np.save(out + "/x.npy", x)
np.save(out + "/y.npy", y)
np.save(out + "/gathered.npy", np.concatenate([y, y], axis=0))
np.save(out + "/scattered.npy", y[0:2])  # rank 0's rows

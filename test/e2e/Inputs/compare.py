#!/usr/bin/env python3
"""compare.py ACTUAL.npy EXPECTED.npy --rtol R: fails unless
max|actual - expected| <= R * max|expected| (and shapes match)."""
import argparse
import sys

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("actual")
ap.add_argument("expected")
ap.add_argument("--rtol", type=float, required=True)
args = ap.parse_args()
a = np.load(args.actual).astype(np.float64)
e = np.load(args.expected).astype(np.float64)
if a.shape != e.shape:
    sys.exit("shape mismatch: %s vs %s" % (a.shape, e.shape))
if not np.all(np.isfinite(a)):
    sys.exit("non-finite values in %s" % args.actual)
scale = max(np.abs(e).max(), 1e-30)
err = np.abs(a - e).max() / scale
print("max relative error %.3e (tolerance %.1e)" % (err, args.rtol))
if not err <= args.rtol:
    sys.exit("FAIL: error %.3e exceeds %.1e" % (err, args.rtol))

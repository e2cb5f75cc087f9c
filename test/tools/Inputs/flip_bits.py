#!/usr/bin/env python3
"""flip_bits.py FILE OUTDIR N: writes N copies of FILE, each with a few
seeded random bits flipped (and some truncated), for crash testing."""
import os
import random
import sys

src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
os.makedirs(out, exist_ok=True)
rng = random.Random(7)
for i in range(n):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(b))
        b[pos] ^= 1 << rng.randrange(8)
    if i % 10 == 9:
        b = b[: rng.randrange(len(b))]
    open(os.path.join(out, "f%03d.loomx" % i), "wb").write(bytes(b))

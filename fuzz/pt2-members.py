#!/usr/bin/env python3
"""Turns .pt2 archives into fuzz_pt2 inputs: each member as `@@ NAME` line
followed by its bytes (see fuzz_pt2.cpp). Usage: pt2-members.py OUT_DIR FILE.pt2..."""
import os
import sys
import zipfile

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
for i, path in enumerate(sys.argv[2:]):
    with zipfile.ZipFile(path) as archive:
        parts = []
        for info in archive.infolist():
            parts.append(b"@@ " + info.filename.encode() + b"\n" + archive.read(info))
    name = "%d-%s" % (i, os.path.basename(os.path.dirname(os.path.abspath(path))))
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(b"\n".join(parts))

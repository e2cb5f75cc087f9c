#!/usr/bin/env python3
"""Seeds for fuzz_safetensors from real files: the same header (names,
dtypes, metadata) with every tensor shrunk to one element, so inputs stay
small. Usage: safetensors-shrink.py OUT_DIR FILE.safetensors..."""
import json
import os
import struct
import sys

sizes = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
         "I16": 2, "U16": 2}
out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
for i, path in enumerate(sys.argv[2:]):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    offset = 0
    out = {}
    if "__metadata__" in header:
        out["__metadata__"] = header.pop("__metadata__")
    for name, info in sorted(header.items(), key=lambda kv: -sizes.get(kv[1]["dtype"], 1)):
        size = sizes.get(info["dtype"], 1)
        out[name] = {"dtype": info["dtype"], "shape": [1] * len(info["shape"]),
                     "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(out, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    name = "%d-%s.safetensors" % (i, os.path.basename(os.path.dirname(os.path.abspath(path))))
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\x01" * offset)

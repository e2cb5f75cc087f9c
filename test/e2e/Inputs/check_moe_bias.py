#!/usr/bin/env python3
"""check_moe_bias.py CHECKPOINT.safetensors METRICS.jsonl RATE: after one
step from zero biases, each router's e_score_correction_bias in the
checkpoint is RATE * sign(mean load - load), the loads being the step's
moe_tokens_per_expert (DeepSeek-V3's auxiliary-loss-free balancing)."""
import json, struct, sys
import numpy as np
ck, metrics, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(ck, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
names = sorted(k for k in header if k.endswith("e_score_correction_bias"))
counts = json.loads(open(metrics).readline())["moe_tokens_per_expert"]
assert len(names) == len(counts), (names, len(counts))
for name, load in zip(names, counts):
    h = header[name]
    a, b = h["data_offsets"]
    got = np.frombuffer(data[a:b], dtype=np.float32)
    load = np.array(load, dtype=np.float64)
    want = rate * np.sign(load.mean() - load)
    print(name, "bias", got.tolist())
    if not np.allclose(got, want, atol=1e-7):
        sys.exit("mismatch: want %s" % want.tolist())
print("bias update OK")

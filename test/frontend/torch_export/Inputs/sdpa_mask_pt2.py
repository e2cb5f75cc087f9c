"""Writes a hand-made torch.export program: scaled_dot_product_attention of
q [1, 4, 5, 8] over k, v [1, 2, 5, 8] (grouped queries, enable_gqa) under a
bool mask that is a graph input (a padding mask known only at run time),
with its inputs and NumPy's result.

usage: sdpa_mask_pt2.py OUTDIR   (writes model.pt2, q.npy, k.npy, v.npy, mask.npy, expected.npy)
"""
import json
import os
import sys
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic_pt2 import BOOL, FLOAT32, Program, meta, tensor  # noqa: E402


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    p = Program()
    for name, shape, dtype in (("q", [1, 4, 5, 8], FLOAT32), ("k", [1, 2, 5, 8], FLOAT32),
                               ("v", [1, 2, 5, 8], FLOAT32), ("mask", [1, 1, 5, 5], BOOL)):
        p.values[name] = meta(dtype, shape)
    p.node("scaled_dot_product_attention.default", "y", FLOAT32, [1, 4, 5, 8],
           query=tensor("q"), key=tensor("k"), value=tensor("v"), attn_mask=tensor("mask"),
           enable_gqa={"as_bool": True})
    inputs = [tensor(n) for n in ("q", "k", "v", "mask")]
    program = {
        "graph_module": {
            "graph": {"inputs": inputs, "outputs": [tensor("y")], "nodes": p.nodes,
                      "tensor_values": p.values, "sym_int_values": {}, "sym_bool_values": {},
                      "is_single_tensor_return": True, "custom_obj_values": {},
                      "sym_float_values": {}},
            "signature": {"input_specs": [{"user_input": {"arg": t}} for t in inputs],
                          "output_specs": [{"user_output": {"arg": tensor("y")}}]},
            "module_call_graph": [], "metadata": {}},
        "opset_version": {"aten": 10}, "range_constraints": {},
        "schema_version": {"major": 8, "minor": 17}, "verifiers": [], "torch_version": "2.11.0"}
    with zipfile.ZipFile(os.path.join(out, "model.pt2"), "w") as archive:
        archive.writestr("sdpa/models/model.json", json.dumps(program))
        archive.writestr("sdpa/byteorder", "little")

    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    # Causal, with the last key padded away (every row keeps key 0).
    mask = np.tril(np.ones((5, 5), dtype=bool))
    mask[:, 4] = False
    mask = mask[None, None]
    for name, value in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        np.save(os.path.join(out, name + ".npy"), value)
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    scores = q @ kk.transpose(0, 1, 3, 2) / np.sqrt(8.0)
    scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    np.save(os.path.join(out, "expected.npy"), (probs @ vv).astype(np.float32))


if __name__ == "__main__":
    main()

"""Writes hand-made torch.export programs exported at a fixed batch of 2, for
re-inferring the batch (loom-compile --batch).

usage: batch_pt2.py CASE OUTDIR   (writes OUTDIR/model.pt2, x.npy, expected.npy)

Cases:
  same-rows  x + arange(4).expand(2, 4) and a reshape through [8]: the
             constant is the same for every sequence, so any batch works
  baked      x + arange(8).view(2, 4): the constant differs between
             sequences, so the batch cannot change (an error naming 'pos')
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inplace_pt2 import archive, user_outputs  # noqa: E402
from synthetic_pt2 import FLOAT32 as F, Program, meta, tensor  # noqa: E402


def main():
    case, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    p = Program()
    p.values["x"] = meta(F, [2, 4])
    x = tensor("x")
    dtype = {"name": "dtype", "arg": {"as_scalar_type": 7}, "kind": 2}
    if case == "same-rows":
        p.node("arange.default", "ar", F, [4], end={"as_int": 4})
        p.nodes[-1]["inputs"].append(dtype)
        p.node("expand.default", "pos", F, [2, 4], self=tensor("ar"), size={"as_ints": [2, 4]})
        p.node("add.Tensor", "y", F, [2, 4], self=x, other=tensor("pos"))
        p.node("view.default", "flat", F, [8], self=tensor("y"), size={"as_ints": [8]})
        p.node("mul.Tensor", "z", F, [8], self=tensor("flat"), other={"as_float": 2.0})
        p.node("view.default", "out", F, [2, 4], self=tensor("z"), size={"as_ints": [2, 4]})
        xv = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
        expected = (xv + np.arange(4)) * 2
    elif case == "baked":
        p.node("arange.default", "ar", F, [8], end={"as_int": 8})
        p.nodes[-1]["inputs"].append(dtype)
        p.node("view.default", "pos", F, [2, 4], self=tensor("ar"), size={"as_ints": [2, 4]})
        p.node("add.Tensor", "out", F, [2, 4], self=x, other=tensor("pos"))
        xv = np.zeros((3, 4), np.float32)
        expected = xv
    else:
        sys.exit("unknown case " + case)
    archive(out, p, ["x"], [{"user_input": {"arg": x}}], ["out"], user_outputs(["out"]))
    np.save(os.path.join(out, "x.npy"), xv)
    np.save(os.path.join(out, "expected.npy"), expected.astype(np.float32))


if __name__ == "__main__":
    main()

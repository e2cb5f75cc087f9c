"""Writes a small hand-made torch.export program of the operators that the
fourth sweep's hybrid families brought (Gemma 3n's activation sparsity,
Inkling's router, Nemotron-H's and Qwen3.5-MoE's decomposed exports), with
its inputs and NumPy's results: broadcast_tensors, log_sigmoid, std and var
(unbiased, and with a correction), _is_all_true (of a constant, folded, and
of a computed value), erfinv of constants (folded), multiply (torch's alias
of mul), select_scatter, log1p and item() of a constant used as a size.

usage: hybrid_ops_pt2.py OUTDIR [--computed-item]
  (writes model.pt2, x.npy, y.npy, expected{0..9}.npy; with --computed-item,
  a program taking item() of a value computed from its input, which Loom
  refuses)
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from synthetic_pt2 import BOOL, FLOAT32, INT64, Program, meta, tensor, write_archive  # noqa: E402


def write(out, p, inputs, outputs):
    write_archive(os.path.join(out, "model.pt2"), "hybrid", p, inputs, outputs)


def computed_item(out):
    p = Program()
    p.values["ids"] = meta(INT64, [4])
    p.node("select.int", "first", INT64, [], self=tensor("ids"), dim={"as_int": 0},
           index={"as_int": 0})
    p.nodes.append({"target": "torch.ops.aten.item.default", "name": "count",
                    "inputs": [{"name": "self", "arg": tensor("first"), "kind": 1}],
                    "outputs": [{"as_sym_int": {"as_name": "count"}}], "metadata": {}})
    p.node("new_zeros.default", "rows", FLOAT32, [3], self=tensor("ids"),
           size={"as_sym_ints": [{"as_name": "count"}]})
    write(out, p, [tensor("ids")], ["rows"])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if "--computed-item" in sys.argv[2:]:
        return computed_item(out)
    rng = np.random.default_rng(5)
    xv = (rng.standard_normal((3, 5)) * 4).astype(np.float32)
    yv = rng.standard_normal((1, 5)).astype(np.float32)
    p = Program()
    p.values["x"] = meta(FLOAT32, [3, 5])
    p.values["y"] = meta(FLOAT32, [1, 5])
    x, y = tensor("x"), tensor("y")
    # broadcast_tensors: one node, a list of results.
    p.nodes.append({"target": "torch.ops.aten.broadcast_tensors.default", "name": "bt",
                    "inputs": [{"name": "tensors", "arg": {"as_tensors": [{"name": "x"}, {"name": "y"}]}, "kind": 1}],
                    "outputs": [{"as_tensors": [{"name": "bx"}, {"name": "by"}]}],
                    "metadata": {}})
    p.values["bx"] = meta(FLOAT32, [3, 5])
    p.values["by"] = meta(FLOAT32, [3, 5])
    p.node("log_sigmoid.default", "ls", FLOAT32, [3, 5], self=x)
    p.node("std.dim", "sd", FLOAT32, [3, 1], self=x, dim={"as_ints": [-1]},
           unbiased={"as_bool": True}, keepdim={"as_bool": True})
    p.node("var.correction", "vr", FLOAT32, [5], self=x, dim={"as_ints": [0]},
           correction={"as_float": 0.0}, keepdim={"as_bool": False})
    # _is_all_true of a computed comparison, and of constants (torch's
    # argument checks), as 0/1 floats.
    p.node("gt.Scalar", "pos", BOOL, [1, 5], self=y, other={"as_float": -10.0})
    p.node("_is_all_true.default", "allpos", BOOL, [], self=tensor("pos"))
    p.node("arange.default", "steps", INT64, [4], end={"as_int": 4})
    p.node("ge.Scalar", "nonneg", BOOL, [4], self=tensor("steps"), other={"as_int": 1})
    p.node("_is_all_true.default", "allnonneg", BOOL, [], self=tensor("nonneg"))
    p.node("stack.default", "flags", BOOL, [2], tensors={"as_tensors": [{"name": "allpos"},
                                                                          {"name": "allnonneg"}]})
    p.nodes.append({"target": "torch.ops.aten.to.dtype", "name": "flagsf",
                    "inputs": [{"name": "self", "arg": tensor("flags"), "kind": 1},
                               {"name": "dtype", "arg": {"as_scalar_type": FLOAT32}, "kind": 1}],
                    "outputs": [tensor("flagsf")], "metadata": {}})
    p.values["flagsf"] = meta(FLOAT32, [2])
    # erfinv of a constant (a normal quantile, as torch.distributions.Normal.icdf).
    p.node("mul.Tensor", "probs", FLOAT32, [4], self=tensor("steps"), other={"as_float": 0.3})
    p.node("sub.Tensor", "centred", FLOAT32, [4], self=tensor("probs"), other={"as_float": 0.45})
    p.node("erfinv.default", "quantiles", FLOAT32, [4], self=tensor("centred"))
    p.node("multiply.Tensor", "prod", FLOAT32, [3, 5], self=tensor("bx"), other=tensor("by"))
    # select_scatter: row 1 of x replaced by y's only row.
    p.node("squeeze.dim", "row", FLOAT32, [5], self=y, dim={"as_int": 0})
    p.node("select_scatter.default", "placed", FLOAT32, [3, 5], self=x, src=tensor("row"),
           dim={"as_int": 0}, index={"as_int": -2})
    p.node("abs.default", "ax", FLOAT32, [3, 5], self=x)
    p.node("log1p.default", "lp", FLOAT32, [3, 5], self=tensor("ax"))
    # item() of a constant, used as a size.
    p.node("select.int", "three", INT64, [], self=tensor("steps"), dim={"as_int": 0},
           index={"as_int": 3})
    p.nodes.append({"target": "torch.ops.aten.item.default", "name": "n",
                    "inputs": [{"name": "self", "arg": tensor("three"), "kind": 1}],
                    "outputs": [{"as_sym_int": {"as_name": "n"}}], "metadata": {}})
    p.node("mul.Tensor", "scaled", FLOAT32, [3, 5], self=x, other={"as_sym_int": {"as_name": "n"}})
    outputs = ["by", "ls", "sd", "vr", "flagsf", "quantiles", "prod", "placed", "lp", "scaled"]
    write(out, p, [x, y], outputs)
    np.save(os.path.join(out, "x.npy"), xv)
    np.save(os.path.join(out, "y.npy"), yv)

    x64, y64 = xv.astype(np.float64), yv.astype(np.float64)
    placed = x64.copy()
    placed[1] = y64[0]
    erfinv = np.vectorize(lambda v: _erfinv(v))
    expected = [np.broadcast_to(y64, (3, 5)), np.minimum(x64, 0) - np.log1p(np.exp(-np.abs(x64))),
                x64.std(axis=-1, ddof=1, keepdims=True), x64.var(axis=0, ddof=0),
                np.array([1.0, 0.0]), erfinv(np.arange(4) * 0.3 - 0.45), x64 * y64, placed,
                np.log1p(np.abs(x64)), 3 * x64]
    for i, value in enumerate(expected):
        np.save(os.path.join(out, "expected%d.npy" % i), np.asarray(value, np.float32))


def _erfinv(y):
    """erf's inverse by bisection on math.erf (the reference, independent of
    the importer's Newton steps)."""
    lo, hi = -10.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if math.erf(mid) < y:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


if __name__ == "__main__":
    main()

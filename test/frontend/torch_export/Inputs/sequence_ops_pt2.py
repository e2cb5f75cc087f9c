"""Writes a small hand-made torch.export program of the operators that
state-space and linear-attention layers (Mamba-2, gated delta nets) and
Llama 4's router bring: conv1d (depthwise with bias and padding; dense with
stride and dilation), pad (with a value, and cropping), constant_pad_nd,
cumsum along a dim that is not the last, eye, scatter with a tensor of
values, logsumexp, floor (of constants) and gather of integers; with its
inputs and NumPy's results.

usage: sequence_ops_pt2.py OUTDIR   (writes model.pt2, x.npy, w.npy,
expected{0..12}.npy)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Inputs"))
from numpy_reference import conv1d_reference  # noqa: E402
from synthetic_pt2 import FLOAT32, INT64, Program, meta, tensor, write_archive  # noqa: E402


def conv1d(x, w, bias, stride, padding, dilation, groups):
    return conv1d_reference(x, w, bias, stride, padding, padding, dilation, groups)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 6, 9)).astype(np.float32)
    wv = rng.standard_normal((6, 1, 4)).astype(np.float32)
    bv = rng.standard_normal(6).astype(np.float32)
    dv = rng.standard_normal((5, 6, 3)).astype(np.float32)
    p = Program()
    p.values["x"] = meta(FLOAT32, [2, 6, 9])
    p.values["w"] = meta(FLOAT32, [6, 1, 4])
    p.values["b"] = meta(FLOAT32, [6])
    p.values["d"] = meta(FLOAT32, [5, 6, 3])
    x, w, b, d = tensor("x"), tensor("w"), tensor("b"), tensor("d")
    # Depthwise, padding 3 (a causal conv once sliced to the first 9 steps).
    p.node("conv1d.default", "dw", FLOAT32, [2, 6, 12], input=x, weight=w, bias=b,
           stride={"as_ints": [1]}, padding={"as_ints": [3]}, dilation={"as_ints": [1]},
           groups={"as_int": 6})
    # Dense, stride 2, dilation 2, no bias: (9 + 2 - 4 - 1) // 2 + 1 = 4 steps.
    p.node("conv1d.default", "dense", FLOAT32, [2, 5, 4], input=x, weight=d,
           bias={"as_none": True}, stride={"as_ints": [2]}, padding={"as_ints": [1]},
           dilation={"as_ints": [2]}, groups={"as_int": 1})
    # With its defaults left out, as an export writes nn.Conv1d(6, 5, 3).
    p.node("conv1d.default", "plain", FLOAT32, [2, 5, 7], input=x, weight=d)
    # The same in core ATen's form (run_decompositions: aten.convolution).
    p.node("convolution.default", "core", FLOAT32, [2, 5, 4], input=x, weight=d,
           bias={"as_none": True}, stride={"as_ints": [2]}, padding={"as_ints": [1]},
           dilation={"as_ints": [2]}, transposed={"as_bool": False},
           output_padding={"as_ints": [0]}, groups={"as_int": 1})
    p.node("pad.default", "padded", FLOAT32, [2, 7, 10], self=x,
           pad={"as_ints": [2, -1, 0, 1]}, mode={"as_string": "constant"},
           value={"as_float": -0.5})
    p.node("constant_pad_nd.default", "cpad", FLOAT32, [3, 6, 9], self=x,
           pad={"as_ints": [0, 0, 0, 0, 1, 0]}, value={"as_float": 2.0})
    p.node("cumsum.default", "running", FLOAT32, [2, 6, 9], self=x, dim={"as_int": -2})
    p.node("eye.m", "identity", FLOAT32, [3, 4], n={"as_int": 3}, m={"as_int": 4})
    p.node2("topk.default", [("top", FLOAT32, [2, 6, 2]), ("where", INT64, [2, 6, 2])], self=x,
            k={"as_int": 2})
    p.node("full_like.default", "minf", FLOAT32, [2, 6, 9], self=x,
           fill_value={"as_float": -1e30})
    p.node("scatter.src", "scores", FLOAT32, [2, 6, 9], self=tensor("minf"), dim={"as_int": 2},
           index=tensor("where"), src=tensor("top"))
    # Llama 4's gate: sigmoid of the scattered scores (zero off the top k).
    p.node("sigmoid.default", "gate", FLOAT32, [2, 6, 9], self=tensor("scores"))
    # logsumexp over the last dim; floor of constant positions (folded);
    # gather of integers.
    p.node("logsumexp.default", "lse", FLOAT32, [2, 6], self=x, dim={"as_ints": [-1]},
           keepdim={"as_bool": False})
    p.node("arange.default", "positions", INT64, [9], end={"as_int": 9})
    p.node("mul.Tensor", "scaled", FLOAT32, [9], self=tensor("positions"),
           other={"as_float": 0.3})
    p.node("floor.default", "floored", FLOAT32, [9], self=tensor("scaled"))
    p.node("slice.Tensor", "picks", INT64, [4], self=tensor("positions"), dim={"as_int": 0},
           start={"as_int": 2}, end={"as_int": 6})
    p.node("mul.Tensor", "tripled", INT64, [9], self=tensor("positions"), other={"as_int": 3})
    p.node("gather.default", "gathered", INT64, [4], self=tensor("tripled"), dim={"as_int": 0},
           index=tensor("picks"))
    # A subgraph under torch.no_grad (wrap_with_set_grad_enabled(False)),
    # given a tensor and a symbolic int: x times 3.
    sub = {"inputs": [tensor("sx"), {"as_sym_int": {"as_name": "n"}}],
           "outputs": [tensor("sy")],
           "nodes": [{"target": "torch.ops.aten.mul.Tensor", "name": "sy",
                      "inputs": [{"name": "self", "arg": tensor("sx"), "kind": 1},
                                 {"name": "other", "arg": {"as_sym_int": {"as_name": "n"}},
                                  "kind": 1}],
                      "outputs": [tensor("sy")], "metadata": {}}],
           "tensor_values": {"sx": meta(FLOAT32, [2, 6, 9]), "sy": meta(FLOAT32, [2, 6, 9])},
           "sym_int_values": {}, "sym_bool_values": {}, "is_single_tensor_return": False,
           "custom_obj_values": {}, "sym_float_values": {}}
    p.nodes.append({"target": "torch.ops.higher_order.wrap_with_set_grad_enabled",
                    "name": "nograd",
                    "inputs": [{"name": "", "arg": {"as_bool": False}, "kind": 1},
                               {"name": "", "arg": {"as_graph": {"name": "submod_0",
                                                                 "graph": sub}}, "kind": 1},
                               {"name": "", "arg": x, "kind": 1},
                               {"name": "", "arg": {"as_int": 3}, "kind": 1}],
                    "outputs": [tensor("tripled_x")], "metadata": {}})
    p.values["tripled_x"] = meta(FLOAT32, [2, 6, 9])
    outputs = ["dw", "dense", "padded", "cpad", "running", "identity", "gate", "lse", "floored",
               "gathered", "core", "tripled_x", "plain"]
    inputs = [x, w, b, d]
    write_archive(os.path.join(out, "model.pt2"), "sequence", p, inputs, outputs)
    for name, value in (("x", xv), ("w", wv), ("b", bv), ("d", dv)):
        np.save(os.path.join(out, name + ".npy"), value)

    x64 = xv.astype(np.float64)
    padded = np.pad(x64, ((0, 0), (0, 1), (2, 0)), constant_values=-0.5)[:, :, :-1]
    cpad = np.pad(x64, ((1, 0), (0, 0), (0, 0)), constant_values=2.0)
    order = np.argsort(-x64, axis=-1, kind="stable")[..., :2]
    scores = np.full_like(x64, -1e30)
    np.put_along_axis(scores, order, np.take_along_axis(x64, order, -1), -1)
    expected = [conv1d(x64, wv.astype(np.float64), bv.astype(np.float64), 1, 3, 1, 6),
                conv1d(x64, dv.astype(np.float64), None, 2, 1, 2, 1), padded, cpad,
                np.cumsum(x64, axis=-2), np.eye(3, 4), 1 / (1 + np.exp(-scores))]
    m = x64.max(axis=-1, keepdims=True)
    expected += [(m + np.log(np.exp(x64 - m).sum(axis=-1, keepdims=True)))[..., 0],
                 np.floor(np.arange(9) * 0.3)]
    for i, value in enumerate(expected):
        np.save(os.path.join(out, "expected%d.npy" % i), value.astype(np.float32))
    np.save(os.path.join(out, "expected9.npy"), (3 * np.arange(2, 6)).astype(np.int64))
    np.save(os.path.join(out, "expected10.npy"), expected[1].astype(np.float32))
    np.save(os.path.join(out, "expected11.npy"), (3 * x64).astype(np.float32))
    np.save(os.path.join(out, "expected12.npy"),
            conv1d(x64, dv.astype(np.float64), None, 1, 0, 1, 1).astype(np.float32))


if __name__ == "__main__":
    main()

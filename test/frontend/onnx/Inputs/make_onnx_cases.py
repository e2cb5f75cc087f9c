#!/usr/bin/env python3
"""make_onnx_cases.py CASE OUTDIR: writes OUTDIR/model.onnx (built with
onnx.helper), its inputs OUTDIR/in<i>.npy and the outputs NumPy computes,
OUTDIR/expected<i>.npy. `make_onnx_cases.py errors OUTDIR` writes the
malformed and unsupported models the error tests feed to loom-compile."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Inputs"))
from numpy_reference import conv1d_reference  # noqa: E402

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
rng = np.random.default_rng(7)


def const(name, array):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.asarray(array), name))


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "case", inputs, outputs, list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def randf(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# Each case returns (model, inputs, expected outputs).

def shape_chain():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, the TorchScript
    exporter's view(x.size(0), -1), then Flatten and Squeeze/Unsqueeze."""
    x = randf(2, 3, 4)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("zero", np.array(0, dtype=np.int64)),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        const("axes0", np.array([0], dtype=np.int64)),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        const("minus1", np.array([-1], dtype=np.int64)),
        helper.make_node("Concat", ["batch1", "minus1"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["flat"]),
        helper.make_node("Flatten", ["x"], ["flat2"], axis=2),
        helper.make_node("Unsqueeze", ["flat", "axes0"], ["u"]),
        helper.make_node("Squeeze", ["u", "axes0"], ["s"]),
        helper.make_node("Shape", ["x"], ["tail"], start=-2),
        helper.make_node("Size", ["x"], ["size"]),
    ]
    m = model(nodes, [vi("x", F32, [2, 3, 4])],
              [vi("s", F32, None), vi("flat2", F32, None), vi("tail", I64, None),
               vi("size", I64, None)])
    return m, [x], [x.reshape(2, -1), x.reshape(6, 4), np.array([3, 4]), np.array(24)]


def range_constant_of_shape():
    """positions = Range(0, seq, 1) from the input's shape, cast to float and
    added to ConstantOfShape(shape(x)) filled with 0.5."""
    x = randf(2, 5)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("one", np.array(1, dtype=np.int64)),
        const("zero", np.array(0, dtype=np.int64)),
        helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
        helper.make_node("Range", ["zero", "seq", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["positions_f"], to=F32),
        helper.make_node("ConstantOfShape", ["shape"], ["halves"],
                         value=numpy_helper.from_array(np.array([0.5], dtype=np.float32))),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
        helper.make_node("Add", ["x", "positions_f"], ["a"]),
        helper.make_node("Add", ["a", "halves"], ["b"]),
        helper.make_node("Add", ["b", "zeros"], ["y"]),
        const("fstart", np.array(1.0, dtype=np.float32)),
        const("flimit", np.array(2.0, dtype=np.float32)),
        const("fdelta", np.array(0.25, dtype=np.float32)),
        helper.make_node("Range", ["fstart", "flimit", "fdelta"], ["frange"]),
        const("down", np.array(-2, dtype=np.int64)),
        const("nine", np.array(9, dtype=np.int64)),
        helper.make_node("Range", ["nine", "zero", "down"], ["countdown"]),
    ]
    m = model(nodes, [vi("x", F32, [2, 5])],
              [vi("y", F32, None), vi("frange", F32, None), vi("countdown", I64, None)])
    return m, [x], [x + np.arange(5) + 0.5, np.arange(1.0, 2.0, 0.25), np.arange(9, 0, -2)]


def causal_mask():
    """The TorchScript causal mask: Trilu on ConstantOfShape ones, Cast to
    bool, Where over scores, Softmax; and Trilu on a variable (upper, k=1)."""
    x = randf(2, 4, 4)
    nodes = [
        const("sq", np.array([4, 4], dtype=np.int64)),
        helper.make_node("ConstantOfShape", ["sq"], ["ones"],
                         value=numpy_helper.from_array(np.array([1], dtype=np.int64))),
        helper.make_node("Trilu", ["ones"], ["lower"], upper=0),
        helper.make_node("Cast", ["lower"], ["keep"], to=BOOL),
        helper.make_node("Not", ["keep"], ["masked"]),
        const("neg", np.array(-1e9, dtype=np.float32)),
        helper.make_node("Where", ["masked", "neg", "x"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        const("k1", np.array(1, dtype=np.int64)),
        helper.make_node("Trilu", ["x", "k1"], ["upper"], upper=1),
    ]
    m = model(nodes, [vi("x", F32, [2, 4, 4])], [vi("probs", F32, None), vi("upper", F32, None)])
    keep = np.tril(np.ones((4, 4))) != 0
    scores = np.where(keep, x, -1e9)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return m, [x], [e / e.sum(-1, keepdims=True), np.triu(x, 1)]


def expand_where_compare():
    """Expand (both-way broadcast), comparisons, And/Or/Xor, Where, Cast."""
    x = randf(3, 1)
    ids = np.array([[0, 5, 2, 7], [3, 3, 9, 1], [4, 3, 3, 8]], dtype=np.int64)
    nodes = [
        const("shape", np.array([2, 1, 4], dtype=np.int64)),
        helper.make_node("Expand", ["x", "shape"], ["big"]),
        const("three", np.array(3, dtype=np.int64)),
        helper.make_node("Less", ["ids", "three"], ["lt"]),
        helper.make_node("Greater", ["ids", "three"], ["gt"]),
        helper.make_node("Equal", ["ids", "three"], ["eq"]),
        helper.make_node("LessOrEqual", ["ids", "three"], ["le"]),
        helper.make_node("GreaterOrEqual", ["ids", "three"], ["ge"]),
        helper.make_node("Or", ["lt", "eq"], ["le2"]),
        helper.make_node("And", ["ge", "le"], ["eq2"]),
        helper.make_node("Xor", ["gt", "le2"], ["always"]),
        helper.make_node("Cast", ["ids"], ["idsf"], to=F32),
        helper.make_node("Where", ["eq2", "idsf", "big"], ["y"]),
    ]
    m = model(nodes, [vi("x", F32, [3, 1]), vi("ids", I64, [3, 4])],
              [vi("y", F32, None), vi("always", BOOL, None), vi("gt", BOOL, None)])
    big = np.broadcast_to(x, (2, 3, 4))
    y = np.where(ids == 3, ids.astype(np.float32), big)
    return m, [x, ids], [y, np.ones((3, 4), dtype=bool), ids > 3]


def gemm():
    """Gemm with transB, alpha, beta and a broadcast bias; Gemm with transA
    and no bias; MatMul with 1-D operands."""
    a, b, c = randf(3, 4), randf(5, 4), randf(5)
    at, v = randf(4, 3), randf(4)
    nodes = [
        helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Gemm", ["at", "b"], ["z"], transA=1, transB=1),
        helper.make_node("MatMul", ["a", "v"], ["av"]),
        helper.make_node("MatMul", ["v", "at"], ["va"]),
    ]
    m = model(nodes, [vi("a", F32, [3, 4]), vi("at", F32, [4, 3]), vi("v", F32, [4])],
              [vi("y", F32, None), vi("z", F32, None), vi("av", F32, None), vi("va", F32, None)],
              [numpy_helper.from_array(b, "b"), numpy_helper.from_array(c, "c")])
    return m, [a, at, v], [0.5 * a @ b.T + 2.0 * c, at.T @ b.T, a @ v, v @ at]


def cumsum():
    """CumSum of constants (position ids from a mask), plain, exclusive and
    reversed, added to an input."""
    x = randf(2, 4)
    mask = np.array([[1, 1, 1, 0], [0, 1, 1, 1]], dtype=np.int64)
    nodes = [
        const("mask", mask),
        const("axis", np.array(1, dtype=np.int64)),
        helper.make_node("CumSum", ["mask", "axis"], ["pos"]),
        helper.make_node("CumSum", ["mask", "axis"], ["excl"], exclusive=1),
        helper.make_node("CumSum", ["mask", "axis"], ["rev"], reverse=1),
        helper.make_node("Add", ["pos", "excl"], ["s1"]),
        helper.make_node("Add", ["s1", "rev"], ["s2"]),
        helper.make_node("Cast", ["s2"], ["s2f"], to=F32),
        helper.make_node("Add", ["x", "s2f"], ["y"]),
    ]
    m = model(nodes, [vi("x", F32, [2, 4])], [vi("y", F32, None)])
    pos = np.cumsum(mask, 1)
    excl = pos - mask
    rev = np.cumsum(mask[:, ::-1], 1)[:, ::-1]
    return m, [x], [x + (pos + excl + rev)]


def split():
    """Split: opset 18 num_outputs (uneven last part), the split input, and
    opset 17 equal parts by output count."""
    x = randf(2, 8)
    nodes18 = [
        helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
        const("sizes", np.array([2, 6], dtype=np.int64)),
        helper.make_node("Split", ["x", "sizes"], ["d", "e"], axis=-1),
    ]
    m = model(nodes18, [vi("x", F32, [2, 8])],
              [vi(n, F32, None) for n in "abcde"])
    return m, [x], [x[:, :3], x[:, 3:6], x[:, 6:], x[:, :2], x[:, 2:]]


def split_opset17():
    x = randf(6, 2)
    m = model([helper.make_node("Split", ["x"], ["a", "b", "c"])],
              [vi("x", F32, [6, 2])], [vi(n, F32, None) for n in "abc"], opset=17)
    return m, [x], [x[:2], x[2:4], x[4:]]


def slice_():
    """Slice with negative starts/ends, negative axes, steps, and ends past
    the dim (INT64_MAX, as exporters write them)."""
    x = randf(4, 6, 5)
    big = np.iinfo(np.int64).max
    inits = [ints("s1", [-3, 1]), ints("e1", [big, -1]), ints("a1", [1, -1]), ints("st1", [2, 2]),
             ints("s2", [-100]), ints("e2", [2]), ints("a2", [0])]
    nodes = [
        helper.make_node("Slice", ["x", "s1", "e1", "a1", "st1"], ["y"]),
        helper.make_node("Slice", ["x", "s2", "e2", "a2"], ["z"]),
        helper.make_node("Slice", ["x", "s2", "e2"], ["w"]),
    ]
    m = model(nodes, [vi("x", F32, [4, 6, 5])], [vi(n, F32, None) for n in "yzw"], inits)
    return m, [x], [x[:, -3::2, 1:-1:2], x[:2], x[:2]]


def reduce_norm():
    """ReduceSum (axes input), ReduceMax (opset 18 axes input, keepdims=0),
    ReduceMean over all dims, Softmax/LogSoftmax on a negative axis,
    LayerNormalization, Sqrt/Reciprocal/Erf/Tanh/Sigmoid/Exp/Log/Abs/Neg."""
    x = randf(2, 3, 4)
    w, bias = randf(4), randf(4)
    inits = [ints("ax", [-1]), ints("ax01", [0, 2]), numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(bias, "bias")]
    nodes = [
        helper.make_node("ReduceSum", ["x", "ax"], ["sum"]),
        helper.make_node("ReduceMax", ["x", "ax01"], ["max"], keepdims=0),
        helper.make_node("ReduceMean", ["x"], ["mean"], keepdims=0),
        helper.make_node("Softmax", ["x"], ["sm"], axis=-2),
        helper.make_node("LogSoftmax", ["x"], ["lsm"], axis=1),
        helper.make_node("LayerNormalization", ["x", "w", "bias"], ["ln"], epsilon=1e-5),
        helper.make_node("Abs", ["x"], ["abs"]),
        helper.make_node("Sqrt", ["abs"], ["sqrt"]),
        helper.make_node("Reciprocal", ["sqrt"], ["rcp"]),
        helper.make_node("Erf", ["x"], ["erf"]),
        helper.make_node("Tanh", ["erf"], ["tanh"]),
        helper.make_node("Sigmoid", ["tanh"], ["sig"]),
        helper.make_node("Exp", ["sig"], ["exp"]),
        helper.make_node("Log", ["exp"], ["log"]),
        helper.make_node("Neg", ["log"], ["neg"]),
        helper.make_node("Relu", ["x"], ["relu"]),
        helper.make_node("Mul", ["rcp", "neg"], ["mix"]),
        helper.make_node("Add", ["mix", "relu"], ["act"]),
    ]
    m = model(nodes, [vi("x", F32, [2, 3, 4])],
              [vi(n, F32, None) for n in ["sum", "max", "mean", "sm", "lsm", "ln", "act"]], inits)
    from math import erf
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(-2, keepdims=True))
    sm = e / e.sum(-2, keepdims=True)
    lsm = xd - xd.max(1, keepdims=True)
    lsm = lsm - np.log(np.exp(lsm).sum(1, keepdims=True))
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    ln = (xd - mu) / np.sqrt(var + 1e-5) * w + bias
    sig = 1 / (1 + np.exp(-np.tanh(np.vectorize(erf)(xd))))
    act = 1 / np.sqrt(np.abs(xd)) * -np.log(np.exp(sig)) + np.maximum(xd, 0)
    return m, [x], [xd.sum(-1, keepdims=True), xd.max((0, 2)), xd.mean(), sm, lsm, ln, act]


def reduce_opset17():
    """At opset 17 ReduceMean takes axes as an attribute."""
    x = randf(2, 3, 4)
    m = model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=1)],
              [vi("x", F32, [2, 3, 4])], [vi("y", F32, None)], opset=17)
    return m, [x], [x.mean(-1, keepdims=True)]


def gather_misc():
    """Gather as embedding (2-D table, axis 0), Gather on axis 1 with negative
    constant indices, Pow with an int exponent, Sum/Max/Min/Mean, Clip,
    Identity, Dropout, IsNaN, Div/Sub, Transpose (default perm), Concat."""
    table = randf(10, 3)
    ids = np.array([[1, 9], [0, 4]], dtype=np.int64)
    x = randf(2, 3)
    inits = [numpy_helper.from_array(table, "table"), ints("neg_ids", [-1, 0]),
             ints("two", 2), numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(0.5, np.float32), "hi")]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("Gather", ["x", "neg_ids"], ["cols"], axis=1),
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("Sum", ["x", "sq", "x"], ["sum3"]),
        helper.make_node("Max", ["x", "sq"], ["mx"]),
        helper.make_node("Min", ["x", "sq"], ["mn"]),
        helper.make_node("Mean", ["x", "sq"], ["avg"]),
        helper.make_node("Clip", ["x", "lo", "hi"], ["clip"]),
        helper.make_node("Identity", ["clip"], ["ident"]),
        helper.make_node("Dropout", ["ident"], ["drop"]),
        helper.make_node("Div", ["drop", "sq"], ["div"]),
        helper.make_node("Sub", ["div", "mx"], ["sub"]),
        helper.make_node("IsNaN", ["div"], ["nan"]),
        helper.make_node("Transpose", ["x"], ["xt"]),
        helper.make_node("Concat", ["sum3", "mn", "avg", "sub"], ["cat"], axis=0),
    ]
    m = model(nodes, [vi("ids", I64, [2, 2]), vi("x", F32, [2, 3])],
              [vi(n, F32, None) for n in ["emb", "cols", "cat", "xt"]] + [vi("nan", BOOL, None)],
              inits)
    xd = x.astype(np.float64)
    sq = xd ** 2
    clip = np.clip(xd, -0.5, 0.5)
    div = clip / sq
    cat = np.concatenate([xd + sq + xd, np.minimum(xd, sq), (xd + sq) / 2,
                          div - np.maximum(xd, sq)], 0)
    return m, [ids, x], [table[ids], x[:, [2, 0]], cat, x.T, np.isnan(div)]


def gather_nd():
    """GatherND (batch_dims 0): index pairs into the first two dims of a
    rank-3 tensor (negative indices count from the end), and full index
    triples (scalar results per tuple), as the dynamo exporter's advanced
    indexing x[b_idx, q_idx] emits."""
    x = randf(3, 4, 5)
    pairs = np.array([[[0, 1], [2, -1]], [[-3, 0], [1, 3]]], dtype=np.int64)
    triples = np.array([[0, 0, 4], [2, 3, -5], [1, -2, 2]], dtype=np.int64)
    nodes = [
        helper.make_node("GatherND", ["x", "pairs"], ["rows"]),
        helper.make_node("GatherND", ["x", "triples"], ["points"]),
    ]
    m = model(nodes, [vi("x", F32, [3, 4, 5]), vi("pairs", I64, [2, 2, 2]),
                      vi("triples", I64, [3, 3])],
              [vi("rows", F32, None), vi("points", F32, None)])
    rows = x[pairs[..., 0], pairs[..., 1]]
    points = x[triples[:, 0], triples[:, 1], triples[:, 2]]
    return m, [x, pairs, triples], [rows, points]


def symbolic_dims():
    """Symbolic dims fixed by --batch, --seq and --dim: the shapes flow
    through Shape-based Reshapes."""
    x = randf(2, 3, 4)
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("first2", np.array([0, 1], dtype=np.int64)),
        helper.make_node("Gather", ["shape", "first2"], ["bs"]),
        const("two", np.array([2, -1], dtype=np.int64)),
        helper.make_node("Concat", ["bs", "two"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["x", "newshape"], ["y"]),
    ]
    m = model(nodes, [vi("x", F32, ["batch_size", "sequence_length", "hidden"])],
              [vi("y", F32, ["batch_size", "sequence_length", 2, None])])
    return m, [x], [x.reshape(2, 3, 2, 2)]


def gelu_opset20():
    """Gelu, an operator since opset 20, exact and tanh-approximated."""
    x = randf(3, 5)
    m = model([helper.make_node("Gelu", ["x"], ["exact"]),
               helper.make_node("Gelu", ["x"], ["approx"], approximate="tanh")],
              [vi("x", F32, [3, 5])], [vi("exact", F32, None), vi("approx", F32, None)], opset=20)
    from math import erf
    xd = x.astype(np.float64)
    exact = xd / 2 * (1 + np.vectorize(erf)(xd / np.sqrt(2)))
    approx = xd / 2 * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd ** 3)))
    return m, [x], [exact, approx]


def softplus_tile():
    """Softplus (values past its linear threshold and far below zero too)
    and Tile (repeats of 1, 2 and 3, the copy outer)."""
    x = randf(2, 3) * 4
    x[0, 0], x[1, 2] = 40.0, -40.0
    m = model([helper.make_node("Softplus", ["x"], ["soft"]),
               helper.make_node("Tile", ["x", "repeats"], ["tiled"])],
              [vi("x", F32, [2, 3])], [vi("soft", F32, None), vi("tiled", F32, None)],
              [ints("repeats", [2, 3])])
    xd = x.astype(np.float64)
    return m, [x], [np.logaddexp(0, xd), np.tile(xd, (2, 3))]


def gather_elements_axes():
    """GatherElements along the first, a middle and the last axis (GPT-J's
    rotary table gathers along the positions), negative indices too."""
    x = randf(3, 4, 5)
    i0 = np.random.default_rng(7).integers(-3, 3, (2, 4, 5)).astype(np.int64)
    i1 = np.random.default_rng(8).integers(0, 4, (3, 6, 5)).astype(np.int64)
    i2 = np.random.default_rng(9).integers(0, 5, (3, 4, 2)).astype(np.int64)
    m = model([helper.make_node("GatherElements", ["x", "i0"], ["y0"], axis=0),
               helper.make_node("GatherElements", ["x", "i1"], ["y1"], axis=-2),
               helper.make_node("GatherElements", ["x", "i2"], ["y2"], axis=2)],
              [vi("x", F32, [3, 4, 5])], [vi("y0", F32, None), vi("y1", F32, None),
                                          vi("y2", F32, None)],
              [numpy_helper.from_array(i0, "i0"), numpy_helper.from_array(i1, "i1"),
               numpy_helper.from_array(i2, "i2")])
    return m, [x], [np.take_along_axis(x, np.where(i0 < 0, i0 + 3, i0), 0),
                    np.take_along_axis(x, i1, 1), np.take_along_axis(x, i2, 2)]


def conv_pad_lse():
    """Conv over one dim (depthwise with a bias and pads 3, 3; dense with
    stride 2, dilation 2 and pads 1, 0), Pad (a value, and a negative amount
    that crops) and ReduceLogSumExp: the operators of Mamba's and Granite's
    ONNX exports."""
    x = randf(2, 6, 9)
    rng = np.random.default_rng(11)
    w = rng.standard_normal((6, 1, 4)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    w2 = rng.standard_normal((5, 6, 3)).astype(np.float32)
    m = model([helper.make_node("Conv", ["x", "w", "bias"], ["depthwise"], group=6, pads=[3, 3]),
               helper.make_node("Conv", ["x", "w2"], ["dense"], strides=[2], dilations=[2],
                                pads=[1, 0]),
               helper.make_node("Pad", ["x", "pads", "value"], ["padded"]),
               helper.make_node("ReduceLogSumExp", ["x", "axes"], ["lse"], keepdims=0)],
              [vi("x", F32, [2, 6, 9])],
              [vi("depthwise", F32, None), vi("dense", F32, None), vi("padded", F32, None),
               vi("lse", F32, None)],
              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias"),
               numpy_helper.from_array(w2, "w2"),
               ints("pads", [0, 1, 2, 0, 0, -1]),
               numpy_helper.from_array(np.array(-0.5, np.float32), "value"),
               ints("axes", [-1])])
    xd = x.astype(np.float64)
    padded = np.pad(xd, ((0, 0), (1, 0), (2, 0)), constant_values=-0.5)[:, :, :-1]
    mx = xd.max(axis=-1, keepdims=True)
    lse = (mx + np.log(np.exp(xd - mx).sum(axis=-1, keepdims=True)))[..., 0]
    return m, [x], [conv1d_reference(xd, w.astype(np.float64), bias.astype(np.float64), 1, 3, 3,
                                     1, 6),
                    conv1d_reference(xd, w2.astype(np.float64), None, 2, 1, 0, 2, 1), padded, lse]


def rotary_buffer():
    """Cos and Sin of a rotary table computed from a float initializer (the
    inverse frequencies, a buffer the exporter lifted to an initializer) and
    positions from the input's shape (DeepSeek-V4's compressor's rotary in
    its ONNX export): evaluated at import, the initializer made a constant;
    Floor and Ceil of constants too."""
    x = randf(2, 4, 3)
    inv_freq = np.array([1.0, 0.1, 0.01], np.float32)
    m = model([helper.make_node("Shape", ["x"], ["shape"], start=1, end=2),
               helper.make_node("Squeeze", ["shape"], ["n"]),
               helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
               helper.make_node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
               helper.make_node("Unsqueeze", ["posf", "ax1"], ["col"]),
               helper.make_node("Unsqueeze", ["inv_freq", "ax0"], ["row"]),
               helper.make_node("MatMul", ["col", "row"], ["angles"]),
               helper.make_node("Cos", ["angles"], ["cos"]),
               helper.make_node("Sin", ["angles"], ["sin"]),
               helper.make_node("Mul", ["x", "cos"], ["xc"]),
               helper.make_node("Add", ["xc", "sin"], ["rot"]),
               helper.make_node("Mul", ["inv_freq", "ten"], ["scaled"]),
               helper.make_node("Floor", ["scaled"], ["down"]),
               helper.make_node("Ceil", ["scaled"], ["up"]),
               helper.make_node("Add", ["down", "up"], ["rounded"])],
              [vi("x", F32, [2, 4, 3])], [vi("rot", F32, None), vi("rounded", F32, None)],
              [numpy_helper.from_array(inv_freq, "inv_freq"), ints("ax0", [0]), ints("ax1", [1]),
               numpy_helper.from_array(np.array(0, np.int64), "zero"),
               numpy_helper.from_array(np.array(1, np.int64), "one"),
               numpy_helper.from_array(np.array(10.0, np.float32), "ten")])
    angles = np.arange(4, dtype=np.float64)[:, None] * inv_freq.astype(np.float64)[None, :]
    scaled = inv_freq.astype(np.float32) * np.float32(10)
    return m, [x], [x.astype(np.float64) * np.cos(angles) + np.sin(angles),
                    np.floor(scaled) + np.ceil(scaled)]


def cumsum_runtime():
    """CumSum of a value known only at run time (Mamba-2's chunked scan in
    Falcon-H1's and Nemotron-H's ONNX exports), along a middle axis, and
    exclusive and reversed along the last; of integers too."""
    x = randf(2, 5, 4)
    m = model([helper.make_node("CumSum", ["x", "ax1"], ["mid"]),
               helper.make_node("CumSum", ["x", "axm1"], ["rev"], exclusive=1, reverse=1),
               helper.make_node("Greater", ["x", "zero"], ["positive"]),
               helper.make_node("Cast", ["positive"], ["xi"], to=TensorProto.INT64),
               helper.make_node("CumSum", ["xi", "ax1"], ["ints"], reverse=1)],
              [vi("x", F32, [2, 5, 4])],
              [vi("mid", F32, None), vi("rev", F32, None), vi("ints", TensorProto.INT64, None)],
              [ints("ax1", [1]), ints("axm1", [-1]),
               numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    xd = x.astype(np.float64)
    rev = np.flip(np.cumsum(np.flip(xd, -1), -1), -1) - xd
    xi = (x > 0).astype(np.int64)
    return m, [x], [np.cumsum(xd, 1), rev, np.flip(np.cumsum(np.flip(xi, 1), 1), 1)]


def onehot_argmax_mod():
    """What the TorchScript exporter writes for transformers' routers and
    scans: OneHot of run-time ids (negative ones from the end, out of range
    ones all off) with its classes on a middle axis, ArgMax along a middle
    axis with ties (the first wins) and ArgMin keeping no dims, and Mod of
    integers both ways (fmod 0: Python's %, the divisor's sign; fmod 1: C's,
    the dividend's)."""
    x = np.round(randf(2, 5, 4) * 2) / 2  # halves: ties along every axis
    ids = np.array([[0, 3, -1], [4, -5, 2]], np.int64)
    a = np.array([7, -7, 7, -7, 0, 5, -6], np.int64)
    b = np.array([3, 3, -3, -3, 3, -5, 4], np.int64)
    m = model([helper.make_node("OneHot", ["ids", "depth", "values"], ["hot"], axis=1),
               helper.make_node("ArgMax", ["x"], ["amax"], axis=1),
               helper.make_node("ArgMin", ["x"], ["amin"], axis=-1, keepdims=0),
               helper.make_node("Mod", ["a", "b"], ["floored"]),
               helper.make_node("Mod", ["a", "b"], ["truncated"], fmod=1)],
              [vi("x", F32, [2, 5, 4]), vi("ids", I64, [2, 3]), vi("a", I64, [7]),
               vi("b", I64, [7])],
              [vi("hot", F32, None), vi("amax", I64, None), vi("amin", I64, None),
               vi("floored", I64, None), vi("truncated", I64, None)],
              [ints("depth", [4]),
               numpy_helper.from_array(np.array([-1.0, 2.5], np.float32), "values")])
    wrapped = np.where(ids < 0, ids + 4, ids)
    hot = np.where(wrapped[..., None] == np.arange(4), 2.5, -1.0).astype(np.float32)
    hot = np.moveaxis(hot, -1, 1)
    return m, [x, ids, a, b], [hot, np.argmax(x, 1)[:, None, :], np.argmin(x, -1),
                               np.mod(a, b), np.fmod(a, b)]


def tied_and_merged():
    """What the TorchScript exporter writes for a fresh model with tied
    embeddings: two norms' equal weights kept as one initializer and the
    other named by an Identity of it, and the LM head's transposed copy of
    the embedding folded into an initializer of the exporter's own name."""
    embed = randf(8, 4)
    m = model([helper.make_node("Identity", ["m.a.weight"], ["m.b.weight"], name="Identity_1"),
               helper.make_node("Gather", ["m.embed.weight", "ids"], ["h"], name="/m/embed/Gather"),
               helper.make_node("Mul", ["h", "m.a.weight"], ["ha"], name="/m/a/Mul"),
               helper.make_node("Mul", ["ha", "m.b.weight"], ["hb"], name="/m/b/Mul"),
               helper.make_node("MatMul", ["hb", "onnx::MatMul_9"], ["logits"],
                                name="/lm_head/MatMul")],
              [vi("ids", I64, [2, 3])], [vi("logits", F32, None)],
              [numpy_helper.from_array(embed, "m.embed.weight"),
               numpy_helper.from_array(np.ones(4, np.float32), "m.a.weight"),
               numpy_helper.from_array(np.ascontiguousarray(embed.T), "onnx::MatMul_9")])
    ids = np.array([[0, 3, 7], [5, 5, 1]], np.int64)
    return m, [ids], [embed[ids].astype(np.float64) @ embed.T.astype(np.float64)]


def backwards():
    """Slices of negative step (x[::-1], as the TorchScript exporter writes
    a flip), one beside a forward step on another axis, and a Transpose
    whose perm counts from the end (x.permute(0, -1, 1) as written)."""
    x = randf(3, 5, 4)
    m = model([helper.make_node("Slice", ["x", "s0", "e0", "a0", "m1"], ["flipped"]),
               helper.make_node("Slice", ["x", "s1", "e1", "a1", "st1"], ["mixed"]),
               helper.make_node("Transpose", ["x"], ["t"], perm=[0, -1, 1])],
              [vi("x", F32, [3, 5, 4])],
              [vi("flipped", F32, None), vi("mixed", F32, None), vi("t", F32, None)],
              [ints("s0", [-1]), ints("e0", [-(2 ** 62)]), ints("a0", [0]), ints("m1", [-1]),
               ints("s1", [1, 9]), ints("e1", [5, 0]), ints("a1", [1, 2]), ints("st1", [2, -2])])
    return m, [x], [x[::-1], x[:, 1:5:2, 3:0:-2], np.transpose(x, (0, 2, 1))]


def scatter_nd_box():
    """ScatterND of constant indices that enumerate a box (a slice
    assignment: x[:, 1:3, :2] = u over all three dims, x[0, 1:3] = v over
    two), which the importer places by padding and choosing rather than
    through a gather table, and indices that are no box (a gather)."""
    x = randf(2, 5, 4)
    u = randf(2, 2, 2)
    v = randf(2, 4)
    w = randf(2, 4)
    box = np.stack(np.meshgrid(np.arange(2), np.arange(1, 3), np.arange(2), indexing="ij"), -1)
    m = model([helper.make_node("ScatterND", ["x", "box", "u"], ["y0"]),
               helper.make_node("ScatterND", ["x", "rows", "v"], ["y1"]),
               helper.make_node("ScatterND", ["x", "apart", "w"], ["y2"])],
              [vi("x", F32, [2, 5, 4]), vi("u", F32, [2, 2, 2]), vi("v", F32, [2, 4]),
               vi("w", F32, [2, 4])],
              [vi("y0", F32, None), vi("y1", F32, None), vi("y2", F32, None)],
              [ints("box", box), ints("rows", [[0, 1], [0, -3]]), ints("apart", [[1, 4], [0, 0]])])
    y0 = x.copy()
    y0[:, 1:3, :2] = u
    y1 = x.copy()
    y1[0, 1:3] = v
    y2 = x.copy()
    y2[1, 4] = w[0]
    y2[0, 0] = w[1]
    return m, [x, u, v, w], [y0, y1, y2]


def opset13():
    """Opset 13 (what Optimum and older TorchScript exports use, 14 or so):
    ReduceMean's axes an attribute, Squeeze/Unsqueeze's and Split's an
    input, Softmax over one axis."""
    x = randf(2, 3, 4)
    m = model([helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], keepdims=1),
               helper.make_node("Sub", ["x", "mean"], ["centered"]),
               helper.make_node("Softmax", ["centered"], ["soft"], axis=1),
               helper.make_node("Unsqueeze", ["soft", "ax0"], ["u"]),
               helper.make_node("Squeeze", ["u", "ax0"], ["back"]),
               helper.make_node("Split", ["back", "halves"], ["a", "b"], axis=2)],
              [vi("x", F32, [2, 3, 4])], [vi("a", F32, None), vi("b", F32, None)],
              [ints("ax0", [0]), ints("halves", [1, 3])], opset=13)
    c = x.astype(np.float64) - x.astype(np.float64).mean(-1, keepdims=True)
    soft = np.exp(c - c.max(1, keepdims=True))
    soft /= soft.sum(1, keepdims=True)
    return m, [x], [soft[..., :1], soft[..., 1:]]


def rms_norm_opset23():
    """RMSNormalization (opset 23, what the dynamo exporter writes for a
    norm at that opset) over the last axis."""
    x = randf(2, 3, 8)
    g = randf(8)
    m = model([helper.make_node("RMSNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-6)],
              [vi("x", F32, [2, 3, 8])], [vi("y", F32, None)],
              [numpy_helper.from_array(g, "g")], opset=23)
    xd = x.astype(np.float64)
    return m, [x], [xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-6) * g]


def attention_opset23():
    """Attention (opset 23): causal with fewer key/value heads than query
    heads and a scale; under a bool mask (a padded key); under a float
    mask."""
    q = randf(2, 4, 5, 8)
    k = randf(2, 2, 5, 8)
    v = randf(2, 2, 5, 6)
    keep = np.ones((2, 1, 5, 5), np.bool_)
    keep[1, :, :, 4] = False
    bias = randf(1, 1, 5, 5)
    m = model([helper.make_node("Attention", ["q", "k", "v"], ["causal"], is_causal=1, scale=0.3),
               helper.make_node("Attention", ["q", "k", "v", "keep"], ["kept"]),
               helper.make_node("Attention", ["q", "k", "v", "bias"], ["biased"])],
              [vi("q", F32, [2, 4, 5, 8]), vi("k", F32, [2, 2, 5, 8]), vi("v", F32, [2, 2, 5, 6]),
               vi("keep", BOOL, [2, 1, 5, 5])],
              [vi("causal", F32, None), vi("kept", F32, None), vi("biased", F32, None)],
              [numpy_helper.from_array(bias, "bias")], opset=23)

    def attend(scale, mask=None, add=None):
        kk = np.repeat(k.astype(np.float64), 2, axis=1)
        vv = np.repeat(v.astype(np.float64), 2, axis=1)
        s = q.astype(np.float64) @ kk.transpose(0, 1, 3, 2) * scale
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        if add is not None:
            s = s + add
        s = np.exp(s - s.max(-1, keepdims=True))
        return (s / s.sum(-1, keepdims=True)) @ vv

    causal = np.tril(np.ones((5, 5), np.bool_))
    return m, [q, k, v, keep], [attend(0.3, causal), attend(8 ** -0.5, keep),
                                attend(8 ** -0.5, add=bias.astype(np.float64))]


CASES = {f.__name__.rstrip("_"): f for f in [
    shape_chain, range_constant_of_shape, causal_mask, expand_where_compare, gemm, cumsum,
    split, split_opset17, slice_, reduce_norm, reduce_opset17, gather_misc, gather_nd,
    symbolic_dims,
    gelu_opset20, softplus_tile, gather_elements_axes, conv_pad_lse, cumsum_runtime,
    rotary_buffer, onehot_argmax_mod, tied_and_merged, backwards, scatter_nd_box, opset13,
    rms_norm_opset23, attention_opset23]}


def write_case(name, out):
    m, inputs, expected = CASES[name]()
    onnx.save(m, os.path.join(out, "model.onnx"))
    for i, a in enumerate(inputs):
        np.save(os.path.join(out, "in%d.npy" % i), a)
    for i, e in enumerate(expected):
        e = np.asarray(e)
        if e.dtype == np.float64:
            e = e.astype(np.float32)
        np.save(os.path.join(out, "expected%d.npy" % i), e)


def write_errors(out):
    x = vi("x", F32, [2, 3])
    y = vi("y", F32, None)
    onnx.save(model([helper.make_node("Col2Im", ["x", "s", "s"], ["y"], name="fold")], [x], [y],
                    [ints("s", [1, 1])]), os.path.join(out, "col2im.onnx"))
    custom = model([helper.make_node("FusedThing", ["x"], ["y"], name="fused", domain="com.example")],
                   [x], [y])
    custom.opset_import.append(helper.make_opsetid("com.example", 3))
    onnx.save(custom, os.path.join(out, "custom_domain.onnx"))
    onnx.save(model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y], opset=7),
              os.path.join(out, "opset7.onnx"))
    onnx.save(model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                    [vi("x", F32, ["batch", "seq", "heads"])], [y]),
              os.path.join(out, "symbolic.onnx"))
    # A weight stored as external data in a file that is not there.
    w = numpy_helper.from_array(randf(3, 3), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for key, value in [("location", "missing.bin"), ("offset", "0"), ("length", "36")]:
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [x], [y], [w]),
              os.path.join(out, "missing_external.onnx"))
    # The same weight at an offset past the end of a file that exists.
    w.external_data[0].value = "short.bin"
    w.external_data[1].value = "64"
    with open(os.path.join(out, "short.bin"), "wb") as f:
        f.write(b"\0" * 40)
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [x], [y], [w]),
              os.path.join(out, "short_external.onnx"))
    # Reshape whose shape depends on an input's values.
    onnx.save(model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="view")],
                    [x, vi("shape", I64, [2])], [y]), os.path.join(out, "dynamic_reshape.onnx"))
    # A Slice with a step of 0.
    onnx.save(model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="still")],
                    [x], [y], [ints("s", [0]), ints("e", [2]), ints("a", [1]), ints("st", [0])]),
              os.path.join(out, "zero_step.onnx"))
    # LayerNormalization over a dim other than the last.
    onnx.save(model([helper.make_node("LayerNormalization", ["x", "g"], ["y"], name="ln", axis=0)],
                    [x], [y], [numpy_helper.from_array(randf(2, 3), "g")]),
              os.path.join(out, "layernorm_axis.onnx"))
    # An input of a type Loom has no element type for.
    onnx.save(model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                    [vi("x", TensorProto.UINT8, [4])], [vi("y", TensorProto.UINT8, None)]),
              os.path.join(out, "uint8.onnx"))
    # Shapes that do not broadcast.
    onnx.save(model([helper.make_node("Add", ["x", "x3"], ["y"], name="add")],
                    [x, vi("x3", F32, [3, 2])], [y]), os.path.join(out, "broadcast.onnx"))
    # Mixture-of-experts routing: TopK and ScatterElements along the last
    # axis only, TopK's K and ScatterND's indices constant.
    k = vi("k", I64, [1])
    v, i = vi("v", F32, None), vi("i", I64, None)
    onnx.save(model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="route")], [x, k],
                    [v, i]), os.path.join(out, "topk_dynamic_k.onnx"))
    onnx.save(model([helper.make_node("TopK", ["x", "kc"], ["v", "i"], name="route", axis=0)],
                    [x], [v, i], [ints("kc", [1])]), os.path.join(out, "topk_axis0.onnx"))
    onnx.save(model([helper.make_node("TopK", ["x", "kc"], ["v", "i"], name="route")],
                    [x], [v, i], [ints("kc", [9])]), os.path.join(out, "topk_large_k.onnx"))
    idx = vi("idx", I64, [2, 3])
    onnx.save(model([helper.make_node("ScatterElements", ["x", "idx", "x"], ["y"], name="put",
                                      axis=1, reduction="add")], [x, idx], [y]),
              os.path.join(out, "scatter_elements_add.onnx"))
    onnx.save(model([helper.make_node("ScatterND", ["x", "ind", "u"], ["y"], name="assign")],
                    [x, vi("ind", I64, [1, 1]), vi("u", F32, [1, 3])], [y]),
              os.path.join(out, "scatter_nd_dynamic.onnx"))
    onnx.save(model([helper.make_node("ScatterND", ["x", "ind", "u"], ["y"], name="assign")],
                    [x, vi("u", F32, [1, 3])], [y], [numpy_helper.from_array(
                        np.array([[7]], np.int64), "ind")]),
              os.path.join(out, "scatter_nd_out_of_range.onnx"))
    # The routing and shape operators of the TorchScript exporter, used
    # outside what Loom imports.
    onnx.save(model([helper.make_node("OneHot", ["ids", "depth", "v"], ["y"], name="hot")],
                    [vi("ids", I64, [2])], [y],
                    [ints("depth", [4]), numpy_helper.from_array(np.zeros(3, np.float32), "v")]),
              os.path.join(out, "onehot_values.onnx"))
    onnx.save(model([helper.make_node("ArgMax", ["x"], ["y"], name="best", select_last_index=1)],
                    [x], [vi("y", I64, None)]), os.path.join(out, "argmax_last.onnx"))
    onnx.save(model([helper.make_node("Mod", ["x", "x"], ["y"], name="rem", fmod=1)], [x], [y]),
              os.path.join(out, "mod_float.onnx"))
    onnx.save(model([helper.make_node("RMSNormalization", ["x"], ["y"], name="norm", axis=0)],
                    [x], [y], opset=23), os.path.join(out, "rms_axis0.onnx"))
    q4 = vi("q", F32, [1, 2, 3, 4])
    onnx.save(model([helper.make_node("Attention", ["q", "q", "q", "", "q", "q"], ["y"],
                                      name="cached")], [q4], [y], opset=23),
              os.path.join(out, "attention_cache.onnx"))
    # Cos of a value computed from the input: Loom has no cos op.
    onnx.save(model([helper.make_node("Cos", ["x"], ["y"], name="cos")], [x], [y]),
              os.path.join(out, "cos_of_input.onnx"))
    # Random bytes (fixed seed) that protobuf cannot parse.
    with open(os.path.join(out, "random.onnx"), "wb") as f:
        f.write(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    open(os.path.join(out, "empty.onnx"), "wb").close()


def main():
    name, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    if name == "errors":
        write_errors(out)
    else:
        write_case(name, out)


if __name__ == "__main__":
    main()

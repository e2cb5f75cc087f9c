#!/usr/bin/python3
"""Writes the kernel conformance cases (test/unit/conformance/Inputs/*.json).

Every kernel of runtime/abi/Kernels.def gets one or more cases: inputs,
attributes and expected outputs. The expected outputs are computed here,
independently of Loom's kernels, in NumPy float64 (then rounded once to the
output's dtype), from each kernel's contract in Kernels.def, on edge shapes:
size-1 and odd dims, scalars, empty tensors, broadcasting, negative and large
values, ignore_index, causal grouped-query attention with Skv != S, ...
The gradients' references are checked here against central finite
differences of the float64 forward references before they are written.

Regenerate (NumPy only; the output is deterministic):
    /usr/bin/python3 test/unit/conformance/make_cases.py
and commit Inputs/. LoomConformanceTests (ConformanceTests.cpp) reads them.

File format: one JSON file per kernel, Inputs/<kernel>.json:
  {"kernel": "nn.add", "cases": [case, ...]}
  case = {"name": str,
          "attrs": [{"name": str, "int"|"f64"|"str"|"ints"|"f64s": value}],
          "inputs": [{"dtype": str, "shape": [int], "data": base64}],
          "outputs": [{"dtype": str, "shape": [int], "expected": base64,
                       "alias": input index (optional: the output is written
                       into that input's buffer, as in-place kernels are)}],
          "exact": bool (optional: compare bit for bit, NaN == NaN),
          "unsupported": {backend: reason} (optional: a known gap of that
                         backend, which must then reject the case with an
                         error; the test prints the gap),
          "rtol", "atol": float (optional: override the per-dtype tolerance)}
  Tensors are little-endian, row-major, in their dtype's storage (bf16/f16 as
  16-bit patterns, f8 as bytes, i1 as one byte 0/1).
"""

import base64
import json
import math
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
OUT_DIR = os.path.join(HERE, "Inputs")

# ---------------------------------------------------------------------------
# Float formats: rounding from float64 (once, to nearest, ties to even) and
# the storage bits. Independent of runtime/support/FloatTypes.cpp.

FORMATS = {
    # name: (mantissa bits, smallest normal exponent, largest finite, has inf)
    "bf16": (7, -126, (2 - 2.0**-7) * 2.0**127, True),
    "f16": (10, -14, 65504.0, True),
    "f8E4M3FN": (3, -6, 448.0, False),
    "f8E5M2": (2, -14, 57344.0, True),
}
STORAGE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16,
           "f8E4M3FN": np.uint8, "f8E5M2": np.uint8, "i64": np.int64, "i32": np.int32,
           "i1": np.uint8}
FLOATS = ("f32", "f64", "f16", "bf16", "f8E4M3FN", "f8E5M2")


def round_to(x, dtype):
    """x (float64 array) rounded once to `dtype`, returned as float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "f64":
        return x.copy()
    if dtype == "f32":
        with np.errstate(over="ignore"):
            return x.astype(np.float32).astype(np.float64)
    mant, emin, maxf, has_inf = FORMATS[dtype]
    out = np.empty_like(x)
    finite = np.isfinite(x)
    _, e = np.frexp(np.where(finite, x, 1.0))
    exp = np.maximum(e.astype(np.int64) - 1, emin)  # the value's binade
    quantum = np.ldexp(1.0, exp - mant)
    r = np.rint(np.where(finite, x, 0.0) / quantum) * quantum
    r = np.copysign(r, x)
    over = np.abs(r) > maxf
    if has_inf:
        r = np.where(over, np.copysign(np.inf, x), r)
        r = np.where(np.isinf(x), x, r)
    else:
        r = np.where(over | np.isinf(x), np.nan, r)
    r = np.where(np.isnan(x), np.nan, r)
    out[...] = r
    return out


def f8_bits(v, dtype):
    """Storage bytes of f8 values already exactly representable."""
    mant, emin, _, _ = FORMATS[dtype]
    bias = 7 if dtype == "f8E4M3FN" else 15
    flat = v.reshape(-1)
    bits = np.zeros(flat.shape, np.uint8)
    for i, val in enumerate(flat):
        sign = 0x80 if math.copysign(1.0, val) < 0 else 0
        a = abs(val)
        if math.isnan(val):
            bits[i] = sign | (0x7F if dtype == "f8E4M3FN" else 0x7E)
        elif math.isinf(val):
            bits[i] = sign | 0x7C
        elif a == 0:
            bits[i] = sign
        else:
            m, e = math.frexp(a)
            E = e - 1
            if E < emin:
                field, frac = 0, a / 2.0 ** (emin - mant)
            else:
                field, frac = E + bias, (a / 2.0**E - 1) * 2**mant
            assert frac == int(frac), (val, dtype)
            bits[i] = sign | (field << mant) | int(frac)
    return bits.reshape(v.shape)


def to_bytes(values, dtype):
    v = np.asarray(values)
    if dtype in ("i64", "i32"):
        return np.asarray(v, dtype=STORAGE[dtype]).tobytes()
    if dtype == "i1":
        return (np.asarray(v) != 0).astype(np.uint8).tobytes()
    v = round_to(v, dtype)
    if dtype == "f32":
        return v.astype(np.float32).tobytes()
    if dtype == "f64":
        return v.astype(np.float64).tobytes()
    if dtype == "f16":
        return v.astype(np.float16).tobytes()
    if dtype == "bf16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return f8_bits(v, dtype).tobytes()


# ---------------------------------------------------------------------------
# Case construction.

CASES = {}  # kernel -> list of cases


class T:
    """A tensor: its dtype and its values (float64 for floats, exact ints)."""

    def __init__(self, dtype, values):
        self.dtype = dtype
        if dtype in FLOATS:
            self.values = round_to(np.asarray(values, dtype=np.float64), dtype)
        elif dtype == "i1":
            self.values = (np.asarray(values) != 0).astype(np.int64)
        else:
            self.values = np.asarray(values, dtype=np.int64)

    @property
    def shape(self):
        return list(self.values.shape)


def attr_json(name, value):
    if isinstance(value, bool):
        return {"name": name, "int": int(value)}
    if isinstance(value, (int, np.integer)):
        return {"name": name, "int": int(value)}
    if isinstance(value, float):
        return {"name": name, "f64": value}
    if isinstance(value, str):
        return {"name": name, "str": value}
    if isinstance(value, tuple) and value and value[0] == "f64s":
        return {"name": name, "f64s": [float(x) for x in value[1]]}
    if isinstance(value, (list, tuple)):
        return {"name": name, "ints": [int(x) for x in value]}
    raise TypeError(value)


def b64(data):
    return base64.b64encode(data).decode("ascii")


def add(kernel, name, inputs, outputs, attrs=None, aliases=None, exact=False,
        rtol=None, atol=None, unsupported=None, backend_atol=None, scratch=()):
    """outputs: list of T (the expected results, already in their dtype);
    those whose index is in `scratch` are the kernel's working memory, sized
    but not compared."""
    case = {"name": name,
            "attrs": [attr_json(k, v) for k, v in (attrs or {}).items()],
            "inputs": [{"dtype": t.dtype, "shape": t.shape,
                        "data": b64(to_bytes(t.values, t.dtype))} for t in inputs],
            "outputs": []}
    for i, t in enumerate(outputs):
        out = {"dtype": t.dtype, "shape": t.shape,
               "expected": b64(to_bytes(t.values, t.dtype))}
        if aliases and aliases[i] is not None:
            out["alias"] = aliases[i]
        if i in scratch:
            out["scratch"] = True
        case["outputs"].append(out)
    if exact:
        case["exact"] = True
    if rtol is not None:
        case["rtol"] = rtol
    if atol is not None:
        case["atol"] = atol
    if unsupported:
        case["unsupported"] = unsupported
    if backend_atol:
        case["backend_atol"] = backend_atol
    CASES.setdefault(kernel, []).append(case)


_rng = np.random.default_rng(20240518)


def uniform(shape, lo=-2.0, hi=2.0):
    return _rng.uniform(lo, hi, size=shape)


def away_from_zero(shape, lo=0.1, hi=2.0):
    return _rng.uniform(lo, hi, size=shape) * _rng.choice([-1.0, 1.0], size=shape)


def ints(shape, lo, hi):
    return _rng.integers(lo, hi, size=shape, dtype=np.int64)


def randt(dtype, shape, lo=-2.0, hi=2.0):
    return T(dtype, uniform(shape, lo, hi))


# ---------------------------------------------------------------------------
# Elementwise.

def erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))),
                    np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


UNARY = {
    "nn.neg": lambda x: -x,
    "nn.abs": np.abs,
    "nn.exp": np.exp,
    "nn.log": np.log,
    "nn.sqrt": np.sqrt,
    "nn.rsqrt": lambda x: 1 / np.sqrt(x),
    "nn.reciprocal": lambda x: 1 / x,
    "nn.tanh": np.tanh,
    "nn.erf": erf,
    "nn.sigmoid": sigmoid,
    "nn.silu": lambda x: x * sigmoid(x),
    "nn.relu": lambda x: np.where(x > 0, x, 0.0),
}


def unary(kernel, name, x, fn=None, out_dtype=None, **kw):
    fn = fn or UNARY[kernel]
    with np.errstate(all="ignore"):
        y = fn(x.values)
    add(kernel, name, [x], [T(out_dtype or x.dtype, y)], **kw)


def gen_unary():
    odd = [3, 37]  # 111 elements: no vector width divides it
    # Values on every scale, both signs, and signed zeros.
    mixed = np.concatenate([uniform(101, -3, 3), [0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30,
                                                 65504.0, -7.5, 7.5, 3e38]])
    mixed = mixed.reshape(odd)
    positive = np.concatenate([uniform(104, 0.01, 50), [1e-30, 1e30, 1.0, 4.0, 0.25,
                                                       3e38, 1e-38]]).reshape(odd)
    nonzero = np.concatenate([away_from_zero(105, 0.05, 20), [1e-30, -1e-30, 1e30, -3.0,
                                                            0.5, -0.5]]).reshape(odd)
    unary("nn.neg", "f32_mixed", T("f32", mixed))
    unary("nn.neg", "i64_with_extremes",
          T("i64", [0, 1, -1, 2**62, -(2**63), 2**63 - 1, 12345]),
          fn=lambda v: np.array([(-int(a) + 2**63) % 2**64 - 2**63 for a in v], dtype=np.int64))
    unary("nn.neg", "f32_empty", T("f32", np.zeros((0, 3))))
    unary("nn.abs", "f32_mixed", T("f32", mixed))
    unary("nn.abs", "i64_negative", T("i64", [-5, 0, 7, -(2**40), 3]))
    unary("nn.abs", "bf16_size1_dims", randt("bf16", [1, 1, 9], -4, 4))
    exps = np.concatenate([uniform(100, -20, 20), [0.0, -0.0, 88.0, 89.0, 100.0, -87.0,
                                                  -104.0, -200.0, 1e-7, -1e-7, 10.5]])
    unary("nn.exp", "f32_range_overflow_underflow", T("f32", exps.reshape(odd)))
    unary("nn.exp", "f32_scalar", T("f32", np.array(-1.25)))
    unary("nn.exp", "bf16", randt("bf16", [2, 17], -8, 8))
    logs = positive.copy()
    logs[0, 0] = 0.0  # log(0) = -inf
    unary("nn.log", "f32_positive_and_zero", T("f32", logs))
    unary("nn.log", "f16", T("f16", uniform([5, 3], 0.01, 1000)))
    sq = positive.copy()
    sq[1, 1] = 0.0
    unary("nn.sqrt", "f32_positive_and_zero", T("f32", sq))
    unary("nn.sqrt", "f64", T("f64", uniform([4, 9], 0, 1e6)))
    unary("nn.rsqrt", "f32_positive", T("f32", positive))
    unary("nn.rsqrt", "bf16", T("bf16", uniform([3, 11], 0.001, 100)))
    unary("nn.reciprocal", "f32_nonzero", T("f32", nonzero))
    unary("nn.reciprocal", "f16", T("f16", away_from_zero([7, 5], 0.01, 100)))
    tanhs = np.concatenate([uniform(105, -5, 5), [0.0, -0.0, 20.0, -20.0, 1e-8, 9.0]])
    unary("nn.tanh", "f32", T("f32", tanhs.reshape(odd)))
    unary("nn.tanh", "f64", T("f64", uniform([2, 3, 5], -4, 4)))
    erfs = np.concatenate([uniform(106, -4, 4), [0.0, 6.0, -6.0, 1e-9, -1e-9]])
    unary("nn.erf", "f32", T("f32", erfs.reshape(odd)))
    unary("nn.erf", "bf16", randt("bf16", [1, 33], -3, 3))
    sig = np.concatenate([uniform(105, -10, 10), [0.0, 100.0, -100.0, 80.0, -80.0, 30.0]])
    unary("nn.sigmoid", "f32_extremes", T("f32", sig.reshape(odd)))
    unary("nn.sigmoid", "f16", randt("f16", [4, 5], -12, 12))
    unary("nn.silu", "f32_extremes", T("f32", sig.reshape(odd)))
    unary("nn.silu", "bf16", randt("bf16", [3, 7], -6, 6))
    unary("nn.relu", "f32_mixed", T("f32", mixed))
    unary("nn.relu", "i64", T("i64", [-3, 0, 5, -(2**50), 2**50]))
    unary("nn.relu", "f32_scalar", T("f32", np.array(-0.5)))
    for approx in ("none", "tanh"):
        g = np.concatenate([uniform(105, -6, 6), [0.0, -10.0, 10.0, 1e-6, -1e-6, 3.0]])
        unary("nn.gelu", "f32_" + approx, T("f32", g.reshape(odd)),
              fn=lambda x, a=approx: gelu(x, a), attrs={"approximate": approx})
        unary("nn.gelu", "bf16_" + approx, randt("bf16", [2, 1, 13], -4, 4),
              fn=lambda x, a=approx: gelu(x, a), attrs={"approximate": approx})
    # No attribute: the exact (erf) form.
    unary("nn.gelu", "f32_default_is_erf", randt("f32", [9], -3, 3),
          fn=lambda x: gelu(x, "none"))


def wrap64(v):
    return np.array([(int(a) + 2**63) % 2**64 - 2**63 for a in np.ravel(v)],
                    dtype=np.int64).reshape(np.shape(v))


def binary(kernel, name, a, b, fn, out_dtype=None, **kw):
    with np.errstate(all="ignore"):
        y = fn(np.broadcast_to(a.values, np.broadcast_shapes(a.values.shape, b.values.shape)),
               b.values)
    add(kernel, name, [a, b], [T(out_dtype or a.dtype, y)], **kw)


def trunc_div(a, b):
    out = []
    for x, y in zip(np.ravel(a), np.ravel(b)):
        x, y = int(x), int(y)
        q = abs(x) // abs(y)
        out.append(q if (x < 0) == (y < 0) else -q)
    return wrap64(np.array(out, dtype=object).reshape(np.shape(a)))


def gen_binary():
    ops = {"nn.add": np.add, "nn.sub": np.subtract, "nn.mul": np.multiply,
           "nn.div": np.divide, "nn.maximum": np.maximum, "nn.minimum": np.minimum}
    for kernel, fn in ops.items():
        b = away_from_zero([3, 1], 0.1, 3) if kernel == "nn.div" else uniform([3, 1], -3, 3)
        binary(kernel, "f32_rank3_by_column", randt("f32", [2, 3, 37], -3, 3),
               T("f32", b), fn)
        b2 = away_from_zero([1, 5], 0.5, 4) if kernel == "nn.div" else uniform([1, 5])
        binary(kernel, "f32_both_broadcast", randt("f32", [4, 1]), T("f32", b2), fn)
        binary(kernel, "f32_scalar_rhs", randt("f32", [17], -100, 100),
               T("f32", np.array(-2.5)), fn)
    binary("nn.add", "bf16_row_vector", randt("bf16", [5, 19]), randt("bf16", [19]), np.add)
    binary("nn.add", "f32_large_cancel", T("f32", [1e30, -1e30, 3e38, 1.0]),
           T("f32", [-1e30, 1e30, 3e38, 1e-8]), np.add)
    binary("nn.add", "f32_empty", T("f32", np.zeros((0, 5))), randt("f32", [5]), np.add)
    binary("nn.add", "i64_wraps", T("i64", [2**63 - 1, -(2**63), 5, -7]),
           T("i64", [1, -1, -(2**62), 3]), lambda a, b: wrap64(a.astype(object) + b.astype(object)))
    binary("nn.sub", "f16_broadcast", randt("f16", [3, 1, 4], -10, 10),
           randt("f16", [2, 1], -10, 10), np.subtract)
    binary("nn.sub", "i64", T("i64", [[3, -9, 2**40]]), T("i64", [[10], [-4]]),
           lambda a, b: wrap64(a.astype(object) - b.astype(object)))
    binary("nn.mul", "f64", randt("f64", [3, 7], -1e3, 1e3), randt("f64", [7], -1e3, 1e3),
           np.multiply)
    binary("nn.mul", "i64_wraps", T("i64", [2**40, -3, 7]), T("i64", [2**30, 5, -(2**61)]),
           lambda a, b: wrap64(a.astype(object) * b.astype(object)))
    binary("nn.div", "i64_truncates_toward_zero", T("i64", [7, -7, 7, -7, 0, 2**62, -(2**63)]),
           T("i64", [2, 2, -2, -2, 5, 3, -1]), trunc_div)
    binary("nn.div", "bf16", randt("bf16", [2, 9]), T("bf16", away_from_zero([9], 0.2, 2)),
           np.divide)
    binary("nn.pow", "f32_positive_base", T("f32", uniform([3, 37], 0.01, 4)),
           T("f32", uniform([37], -3, 3)), np.power)
    binary("nn.pow", "f32_negative_base_integer_exponent",
           T("f32", [[-2.0, -1.5, 0.0, 3.0]]), T("f32", [[3.0], [2.0], [0.0]]), np.power)
    binary("nn.pow", "f32_zero_base", T("f32", [0.0, 0.0, 0.0, 2.0]), T("f32", [0.0, -1.0, 2.0, 0.0]),
           np.power)
    binary("nn.div", "f32_by_zero", T("f32", [1.0, -1.0, 0.0, 3.0]), T("f32", [0.0, 0.0, 0.0, -0.0]),
           np.divide)
    binary("nn.pow", "bf16", T("bf16", uniform([4, 5], 0.1, 3)), T("bf16", uniform([4, 5], -2, 2)),
           np.power)
    binary("nn.maximum", "f64_ties", T("f64", [1.0, -2.0, 3.0, -1e300]),
           T("f64", [1.0, -2.0, -3.0, 1e300]), np.maximum)
    binary("nn.minimum", "i64", T("i64", [[-(2**62), 4, 0]]), T("i64", [[3], [-5]]), np.minimum)
    binary("nn.maximum", "i64", T("i64", [[-(2**62), 4, 0]]), T("i64", [[3], [-5]]), np.maximum)


def gen_compare_where_cast():
    base = np.round(uniform([4, 1, 9], -3, 3))  # integral values: ties are common
    rhs = np.round(uniform([3, 9], -3, 3))
    fns = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}
    for pred, fn in fns.items():
        binary("nn.compare", "f32_" + pred, T("f32", base), T("f32", rhs), fn,
               out_dtype="i1", attrs={"predicate": pred})
    binary("nn.compare", "i64_lt_large", T("i64", [2**62, -(2**62), 2**53 + 1, 5]),
           T("i64", [2**62 + 1, -(2**62), 2**53, 5]), np.less, out_dtype="i1",
           attrs={"predicate": "lt"})
    binary("nn.compare", "bf16_ge_scalar", randt("bf16", [2, 7]), T("bf16", np.array(0.25)),
           np.greater_equal, out_dtype="i1", attrs={"predicate": "ge"})
    # where: cond, a, b all broadcast to the output.
    cond = T("i1", ints([3, 1], 0, 2))
    a, b = randt("f32", [2, 3, 11]), randt("f32", [11])
    y = np.where(cond.values.astype(bool), a.values, b.values)
    add("nn.where", "f32_broadcast_all", [cond, a, b], [T("f32", y)])
    cond = T("i1", ints([5, 7], 0, 2))
    a, b = T("i64", ints([5, 7], -10**15, 10**15)), T("i64", np.array(-1))
    add("nn.where", "i64_scalar_rhs", [cond, a, b],
        [T("i64", np.where(cond.values.astype(bool), a.values, b.values))])
    cond = T("i1", ints([1, 13], 0, 2))
    a, b = randt("bf16", [2, 13]), randt("bf16", [2, 1])
    add("nn.where", "bf16", [cond, a, b],
        [T("bf16", np.where(cond.values.astype(bool), a.values, b.values))])
    cond = T("i1", [1, 0, 1])
    a, b = T("i1", [0, 0, 1]), T("i1", [1, 1, 0])
    add("nn.where", "i1", [cond, a, b], [T("i1", [0, 1, 1])])

    # cast: rounding (ties to even), overflow, subnormals, truncation and
    # saturation to integers. Compared exactly.
    specials = [0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 1.005859375, 3.0e38,
                -3.0e38, 1e-40, -1e-40, 65504.0, 65520.0, 65519.99, 6e-8, 2.9e-8,
                448.0, 463.9, 464.0, 464.1, 500.0, -500.0, 0.001953125, 0.0009765625,
                57344.0, 61439.0, 61440.0, 1e-5, 2.5, -2.5, 0.15, 1e10, np.inf, -np.inf]
    src = T("f32", np.concatenate([specials, uniform(29, -20, 20)]).reshape(7, 9))
    for to in ("bf16", "f16", "f8E4M3FN", "f8E5M2", "f64"):
        add("nn.cast", "f32_to_" + to, [src], [T(to, src.values)], exact=True)
    ints_src = T("f32", [0.0, -0.0, 2.7, -2.7, 0.5, -0.5, 2147483520.0, 3e9, -3e9, 1e20,
                         -1e20, np.inf, -np.inf, 7.0, -2147483648.0])
    clamp32 = np.clip(np.trunc(np.nan_to_num(ints_src.values, posinf=3e9, neginf=-3e9)),
                      -2**31, 2**31 - 1)
    add("nn.cast", "f32_to_i32_truncates_saturates", [ints_src], [T("i32", clamp32)],
        exact=True)
    big = T("f64", [9.3e18, -9.3e18, 9.2e18, -1.5, 2**53 + 2.0, 1e300])
    clamp64 = []
    for v in big.values:
        t = math.trunc(v)
        clamp64.append(max(min(t, 2**63 - 1), -(2**63)))
    add("nn.cast", "f64_to_i64_saturates", [big], [T("i64", clamp64)], exact=True)
    i64s = T("i64", [2**24 + 1, 2**53 + 1, -(2**62) - 1, 2**63 - 1, 3, -(2**24) - 3, 16777217])
    # int64 -> f32 rounds once (directly), to nearest even.
    add("nn.cast", "i64_to_f32_rounds_once", [i64s],
        [T("f32", [float(np.float32(int(v))) if abs(int(v)) < 2**53 else
                   float(np.float32(np.longdouble(int(v)))) for v in i64s.values])], exact=True)
    add("nn.cast", "i64_to_i32_wraps", [T("i64", [2**31, -(2**31) - 1, 5, -5, 2**40 + 7])],
        [T("i32", [-(2**31), 2**31 - 1, 5, -5, 7])], exact=True)
    add("nn.cast", "i1_to_f32", [T("i1", [1, 0, 1, 1])], [T("f32", [1.0, 0.0, 1.0, 1.0])],
        exact=True)
    add("nn.cast", "f32_to_i1", [T("f32", [0.0, -0.0, 0.5, -3.0, 1e-40])],
        [T("i1", [0, 0, 1, 1, 1])], exact=True)
    bf = T("bf16", uniform([3, 5], -100, 100))
    add("nn.cast", "bf16_to_f32", [bf], [T("f32", bf.values)], exact=True)
    e5 = T("f8E5M2", uniform([2, 8], -1000, 1000))
    add("nn.cast", "f8E5M2_to_bf16", [e5], [T("bf16", e5.values)], exact=True)
    add("nn.cast", "i32_to_i64", [T("i32", [-(2**31), 2**31 - 1, 0, -1])],
        [T("i64", [-(2**31), 2**31 - 1, 0, -1])], exact=True)


# The dropout hash, from its definition in kernels/cpu/CpuKernels.h:
# uniform(seed, i) = top 24 bits of splitMix64(splitMix64(seed) + i) / 2^24.
M64 = (1 << 64) - 1


def split_mix64(z):
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def dropout_uniform(seed, n):
    s = split_mix64(seed & M64)
    return np.array([(split_mix64((s + i) & M64) >> 40) / 16777216.0 for i in range(n)])


def gen_dropout_iota():
    for name, dtype, shape, p, seed in [("f32_p025", "f32", [8, 37], 0.25, 3),
                                        ("f32_p0_identity", "f32", [5, 3], 0.0, 7),
                                        ("f32_p1_all_dropped", "f32", [2, 9], 1.0, 7),
                                        ("bf16_p05_large_seed", "bf16", [3, 41], 0.5, 2**40 + 17),
                                        ("f32_negative_seed", "f32", [1, 64], 0.1, -5)]:
        x = randt(dtype, shape, -3, 3)
        u = dropout_uniform(seed, x.values.size).reshape(shape)
        scale = 1 / (1 - p) if p < 1 else 0.0
        y = np.where(u >= p, x.values * scale, 0.0)
        add("nn.dropout", name, [x], [T(dtype, y)], attrs={"p": p, "seed": seed})
    def iota(name, dtype, shape, dim, start, step, attrs):
        idx = np.indices(shape)[dim]
        add("nn.iota", name, [], [T(dtype, start + idx * step)], attrs=attrs, exact=True)
    iota("i64_dim1", "i64", [3, 4], 1, 2, 3, {"dim": 1, "start": 2.0, "step": 3.0})
    iota("f32_dim0_fractional", "f32", [5, 2], 0, -1.5, 0.25, {"dim": 0, "start": -1.5,
                                                              "step": 0.25})
    iota("i32_negative_dim_defaults", "i32", [2, 3, 7], 2, 0, 1, {"dim": -1})
    iota("f32_rank1_size1", "f32", [1], 0, 4.0, -2.0, {"dim": 0, "start": 4.0, "step": -2.0})


# ---------------------------------------------------------------------------
# Matmul.

def matmul_ref(a, b, ta, tb):
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def gen_matmul():
    def mm(name, dtype, ashape, bshape, ta=0, tb=0, epilogue=None, bias=None, out=None, **kw):
        a, b = randt(dtype, ashape, -1, 1), randt(dtype, bshape, -1, 1)
        y = matmul_ref(a.values, b.values, ta, tb)
        k = a.values.shape[-2 if ta else -1]
        inputs = [a, b]
        attrs = {"transpose_lhs": ta, "transpose_rhs": tb}
        # An epilogue is the unfused program's nn.add and nn.gelu (tanh): in a
        # narrow dtype each step's result is rounded to it, as those ops' are.
        step = (lambda v: v) if dtype in ("f32", "f64") else (lambda v: round_to(v, dtype))
        if epilogue:
            attrs["epilogue"] = epilogue
            y = step(y)
            if "bias" in epilogue:
                bt = randt(dtype, [y.shape[-1]], -1, 1)
                inputs.append(bt)
                y = step(y + bt.values)
            if "gelu" in epilogue:
                y = gelu(y, "tanh")
        if (out or dtype) == "f32":
            # Accumulated in f32 over k (Kernels.def): |error| <~ k ulps of |a||b| <= 1.
            kw.setdefault("atol", max(1e-6, k * 2.0**-23))
        add("nn.matmul", name, inputs, [T(out or dtype, y)], attrs=attrs, **kw)
    mm("f32_batch_rhs_transposed", "f32", [2, 5, 7], [6, 7], tb=1)
    mm("f32_lhs_transposed", "f32", [7, 5], [7, 3], ta=1)
    mm("f32_both_transposed", "f32", [3, 9, 4], [3, 6, 9], ta=1, tb=1)
    mm("f32_1x1x1", "f32", [1, 1], [1, 1])
    mm("f32_batch_broadcast", "f32", [3, 1, 4, 6], [2, 6, 5])
    mm("f32_tile_edges", "f32", [67, 131], [131, 70])  # past 64x64 tiles, 4x16 micro tiles
    mm("f32_k1_outer_product", "f32", [9, 1], [1, 17])
    mm("bf16", "bf16", [4, 8], [8, 3])
    mm("bf16_odd", "bf16", [2, 13, 37], [37, 11])
    mm("f32_bias", "f32", [5, 7], [7, 3], epilogue="bias")
    mm("f32_gelu", "f32", [6, 5], [5, 9], epilogue="gelu")
    mm("f32_bias_gelu_batched", "f32", [2, 3, 16], [24, 16], tb=1, epilogue="bias_gelu")
    mm("bf16_bias_gelu", "bf16", [2, 6, 16], [24, 16], tb=1, epilogue="bias_gelu")
    mm("f64", "f64", [3, 5], [5, 4],
       unsupported={"cuda": "the CUDA matmul (cuBLASLt) takes f32, bf16 and f16"})
    mm("f32_long_k_blocks", "f32", [3, 600], [600, 5])  # k past the 512-deep blocks
    mm("bf16_long_k_transposed", "bf16", [2, 700], [4, 700], tb=1)
    return mm


def gen_matmul_widened(mm):
    """bf16/f16 operands, the f32 accumulation unrounded (--loom-widen-results).
    Generated last, so the cases before keep their random inputs."""
    mm("bf16_to_f32_wgrad", "bf16", [37, 13], [37, 11], ta=1, out="f32")
    mm("bf16_to_f32_batched", "bf16", [2, 5, 70], [9, 70], tb=1, out="f32")
    mm("f16_to_f32", "f16", [6, 33], [33, 5], out="f32")


def gen_scaled_matmul():
    def smm(name, adt, bdt, odt, m, n, k, sa, sb):
        a = T(adt, uniform([m, k], -3, 3))
        b = T(bdt, uniform([n, k], -3, 3))
        y = (a.values * sa) @ (b.values * sb).T
        # Hopper's FP8 tensor cores keep about 14 bits of the running sum
        # (measured on an H200: 25 of 1536 f32 results off by up to 5e-4;
        # DeepSeek-V3's report says the same of H800s), so CUDA gets
        # 2^-13 of the largest sum of |products| on top of the dtype's
        # tolerance. The CPU kernel accumulates in f32 and gets none.
        bound = float(np.max(np.abs(a.values * sa) @ np.abs(b.values * sb).T)) * 2.0 ** -13
        add("nn.scaled_matmul", name,
            [a, b, T("f32", np.array(sa)), T("f32", np.array(sb))], [T(odt, y)],
            backend_atol={"cuda": bound})
    smm("e4m3_e4m3_to_bf16", "f8E4M3FN", "f8E4M3FN", "bf16", 16, 16, 32, 0.75, 1.5)
    smm("e4m3_e5m2_to_f32", "f8E4M3FN", "f8E5M2", "f32", 32, 48, 64, 0.125, 2.0)
    smm("e5m2_e4m3_to_f16", "f8E5M2", "f8E4M3FN", "f16", 16, 32, 16, 1.0, 0.5)


# ---------------------------------------------------------------------------
# Reductions, softmax, norms.

def gen_reduce():
    def red(kernel, name, x, dims, keepdim, fn, **kw):
        axes = tuple(d % x.values.ndim for d in dims)
        with np.errstate(all="ignore"):
            y = fn(x.values, axis=axes, keepdims=bool(keepdim))
        add(kernel, name, [x], [T(x.dtype, y)], attrs={"dims": dims, "keepdim": keepdim}, **kw)
    fns = {"nn.reduce_sum": np.sum, "nn.reduce_mean": np.mean, "nn.reduce_max": np.max}
    for kernel, fn in fns.items():
        red(kernel, "f32_middle_keepdim", randt("f32", [3, 4, 5]), [1], 1, fn)
        red(kernel, "f32_outer_dims", randt("f32", [3, 7, 5]), [0, 2], 0, fn)
        red(kernel, "f32_all_to_scalar", randt("f32", [2, 37], -5, 5), [0, 1], 0, fn)
        red(kernel, "f32_negative_dim_size1", randt("f32", [6, 1]), [-1], 0, fn)
        red(kernel, "bf16_last", randt("bf16", [3, 129]), [1], 1, fn)
    red("nn.reduce_max", "f32_all_negative", T("f32", uniform([4, 9], -1e6, -1)), [1], 0, np.max)
    red("nn.reduce_max", "i64", T("i64", ints([3, 5], -(2**62), -(2**40))), [0], 0, np.max)
    red("nn.reduce_sum", "i64", T("i64", ints([3, 5], -1000, 1000)), [1], 0, np.sum)
    red("nn.reduce_sum", "f32_cancellation", T("f32", [[1e8, 1.0, -1e8, 1.0]]), [1], 0,
        np.sum)
    red("nn.reduce_sum", "f32_empty_dim_gives_zero", T("f32", np.zeros((3, 0))), [1], 0,
        np.sum)
    red("nn.reduce_mean", "f64", randt("f64", [5, 3, 2]), [0, 1], 1, np.mean)

    def softmax(x, dim):
        m = x.max(axis=dim, keepdims=True)
        e = np.exp(x - m)
        return e / e.sum(axis=dim, keepdims=True)

    def log_softmax(x, dim):
        m = x.max(axis=dim, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(axis=dim, keepdims=True))

    for kernel, fn in (("nn.softmax", softmax), ("nn.log_softmax", log_softmax)):
        def sm(name, x, dim, **kw):
            add(kernel, name, [x], [T(x.dtype, fn(x.values, dim))], attrs={"dim": dim}, **kw)
        sm("f32_last_odd", randt("f32", [3, 37], -5, 5), 1)
        sm("f32_first_dim", randt("f32", [9, 4]), 0)
        sm("f32_middle_negative_dim", randt("f32", [2, 5, 3]), -2)
        sm("f32_large_logits", T("f32", uniform([2, 11], 900, 1000) *
                                 np.array([[1.0], [-1.0]])), 1)
        sm("f32_size1_dim", randt("f32", [4, 1]), 1)
        sm("bf16", randt("bf16", [2, 65], -8, 8), -1)
        sm("f32_empty_rows", T("f32", np.zeros((0, 5))), 1)

    def layer_norm(x, w, b, eps):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        y = (x - mean) / np.sqrt(var + eps)
        if w is not None:
            y = y * w
        if b is not None:
            y = y + b
        return y

    def rms_norm(x, w, eps):
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        return y if w is None else y * w

    def ln(name, dtype, shape, has_w, has_b, eps, offset=0.0, **kw):
        d = shape[-1]
        x = T(dtype, uniform(shape, -2, 2) + offset)
        w = randt(dtype, [d], 0.5, 1.5) if has_w else None
        b = randt(dtype, [d], -1, 1) if has_b else None
        y = layer_norm(x.values, w and w.values, b and b.values, eps)
        attrs = {"epsilon": eps, "has_weight": int(has_w), "has_bias": int(has_b)}
        add("nn.layer_norm", name, [t for t in (x, w, b) if t is not None], [T(dtype, y)],
            attrs=attrs, **kw)
    ln("f32_weight_bias", "f32", [2, 3, 37], True, True, 1e-5)
    ln("f32_plain", "f32", [5, 8], False, False, 1e-5)
    ln("f32_weight_only", "f32", [1, 33], True, False, 1e-3)
    ln("f32_bias_only_d1", "f32", [4, 1], False, True, 1e-5)  # variance 0: y = bias
    ln("f32_offset_mean", "f32", [3, 16], True, True, 1e-5, offset=1000.0)
    ln("bf16", "bf16", [3, 64], True, True, 1e-5)
    ln("f64", "f64", [2, 7], True, True, 1e-12,
       unsupported={"cuda": "the CUDA norms (Normalization.cu) take f32, bf16 and f16"})

    def rms(name, dtype, shape, has_w, eps, **kw):
        x = randt(dtype, shape)
        w = randt(dtype, [shape[-1]], 0.5, 1.5) if has_w else None
        y = rms_norm(x.values, w and w.values, eps)
        add("nn.rms_norm", name, [t for t in (x, w) if t is not None], [T(dtype, y)],
            attrs={"epsilon": eps, "has_weight": int(has_w)}, **kw)
    rms("f32_weight", "f32", [2, 3, 37], True, 1e-6)
    rms("f32_plain", "f32", [4, 5], False, 1e-6)
    rms("f32_d1_large_eps", "f32", [6, 1], True, 0.5)
    rms("f16", "f16", [3, 24], True, 1e-5)
    rms("bf16", "bf16", [2, 96], True, 1e-6)
    x0 = T("f32", np.zeros((2, 4)))
    add("nn.rms_norm", "f32_zero_rows", [x0], [T("f32", np.zeros((2, 4)))],
        attrs={"epsilon": 1e-6, "has_weight": 0})
    return layer_norm, rms_norm


# ---------------------------------------------------------------------------
# Rope and attention.

def rope_tables(seq, dim, interleaved):
    half = dim // 2
    freqs = 1.0 / (10000.0 ** (np.arange(half) / half))
    angles = np.arange(seq)[:, None] * freqs[None, :] + 0.3
    if interleaved:
        angles = np.repeat(angles, 2, axis=1)
    else:
        angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles), np.sin(angles)


def rope_ref(x, c, s, interleaved):
    d = x.shape[-1]
    if interleaved:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        c0, s0 = c[..., 0::2], s[..., 0::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * c0 - x1 * s0
        y[..., 1::2] = x1 * c0 + x0 * s0
        return y
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * c + rot * s


def gen_rope():
    for name, dtype, shape, inter in [("f32_halves", "f32", [1, 2, 5, 6], 0),
                                      ("f32_interleaved", "f32", [2, 3, 4, 8], 1),
                                      ("bf16_halves", "bf16", [1, 1, 7, 16], 0),
                                      ("f32_seq1_rank3", "f32", [3, 1, 2], 1)]:
        x = randt(dtype, shape)
        c, s = rope_tables(shape[-2], shape[-1], inter)
        c, s = T(dtype, c), T(dtype, s)
        add("nn.rope", name, [x, c, s], [T(dtype, rope_ref(x.values, c.values, s.values, inter))],
            attrs={"interleaved": inter})


def gen_rope_transposed():
    """Rope reading [.., S, H, D] (transpose = input) or writing it
    (transpose = result): the rope of the swapped input, or the swap of the
    rope. Generated last, so the cases before keep their inputs."""
    for name, dtype, shape, inter, mode in [
            ("f32_input", "f32", [2, 5, 3, 6], 0, "input"),
            ("bf16_input_odd", "bf16", [1, 7, 3, 16], 0, "input"),
            ("f32_result_interleaved", "f32", [2, 3, 5, 8], 1, "result"),
            ("bf16_result_rank3", "bf16", [2, 9, 4], 0, "result")]:
        x = randt(dtype, shape)
        swap = lambda a: np.swapaxes(a, -3, -2)
        seq = shape[-3] if mode == "input" else shape[-2]
        c, s = rope_tables(seq, shape[-1], inter)
        c, s = T(dtype, c), T(dtype, s)
        if mode == "input":
            y = rope_ref(swap(x.values), c.values, s.values, inter)
        else:
            y = swap(rope_ref(x.values, c.values, s.values, inter))
        add("nn.rope", "transpose_" + name, [x, c, s], [T(dtype, y)],
            attrs={"interleaved": inter, "transpose": mode})


def attention_ref(q, k, v, causal, scale, window=0):
    """Returns out and a closure for the backward pass. A window W (with
    causal) also hides keys j <= i + Skv - S - W."""
    B, Hq, S, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    ke = np.repeat(k, g, axis=1)
    ve = np.repeat(v, g, axis=1)
    scores = np.einsum("bhid,bhjd->bhij", q, ke) * scale
    mask = np.ones((S, Skv), bool)
    if causal:
        i = np.arange(S)[:, None]
        j = np.arange(Skv)[None, :]
        mask = j <= i + (Skv - S)  # ends aligned
        if window:
            mask &= j > i + (Skv - S) - window
    scores = np.where(mask, scores, -np.inf)
    m = scores.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(mask, np.exp(scores - m), 0.0)
    z = e.sum(-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1), 0.0)  # a row with no key: zeros
    out = np.einsum("bhij,bhjd->bhid", p, ve)
    # The row statistics of nn.attention_with_stats: the natural logsumexp
    # of the scaled visible scores, -inf for a row that sees no key.
    with np.errstate(divide="ignore"):
        lse = np.where(z[..., 0] > 0, m[..., 0] + np.log(np.where(z[..., 0] > 0, z[..., 0], 1)),
                       -np.inf)

    def backward(dout):
        dv = np.einsum("bhij,bhid->bhjd", p, dout)
        dp = np.einsum("bhid,bhjd->bhij", dout, ve)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        dq = np.einsum("bhij,bhjd->bhid", ds, ke) * scale
        dk = np.einsum("bhij,bhid->bhjd", ds, q) * scale
        fold = lambda t: t.reshape(B, Hkv, g, *t.shape[2:]).sum(2)
        return dq, fold(dk), fold(dv)
    return out, backward, lse


def check_grad(f, x, dy, analytic, tol=1e-6, samples=12):
    """Asserts analytic = d(sum(f(x) * dy))/dx at a few positions."""
    flat = x.reshape(-1)
    picks = _rng.choice(flat.size, size=min(samples, flat.size), replace=False)
    for i in picks:
        h = 1e-6 * max(1.0, abs(flat[i]))
        xp, xm = flat.copy(), flat.copy()
        xp[i] += h
        xm[i] -= h
        num = ((f(xp.reshape(x.shape)) - f(xm.reshape(x.shape))) * dy).sum() / (2 * h)
        a = analytic.reshape(-1)[i]
        assert abs(num - a) <= tol * (1 + abs(a)), (num, a)


def gen_attention():
    specs = [
        # name, dtype, B, Hq, Hkv, S, Skv, D, Dv, causal, scale
        ("f32_causal_gqa_skv_gt_s", "f32", 1, 4, 2, 5, 7, 8, 8, 1, 0.35),
        ("f32_causal_s_gt_skv_empty_rows", "f32", 2, 2, 1, 6, 4, 8, 8, 1, None),
        ("f32_noncausal_mqa_value_dim", "f32", 1, 3, 1, 4, 9, 8, 5, 0, 0.5),
        ("f32_noncausal_skv1", "f32", 2, 2, 2, 3, 1, 16, 16, 0, None),
        ("f32_causal_square_odd", "f32", 1, 2, 2, 13, 13, 16, 16, 1, None),
        ("bf16_causal_gqa", "bf16", 1, 4, 1, 9, 9, 16, 16, 1, None),
    ]
    for name, dtype, B, Hq, Hkv, S, Skv, D, Dv, causal, scale in specs:
        q = randt(dtype, [B, Hq, S, D])
        k = randt(dtype, [B, Hkv, Skv, D])
        v = randt(dtype, [B, Hkv, Skv, Dv])
        dout = randt(dtype, [B, Hq, S, Dv])
        attrs = {"causal": causal}
        eff = 1 / math.sqrt(D) if scale is None else scale
        if scale is not None:
            attrs["scale"] = scale
        out, backward, _ = attention_ref(q.values, k.values, v.values, causal, eff)
        add("nn.attention", name, [q, k, v], [T(dtype, out)], attrs=attrs)
        dq, dk, dv = backward(dout.values)
        fq = lambda x: attention_ref(x, k.values, v.values, causal, eff)[0]
        fk = lambda x: attention_ref(q.values, x, v.values, causal, eff)[0]
        fv = lambda x: attention_ref(q.values, k.values, x, causal, eff)[0]
        check_grad(fq, q.values, dout.values, dq)
        check_grad(fk, k.values, dout.values, dk)
        check_grad(fv, v.values, dout.values, dv)
        add("nn.attention_grad", name, [q, k, v, dout],
            [T(dtype, dq), T(dtype, dk), T(dtype, dv)], attrs=attrs)


def gen_attention_stats():
    """nn.attention_with_stats (out and lse) and nn.attention_grad_with_stats
    (given the forward's out and lse, the gradients nn.attention_grad gives).
    Beside the small f32 shapes: bf16 with head dim 64 (the tensor-core
    kernels and cuDNN on CUDA), odd lengths, grouped heads, causal with more
    keys than queries."""
    specs = [
        # name, dtype, B, Hq, Hkv, S, Skv, D, Dv, causal, scale, cuda atol of the grads
        ("f32_causal_gqa_skv_gt_s", "f32", 1, 4, 2, 5, 7, 8, 8, 1, 0.35, None),
        ("f32_causal_s_gt_skv_empty_rows", "f32", 2, 2, 1, 6, 4, 8, 8, 1, None, None),
        ("f32_noncausal_mqa_value_dim", "f32", 1, 3, 1, 4, 9, 8, 5, 0, 0.5, None),
        ("f32_causal_square_odd", "f32", 1, 2, 2, 13, 13, 16, 16, 1, None, None),
        ("bf16_causal_gqa", "bf16", 1, 4, 1, 9, 9, 16, 16, 1, None, None),
        ("bf16_causal_gqa_d64_odd", "bf16", 1, 4, 2, 37, 45, 64, 64, 1, None, 0.08),
        ("bf16_noncausal_d128_odd", "bf16", 2, 2, 2, 19, 19, 128, 128, 0, 0.1, 0.08),
    ]
    for name, dtype, B, Hq, Hkv, S, Skv, D, Dv, causal, scale, grad_atol in specs:
        q = randt(dtype, [B, Hq, S, D])
        k = randt(dtype, [B, Hkv, Skv, D])
        v = randt(dtype, [B, Hkv, Skv, Dv])
        dout = randt(dtype, [B, Hq, S, Dv])
        attrs = {"causal": causal}
        eff = 1 / math.sqrt(D) if scale is None else scale
        if scale is not None:
            attrs["scale"] = scale
        out, backward, lse = attention_ref(q.values, k.values, v.values, causal, eff)
        # lse against a second derivation: logaddexp over the visible scores.
        g = Hq // Hkv
        scores = np.einsum("bhid,bhjd->bhij", q.values, np.repeat(k.values, g, axis=1)) * eff
        if causal:
            visible = np.arange(Skv)[None, :] <= np.arange(S)[:, None] + (Skv - S)
            scores = np.where(visible, scores, -np.inf)
        with np.errstate(invalid="ignore"):
            direct = np.logaddexp.reduce(scores, axis=-1)
        assert np.allclose(np.where(np.isfinite(lse), lse, 0), np.where(np.isfinite(lse), direct, 0))
        assert (np.isfinite(lse) == np.isfinite(direct)).all()
        saved_out, saved_lse = T(dtype, out), T("f32", lse)
        add("nn.attention_with_stats", name, [q, k, v], [saved_out, saved_lse], attrs=attrs)
        dq, dk, dv = backward(dout.values)
        add("nn.attention_grad_with_stats", name, [q, k, v, saved_out, saved_lse, dout],
            [T(dtype, dq), T(dtype, dk), T(dtype, dv)], attrs=attrs,
            backend_atol={"cuda": grad_atol} if grad_atol else None)


# ---------------------------------------------------------------------------
# Data movement.

def gen_data_movement():
    table = randt("f32", [10, 5])
    ids = T("i64", [[0, 9, 3], [3, 7, 1]])
    add("nn.embedding", "f32_i64_ids", [table, ids], [T("f32", table.values[ids.values])],
        exact=True)
    ids32 = T("i32", [4])
    add("nn.embedding", "f32_i32_scalar_like_ids", [table, ids32],
        [T("f32", table.values[ids32.values])], exact=True)
    # A block: rows [4, 8) of a table of 10; other ids give zero rows.
    block = randt("bf16", [4, 6])
    bids = T("i64", [[0, 4, 5, 7, 8, 9, 3]])
    rows = np.zeros((1, 7, 6))
    for j, i in enumerate(bids.values[0]):
        if 4 <= i < 8:
            rows[0, j] = block.values[i - 4]
    add("nn.embedding", "bf16_vocab_block", [block, bids], [T("bf16", rows)],
        attrs={"vocab_start": 4}, exact=True)

    def transpose(name, x, perm):
        add("nn.transpose", name, [x], [T(x.dtype, np.transpose(x.values, perm))],
            attrs={"permutation": perm}, exact=True)
    transpose("f32_rank3", randt("f32", [2, 3, 5]), [2, 0, 1])
    transpose("f32_row_to_column", randt("f32", [1, 7]), [1, 0])
    transpose("i64_rank4_heads", T("i64", ints([2, 3, 4, 5], -10**12, 10**12)), [0, 2, 1, 3])
    transpose("bf16_identity", randt("bf16", [3, 3]), [0, 1])
    transpose("f16_odd_2d", randt("f16", [17, 33]), [1, 0])
    transpose("f32_empty", T("f32", np.zeros((0, 3))), [1, 0])

    def bcast(name, x, shape):
        add("nn.broadcast", name, [x], [T(x.dtype, np.broadcast_to(x.values, shape))],
            exact=True)
    bcast("f32_column_to_rank3", randt("f32", [3, 1]), [2, 3, 4])
    bcast("f32_scalar", T("f32", np.array(1.5)), [2, 2])
    bcast("i64_size1", T("i64", [-(2**60)]), [5])
    bcast("bf16_middle", randt("bf16", [2, 1, 3]), [2, 7, 3])
    bcast("i1_row", T("i1", [[1, 0, 1]]), [4, 3])

    def slice_(name, x, starts, strides, limits=None):
        sl = tuple(slice(s, l if limits else None, st)
                   for s, st, l in zip(starts, strides, limits or [None] * len(starts)))
        y = x.values[sl]
        attrs = {"starts": starts, "strides": strides}
        if limits:
            attrs["limits"] = limits
        add("nn.slice", name, [x], [T(x.dtype, y)], attrs=attrs, exact=True)
    slice_("f32_strided_with_limits", randt("f32", [6, 5]), [1, 0], [2, 2], [5, 5])
    slice_("f32_rank3_step3", randt("f32", [2, 10, 7]), [1, 2, 0], [1, 3, 1], [2, 10, 7])
    slice_("i64_single_element", T("i64", ints([4, 4], -99, 99)), [3, 2], [1, 1], [4, 3])
    slice_("bf16_unit_strides", randt("bf16", [5, 9]), [0, 4], [1, 1], [5, 9])

    def concat(name, pieces, dim):
        add("nn.concat", name, pieces,
            [T(pieces[0].dtype, np.concatenate([p.values for p in pieces], axis=dim))],
            attrs={"dim": dim}, exact=True)
    concat("f32_three_pieces_dim1", [randt("f32", [2, 3]), randt("f32", [2, 1]),
                                     randt("f32", [2, 2])], 1)
    concat("i64_dim0", [T("i64", ints([1, 3], -5, 5)), T("i64", ints([4, 3], -5, 5))], 0)
    concat("f32_negative_dim_with_empty_piece",
           [randt("f32", [2, 2, 3]), T("f32", np.zeros((2, 2, 0))), randt("f32", [2, 2, 5])], -1)
    concat("bf16_single_piece", [randt("bf16", [3, 4])], 0)

    def split(name, x, sizes, dim):
        cuts = np.cumsum(sizes)[:-1]
        parts = np.split(x.values, cuts, axis=dim)
        add("nn.split", name, [x], [T(x.dtype, p) for p in parts], attrs={"dim": dim},
            exact=True)
    split("f32_dim0", randt("f32", [5, 2]), [2, 3], 0)
    split("f32_three_last_dim", randt("f32", [2, 3, 9]), [4, 1, 4], -1)
    split("i64_middle", T("i64", ints([2, 6, 2], -9, 9)), [3, 3], 1)
    split("f16_size1_pieces", randt("f16", [3, 2]), [1, 1, 1], 0)

    def gather(name, data, idx, axis):
        resolved = np.where(idx.values < 0, idx.values + data.values.shape[axis], idx.values)
        y = np.take(data.values, resolved, axis=axis)
        add("nn.gather", name, [data, idx], [T(data.dtype, y)], attrs={"axis": axis},
            exact=True)
    gather("f32_axis1_negative_indices", randt("f32", [3, 6]), T("i32", [5, -1, 0, -6, 2]), 1)
    gather("f32_axis0_2d_indices", randt("f32", [7, 3]), T("i64", [[0, 6], [3, 3]]), 0)
    gather("i64_last_axis", T("i64", ints([2, 3, 4], -10**15, 10**15)), T("i64", [3, 0]), -1)
    gather("bf16_scalar_index", randt("bf16", [4, 5]), T("i64", np.array(2)), 0)
    gather("f32_no_indices", randt("f32", [4, 5]), T("i32", np.zeros(0, np.int64)), 1)

    def pad(name, x, low, high, interior, value):
        shape = [l + h + n + max(n - 1, 0) * i
                 for l, h, n, i in zip(low, high, x.values.shape, interior)]
        y = np.full(shape, value, dtype=np.float64 if x.dtype in FLOATS else np.int64)
        sl = tuple(slice(l, l + (n - 1) * (i + 1) + 1 if n else l, i + 1)
                   for l, n, i in zip(low, x.values.shape, interior))
        y[sl] = x.values
        add("nn.pad", name, [x], [T(x.dtype, y)],
            attrs={"low": low, "high": high, "interior": interior, "value": float(value)},
            exact=True)
    pad("f32_interior", randt("f32", [2, 3]), [1, 0], [1, 2], [0, 1], 0.0)
    pad("f32_value", randt("f32", [3]), [2], [0], [2], -1.5)
    pad("i64_value", T("i64", ints([2, 2], -5, 5)), [0, 1], [1, 0], [1, 1], 7)
    pad("bf16_no_padding", randt("bf16", [2, 5]), [0, 0], [0, 0], [0, 0], 0.0)
    pad("f32_size1_dims", randt("f32", [1, 1, 2]), [1, 0, 0], [0, 2, 1], [3, 3, 1], 2.0)


# ---------------------------------------------------------------------------
# Losses.

def ce_rows(logits, labels):
    m = logits.max(1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(1, keepdims=True)))[:, 0]
    safe = np.clip(labels, 0, logits.shape[1] - 1)
    return lse - logits[np.arange(len(labels)), safe]


def ce_reduce(rows, valid, reduction):
    rows = np.where(valid, rows, 0.0)
    if reduction == "none":
        return rows
    total = rows.sum()
    if reduction == "mean":
        return np.array(total / valid.sum() if valid.sum() else 0.0)
    return np.array(total)


def ce_grad(logits, labels, valid, dloss, reduction, start=0, stats=None):
    if stats is None:
        m = logits.max(1, keepdims=True)
        z = np.exp(logits - m).sum(1, keepdims=True)
    else:
        m, z = stats
    p = np.exp(logits - m) / z
    onehot = (np.arange(logits.shape[1])[None, :] + start) == labels[:, None]
    if reduction == "none":
        w = dloss
    elif reduction == "sum":
        w = np.full(len(labels), float(dloss))
    else:
        w = np.full(len(labels), float(dloss) / valid.sum() if valid.sum() else 0.0)
    return np.where(valid[:, None], w[:, None] * (p - onehot), 0.0)


def gen_losses():
    specs = [
        # name, dtype, N, C, label dtype, ignore_index, reduction, ignored rows
        ("f32_mean_ignored", "f32", 6, 7, "i64", -100, "mean", [2]),
        ("f32_sum_i32", "f32", 5, 37, "i32", -100, "sum", [0, 4]),
        ("f32_none", "f32", 4, 3, "i64", -100, "none", [1]),
        ("f32_all_ignored_mean_is_zero", "f32", 3, 5, "i64", -1, "mean", [0, 1, 2]),
        ("f32_ignore_index_is_a_class", "f32", 8, 4, "i64", 3, "mean", []),
        ("f32_single_class", "f32", 3, 1, "i64", -100, "sum", []),
        ("bf16_large_logits_mean", "bf16", 4, 65, "i64", -100, "mean", [3]),
        ("f32_no_rows_mean_is_zero", "f32", 0, 5, "i64", -100, "mean", []),
    ]
    for name, dtype, n, c, ldt, ignore, reduction, ignored in specs:
        scale = 400.0 if "large" in name else 4.0
        logits = randt(dtype, [n, c], -scale, scale)
        labels = ints([n], 0, c)
        for r in ignored:
            labels[r] = ignore
        labels_t = T(ldt, labels)
        valid = labels != ignore
        rows = ce_rows(logits.values, labels)
        loss = ce_reduce(rows, valid, reduction)
        attrs = {"ignore_index": ignore, "reduction": reduction}
        add("nn.cross_entropy", name, [logits, labels_t], [T("f32", loss)], attrs=attrs)
        dloss = T("f32", uniform([n], -1, 1) if reduction == "none" else np.array(0.75))
        grad = ce_grad(logits.values, labels, valid, dloss.values, reduction)
        f = lambda x: ce_reduce(ce_rows(x, labels), valid, reduction)
        check_grad(f, logits.values, dloss.values, grad, tol=1e-5)
        add("nn.cross_entropy_grad", name, [logits, labels_t, dloss], [T(dtype, grad)],
            attrs=attrs)

    # The vocabulary-parallel loss: the classes split into blocks; stats per
    # block, combined into nn.cross_entropy's loss and each block's gradient.
    block_specs = [
        # name, dtype, N, block widths, label dtype, ignored rows, reduction
        ("f32_two_blocks_mean", "f32", 6, [4, 4], "i64", [1], "mean"),
        ("f32_three_uneven_blocks_sum", "f32", 5, [7, 1, 13], "i32", [], "sum"),
        ("f32_one_block_none", "f32", 4, [9], "i64", [2], "none"),
        ("bf16_two_blocks_mean", "bf16", 3, [33, 31], "i64", [], "mean"),
        ("f32_wide_blocks_mean", "f32", 2, [1100, 1500], "i64", [], "mean"),
    ]
    ignore = -100
    for name, dtype, n, widths, ldt, ignored, reduction in block_specs:
        c = sum(widths)
        logits = randt(dtype, [n, c], -6, 6)
        labels = ints([n], 0, c)
        for r in ignored:
            labels[r] = ignore
        labels_t = T(ldt, labels)
        valid = labels != ignore
        starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
        stats = []
        for s, w in zip(starts, widths):
            blk = T(dtype, logits.values[:, s:s + w])
            m = blk.values.max(1)
            z = np.exp(blk.values - m[:, None]).sum(1)
            here = valid & (labels >= s) & (labels < s + w)
            tgt = np.where(here, blk.values[np.arange(n), np.clip(labels - s, 0, w - 1)], 0.0)
            st = T("f32", np.stack([m, z, tgt], 1))
            stats.append(st)
            add("nn.cross_entropy_stats", "%s_block%d" % (name, s), [blk, labels_t], [st],
                attrs={"vocab_start": int(s), "ignore_index": ignore})
        all_stats = T("f32", np.concatenate([s.values for s in stats], 1))
        # combine, from the f32 statistics as the kernel gets them.
        sv = all_stats.values.reshape(n, len(widths), 3)
        M = sv[:, :, 0].max(1)
        Z = (sv[:, :, 1] * np.exp(sv[:, :, 0] - M[:, None])).sum(1)
        rows = M + np.log(Z) - sv[:, :, 2].sum(1)
        loss = ce_reduce(rows, valid, reduction)
        # The combined loss is nn.cross_entropy's (up to the f32 statistics).
        ref = ce_reduce(ce_rows(logits.values, labels), valid, reduction)
        assert np.allclose(loss, ref, rtol=1e-5, atol=1e-5), (loss, ref)
        add("nn.cross_entropy_combine", name, [all_stats, labels_t], [T("f32", loss)],
            attrs={"ignore_index": ignore, "reduction": reduction})
        dloss = T("f32", uniform([n], -1, 1) if reduction == "none" else np.array(1.25))
        full = ce_grad(logits.values, labels, valid, dloss.values, reduction)
        for s, w in zip(starts, widths):
            blk = T(dtype, logits.values[:, s:s + w])
            g = ce_grad(blk.values, labels, valid, dloss.values, reduction, start=s,
                        stats=(M[:, None], Z[:, None]))
            assert np.allclose(g, full[:, s:s + w], rtol=1e-4, atol=1e-6)
            add("nn.cross_entropy_block_grad", "%s_block%d" % (name, s),
                [blk, labels_t, dloss, all_stats], [T(dtype, g)],
                attrs={"vocab_start": int(s), "ignore_index": ignore, "reduction": reduction})


# ---------------------------------------------------------------------------
# Optimizer and backward kernels.

def adamw_ref(p, g, m, v, lr, step, beta1, beta2, eps, decay):
    m1 = beta1 * m + (1 - beta1) * g
    v1 = beta2 * v + (1 - beta2) * g * g
    mhat = m1 / (1 - beta1**step)
    vhat = v1 / (1 - beta2**step)
    p1 = p - lr * (decay * p + mhat / (np.sqrt(vhat) + eps))
    return p1, m1, v1


def gen_optimizer():
    def group(shape, gscale=1.0):
        return (randt("f32", shape), T("f32", uniform(shape, -1, 1) * gscale),
                randt("f32", shape, -0.1, 0.1), T("f32", uniform(shape, 0, 0.05)))
    for name, shape, lr, step, hyper, gscale in [
            ("f32_step3_decay", [4, 3], 0.01, 3.0, (0.9, 0.95, 1e-8, 0.1), 1.0),
            ("f32_step1_no_decay", [37], 1e-3, 1.0, (0.9, 0.999, 1e-8, 0.0), 1.0),
            ("f32_large_grads_late_step", [2, 1, 5], 3e-4, 1000.0, (0.8, 0.99, 1e-6, 0.01), 1e4),
            ("f32_scalar_param", [], 0.1, 2.0, (0.5, 0.5, 1e-3, 0.5), 1.0)]:
        p, g, m, v = group(shape, gscale)
        lr_t, step_t = T("f32", np.array(lr)), T("f32", np.array(step))
        b1, b2, eps, wd = hyper
        outs = adamw_ref(p.values, g.values, m.values, v.values, float(lr_t.values),
                         float(step_t.values), b1, b2, eps, wd)
        add("nn.adamw", name, [p, g, m, v, lr_t, step_t], [T("f32", o) for o in outs],
            attrs={"beta1": b1, "beta2": b2, "epsilon": eps, "weight_decay": wd})
    # adamw_multi: several parameters, updated in place, with and without a
    # gradient scale (applied in f32, as a separate nn.mul would).
    for name, shapes, decays, scale in [
            ("three_params_scaled_in_place", [[4, 3], [37], [1]], [0.1, 0.0, 0.05], 0.37),
            ("one_param_unscaled", [[2, 9]], [0.01], None)]:
        lr_t, step_t = T("f32", np.array(2e-3)), T("f32", np.array(5.0))
        inputs = [lr_t, step_t]
        attrs = {"beta1": 0.9, "beta2": 0.95, "epsilon": 1e-8, "has_scale": int(scale is not None),
                 "weight_decays": ("f64s", decays)}
        if scale is not None:
            inputs.append(T("f32", np.array(scale)))
        outs, aliases = [], []
        for shape, wd in zip(shapes, decays):
            p, g, m, v = group(shape)
            base = len(inputs)
            inputs += [p, g, m, v]
            gv = g.values
            if scale is not None:
                gv = (np.float32(g.values) * np.float32(scale)).astype(np.float64)
            res = adamw_ref(p.values, gv, m.values, v.values, float(lr_t.values),
                            float(step_t.values), 0.9, 0.95, 1e-8, wd)
            outs += [T("f32", r) for r in res]
            aliases += [base, base + 2, base + 3]
        add("nn.adamw_multi", name, inputs, outs, attrs=attrs, aliases=aliases)


def gen_backward(layer_norm, rms_norm):
    def gelu_grad(x, approximate):
        if approximate == "tanh":
            c = math.sqrt(2 / math.pi)
            t = np.tanh(c * (x + 0.044715 * x**3))
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
        return 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)

    def silu_grad(x):
        s = sigmoid(x)
        return s * (1 + x * (1 - s))

    for approx in ("none", "tanh"):
        for name, dtype, shape in [("f32", "f32", [3, 37]), ("bf16", "bf16", [2, 1, 9])]:
            x, dy = randt(dtype, shape, -6, 6), randt(dtype, shape)
            d = gelu_grad(x.values, approx)
            check_grad(lambda t: gelu(t, approx), x.values, dy.values, d * dy.values)
            add("nn.gelu_grad", "%s_%s" % (name, approx), [x, dy], [T(dtype, d * dy.values)],
                attrs={"approximate": approx})
    for name, dtype, shape, lo, hi in [("f32", "f32", [3, 37], -8, 8),
                                       ("f32_extremes", "f32", [2, 3], -90, 90),
                                       ("f16", "f16", [5, 3], -4, 4)]:
        x, dy = randt(dtype, shape, lo, hi), randt(dtype, shape)
        d = silu_grad(x.values) * dy.values
        if "extremes" not in name:
            check_grad(lambda t: t * sigmoid(t), x.values, dy.values, d)
        add("nn.silu_grad", name, [x, dy], [T(dtype, d)])

    def ln_grad(x, dy, w, eps):
        g = dy * w if w is not None else dy
        mean = x.mean(-1, keepdims=True)
        inv = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
        xhat = (x - mean) * inv
        return inv * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))

    def rms_grad(x, dy, w, eps):
        g = dy * w if w is not None else dy
        inv = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
        xhat = x * inv
        return inv * (g - xhat * (g * xhat).mean(-1, keepdims=True))

    for kernel, fwd, grad, eps in (("nn.layer_norm_grad",
                                    lambda x, w, e: layer_norm(x, w, None, e), ln_grad, 1e-5),
                                   ("nn.rms_norm_grad", rms_norm, rms_grad, 1e-6)):
        for name, dtype, shape, has_w in [("f32_weight", "f32", [2, 3, 37], True),
                                          ("f32_plain", "f32", [4, 8], False),
                                          ("f32_d1", "f32", [3, 1], True),
                                          ("bf16_weight", "bf16", [2, 64], True)]:
            x, dy = randt(dtype, shape), randt(dtype, shape)
            w = randt(dtype, [shape[-1]], 0.5, 1.5) if has_w else None
            wv = w.values if w is not None else None
            dx = grad(x.values, dy.values, wv, eps)
            check_grad(lambda t: fwd(t, wv, eps), x.values, dy.values, dx, tol=1e-5)
            add(kernel, name, [t for t in (x, dy, w) if t is not None], [T(dtype, dx)],
                attrs={"epsilon": eps, "has_weight": int(has_w)})

    def scatter_rows(ids, dy, rows, start=0, skip_outside=False):
        out = np.zeros((rows, dy.shape[-1]))
        for i, g in zip(np.ravel(ids), dy.reshape(-1, dy.shape[-1])):
            r = int(i) - start
            if 0 <= r < rows:
                out[r] += g
            else:
                assert skip_outside
        return out
    ids = T("i64", [[1, 9, 1], [0, 1, 9]])
    dy = randt("f32", [2, 3, 4])
    add("nn.embedding_grad", "f32_repeated_ids", [ids, dy],
        [T("f32", scatter_rows(ids.values, dy.values, 10))], attrs={"num_embeddings": 10})
    ids = T("i32", [[0, 6, 7, 8, 9, 7, 2, 8, 6, 6]])
    dy = randt("f32", [1, 10, 5])
    add("nn.embedding_grad", "f32_vocab_block_skips_others", [ids, dy],
        [T("f32", scatter_rows(ids.values, dy.values, 3, start=6, skip_outside=True))],
        attrs={"num_embeddings": 3, "vocab_start": 6})
    ids = T("i64", [3, 3, 3, 0])
    dy = randt("bf16", [4, 7])
    add("nn.embedding_grad", "bf16_rows_without_ids_are_zero", [ids, dy],
        [T("bf16", scatter_rows(ids.values, dy.values, 5))])

    def gather_grad(name, idx, dy, axis, size, dtype="f32"):
        shape = list(dy.values.shape[:axis]) + [size] + \
            list(dy.values.shape[axis + idx.values.ndim:])
        out = np.zeros(shape)
        res = np.where(idx.values < 0, idx.values + size, idx.values)
        moved = np.moveaxis(out, axis, 0)
        flat_dy = dy.values.reshape(dy.values.shape[:axis] + (-1,) +
                                    dy.values.shape[axis + idx.values.ndim:])
        flat_dy = np.moveaxis(flat_dy, axis, 0)
        for p, target in enumerate(np.ravel(res)):
            moved[target] += flat_dy[p]
        add("nn.gather_grad", name, [idx, dy], [T(dtype, out)],
            attrs={"axis": axis, "axis_size": size})
    gather_grad("f32_axis1_repeats_negative", T("i32", [5, -1, 0, 5]), randt("f32", [3, 4]), 1, 6)
    gather_grad("f32_axis0_2d_indices", T("i64", [[0, 6], [3, 0]]), randt("f32", [2, 2, 3]), 0, 7)
    gather_grad("bf16_last_axis", T("i64", [2, 2, 2]), randt("bf16", [2, 3]), 1, 3, "bf16")


def gen_fused():
    """nn.fused: a fusion group's body (runtime/abi/FusedBody.h) run as one call.
    The reference computes each member in float64 and rounds it to the
    member's own dtype, as the members' kernels store them one by one."""
    def ref(r, inputs, values):
        return inputs[int(r[2:])] if r.startswith("%i") else values[int(r[1:])]

    def fused(name, inputs, steps, yields, **kw):
        # steps: (kernel, operand refs, attrs, dtype, shape, fn of the operands' values)
        text, values, types = [], [], []
        for j, (kernel, refs, attrs, dtype, shape, fn) in enumerate(steps):
            args = [ref(r, inputs, values).values for r in refs]
            with np.errstate(all="ignore"):
                y = np.broadcast_to(fn(*args), shape)
            values.append(T(dtype, y))
            attr_text = (" {" + ", ".join("%s = %s" % kv for kv in attrs.items()) + "}"
                         if attrs else "")
            text.append("%%%d = %s(%s)%s : %s[%s];" % (
                j, kernel, ", ".join(refs), attr_text, dtype, ",".join(map(str, shape))))
        body = "(%s) { %s yield %s }" % (
            ", ".join("%s[%s]" % (t.dtype, ",".join(map(str, t.shape))) for t in inputs),
            " ".join(text), ", ".join("%%%d" % y for y in yields))
        add("nn.fused", name, inputs, [values[y] for y in yields], attrs={"body": body}, **kw)

    ident = lambda x: x
    # The SwiGLU of a training step: silu(x) kept for the backward, its
    # product with the gate; 111 elements, so no vector width divides it.
    x, g = randt("f32", [3, 37], -6, 6), randt("f32", [3, 37])
    fused("f32_silu_mul_odd_size", [x, g],
          [("nn.silu", ["%i0"], {}, "f32", [3, 37], UNARY["nn.silu"]),
           ("nn.mul", ["%0", "%i1"], {}, "f32", [3, 37], np.multiply)], [0, 1])
    # Its backward in bf16: 130 elements (16 vectors of 8 and a tail of 2).
    gate, up, x = randt("bf16", [2, 5, 13]), randt("bf16", [2, 5, 13]), randt("bf16", [2, 5, 13], -5, 5)
    s = lambda t: sigmoid(t)
    fused("bf16_mul_silu_grad", [gate, up, x],
          [("nn.mul", ["%i0", "%i1"], {}, "bf16", [2, 5, 13], np.multiply),
           ("nn.silu_grad", ["%i2", "%0"], {}, "bf16", [2, 5, 13],
            lambda t, dy: s(t) * (1 + t * (1 - s(t))) * dy)], [1])
    # Residual adds (three inputs), 1031 elements.
    a, b, c = randt("bf16", [1031]), randt("bf16", [1031]), randt("bf16", [1031])
    fused("bf16_add_add_1031", [a, b, c],
          [("nn.add", ["%i0", "%i1"], {}, "bf16", [1031], np.add),
           ("nn.add", ["%0", "%i2"], {}, "bf16", [1031], np.add)], [1])
    # Scalars, as the clipping's arithmetic.
    p, q, r = T("f32", np.array(0.75)), T("f32", np.array(-1.5)), T("f32", np.array(3.25))
    fused("f32_scalars", [p, q, r],
          [("nn.add", ["%i0", "%i1"], {}, "f32", [], np.add),
           ("nn.mul", ["%0", "%i2"], {}, "f32", [], np.multiply)], [1])
    # Broadcasts, casts between f32, bf16 and f16, an output smaller than the
    # group's shape (exp of [4,1,7] within [4,5,7]) and an intermediate yielded.
    x, w, k = randt("f32", [4, 1, 7]), randt("bf16", [7]), T("f16", np.array(1.375))
    fused("mixed_broadcast_cast_small_output", [x, w, k],
          [("nn.broadcast", ["%i1"], {}, "bf16", [4, 5, 7], ident),
           ("nn.cast", ["%0"], {}, "f32", [4, 5, 7], ident),
           ("nn.add", ["%i0", "%1"], {}, "f32", [4, 5, 7], np.add),
           ("nn.gelu", ["%2"], {"approximate": "tanh"}, "f32", [4, 5, 7],
            lambda t: gelu(t, "tanh")),
           ("nn.cast", ["%3"], {}, "f16", [4, 5, 7], ident),
           ("nn.mul", ["%4", "%i2"], {}, "f16", [4, 5, 7], np.multiply),
           ("nn.exp", ["%i0"], {}, "f32", [4, 1, 7], np.exp)], [5, 6, 2])
    # Every other formula, in f32, broadcasting a column.
    x, col = randt("f32", [2, 3, 9], -3, 3), T("f32", away_from_zero([3, 1], 0.5, 2))
    dgelu_none = lambda t: 0.5 * (1 + erf(t / math.sqrt(2))) + t * np.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
    cst = math.sqrt(2 / math.pi)
    tt = lambda t: np.tanh(cst * (t + 0.044715 * t**3))
    dgelu_tanh = lambda t: 0.5 * (1 + tt(t)) + 0.5 * t * (1 - tt(t)**2) * cst * (1 + 3 * 0.044715 * t * t)
    shape = [2, 3, 9]
    fused("f32_every_formula", [x, col],
          [("nn.sub", ["%i0", "%i1"], {}, "f32", shape, np.subtract),
           ("nn.gelu", ["%0"], {"approximate": "none"}, "f32", shape, lambda t: gelu(t, "none")),
           ("nn.maximum", ["%1", "%i1"], {}, "f32", shape, np.maximum),
           ("nn.minimum", ["%2", "%0"], {}, "f32", shape, np.minimum),
           ("nn.sigmoid", ["%3"], {}, "f32", shape, sigmoid),
           ("nn.tanh", ["%4"], {}, "f32", shape, np.tanh),
           ("nn.neg", ["%5"], {}, "f32", shape, np.negative),
           ("nn.abs", ["%6"], {}, "f32", shape, np.abs),
           ("nn.sqrt", ["%7"], {}, "f32", shape, np.sqrt),
           ("nn.rsqrt", ["%8"], {}, "f32", shape, lambda t: 1 / np.sqrt(t)),
           ("nn.reciprocal", ["%9"], {}, "f32", shape, lambda t: 1 / t),
           ("nn.log", ["%10"], {}, "f32", shape, np.log),
           ("nn.exp", ["%11"], {}, "f32", shape, np.exp),
           ("nn.div", ["%12", "%i1"], {}, "f32", shape, np.divide),
           ("nn.relu", ["%13"], {}, "f32", shape, lambda t: np.where(t > 0, t, 0.0)),
           ("nn.erf", ["%0"], {}, "f32", shape, erf),
           ("nn.pow", ["%7", "%i1"], {}, "f32", shape, np.power),
           ("nn.gelu_grad", ["%0", "%4"], {"approximate": "none"}, "f32", shape,
            lambda t, dy: dgelu_none(t) * dy),
           ("nn.gelu_grad", ["%0", "%2"], {"approximate": "tanh"}, "f32", shape,
            lambda t, dy: dgelu_tanh(t) * dy),
           ("nn.add", ["%14", "%15"], {}, "f32", shape, np.add)],
          [19, 16, 17, 18, 11])
    # Masks: a comparison's i1 result (yielded) selecting between values, and
    # an i1 input doing the same; integral values make ties common.
    x, row, m = T("f32", np.round(uniform([5, 67], -3, 3))), T("f32", np.round(uniform([67], -3, 3))), \
        T("i1", ints([5, 67], 0, 2))
    fused("f32_compare_where_masks", [x, row, m],
          [("nn.compare", ["%i0", "%i1"], {"predicate": "le"}, "i1", [5, 67],
            lambda a, b: (a <= b).astype(np.float64)),
           ("nn.where", ["%0", "%i0", "%i1"], {}, "f32", [5, 67],
            lambda c, a, b: np.where(c != 0, a, b)),
           ("nn.where", ["%i2", "%1", "%i0"], {}, "f32", [5, 67],
            lambda c, a, b: np.where(c != 0, a, b))], [2, 0])
    # f16 storage with a broadcast row, 2*3*11 = 66 elements.
    x, row = randt("f16", [2, 3, 11], -2, 2), randt("f16", [11], 0.5, 2)
    fused("f16_row_broadcast", [x, row],
          [("nn.mul", ["%i0", "%i1"], {}, "f16", [2, 3, 11], np.multiply),
           ("nn.silu", ["%0"], {}, "f16", [2, 3, 11], UNARY["nn.silu"])], [1, 0])


# ---------------------------------------------------------------------------
# Mixture of experts.

def select_rows(x, descending):
    """Each row's stable order along the last dim; NaN ranks above numbers."""
    rows = x.reshape(-1, x.shape[-1]) if x.shape[-1] else x.reshape(0, 0)
    orders = []
    for r in rows:
        keyed = list(range(len(r)))
        def key(i):
            v = r[i]
            nan = isinstance(v, float) and math.isnan(v)
            if descending:
                return (0 if nan else 1, 0 if nan else -v, i)
            return (1 if nan else 0, 0 if nan else v, i)
        orders.append(sorted(keyed, key=key))
    return np.array(orders, dtype=np.int64).reshape(x.shape)


def gen_router():
    """nn.router: the affinities rounded as stored, the choice from them."""
    def router(name, logits, k, bias=None, sigmoid=False, normalize=False, groups=1,
               group_k=1, group_top=2, group_fill=0.0, epsilon=0.0, scale=1.0):
        x = logits.values
        E = x.shape[-1]
        rows = x.reshape(-1, E)
        if sigmoid:
            s = 1.0 / (1.0 + np.exp(-rows))
        else:
            e = np.exp(rows - rows.max(axis=-1, keepdims=True))
            s = e / e.sum(axis=-1, keepdims=True)
        s = round_to(s, logits.dtype)
        c = s + (bias.values if bias is not None else 0.0)
        if groups > 1:
            size = E // groups
            g = c.reshape(-1, groups, size)
            best = np.sort(g, axis=-1)[..., ::-1][..., :group_top].sum(axis=-1)
            kept = select_rows(best, True)[..., :group_k]
            eligible = np.zeros(best.shape, bool)
            np.put_along_axis(eligible, kept, True, axis=-1)
            c = np.where(np.repeat(eligible, size, axis=-1), c, group_fill)
        ids = select_rows(c, True)[..., :k]
        w = np.take_along_axis(s, ids, axis=-1)
        if normalize:
            w = w / (w.sum(axis=-1, keepdims=True) + epsilon)
        w = w * scale
        shape = list(x.shape[:-1]) + [k]
        attrs = {"k": k}
        for key, value, default in (("sigmoid", int(sigmoid), 0), ("normalize", int(normalize), 0),
                                    ("groups", groups, 1), ("group_k", group_k, 1),
                                    ("group_top", group_top, 2)):
            if value != default:
                attrs[key] = value
        for key, value, default in (("group_fill", group_fill, 0.0), ("epsilon", epsilon, 0.0),
                                    ("scale", scale, 1.0)):
            if value != default:
                attrs[key] = float(value)
        inputs = [logits] + ([bias] if bias is not None else [])
        add("nn.router", name, inputs,
            [T(logits.dtype, w.reshape(shape)), T("i64", ids.reshape(shape)),
             T(logits.dtype, s.reshape(x.shape))], attrs=attrs)
    router("f32_softmax_normalized", randt("f32", [7, 8]), 2, normalize=True)
    router("bf16_softmax_rank3", randt("bf16", [2, 5, 6]), 3)
    router("f32_sigmoid_bias_groups", randt("f32", [9, 16]), 4, bias=randt("f32", [16], -0.5, 0.5),
           sigmoid=True, normalize=True, groups=4, group_k=2, epsilon=1e-20, scale=2.5)
    router("f64_sigmoid_groups_of_three", randt("f64", [5, 12]), 3, sigmoid=True, groups=4,
           group_k=3, group_top=3, group_fill=-1.0)
    router("bf16_sigmoid_bias", randt("bf16", [33, 8]), 2, bias=randt("bf16", [8], -0.2, 0.2),
           sigmoid=True, normalize=True)
    router("f32_k_is_experts", randt("f32", [3, 4]), 4, normalize=True)
    router("f32_no_rows", T("f32", np.zeros([0, 8])), 2)


def gen_moe():
    def topk(name, x, k, smallest=False):
        order = select_rows(x.values, not smallest)[..., :k]
        vals = np.take_along_axis(x.values, order, axis=-1)
        attrs = {"k": k}
        if smallest:
            attrs["smallest"] = 1
        add("nn.topk", name, [x], [T(x.dtype, vals), T("i64", order)], attrs=attrs, exact=True)
    topk("f32_router", randt("f32", [6, 8]), 2)
    ties = T("f32", [[1.0, 3.0, 3.0, 2.0, 3.0], [0.5, 0.5, 0.5, 0.5, 0.5]])
    topk("f32_ties_by_position", ties, 3)
    topk("f32_nan_first", T("f32", [[1.0, float("nan"), 2.0, -1.0]]), 2)
    topk("bf16_rank3_smallest", randt("bf16", [2, 3, 7]), 4, smallest=True)
    topk("f64_k_is_n", randt("f64", [3, 4]), 4)

    def sort(name, x, descending=False):
        order = select_rows(x.values, descending)
        vals = np.take_along_axis(x.values, order, axis=-1)
        add("nn.sort", name, [x], [T(x.dtype, vals), T("i64", order)],
            attrs={"descending": 1} if descending else {}, exact=True)
    sort("i64_expert_ids_stable", T("i64", ints([24], 0, 4)), )
    sort("i32_rows_descending", T("i32", ints([3, 9], -5, 5)), descending=True)
    sort("f32_rows", randt("f32", [4, 6]))
    sort("bf16_with_nan", T("bf16", [[0.5, float("nan"), -1.0, 0.5]]))
    sort("i64_empty", T("i64", np.zeros([0], np.int64)))

    def bounds_of(offsets, rows):
        b = [0] + [int(v) for v in offsets]
        return [(b[e], b[e + 1]) for e in range(len(offsets))]

    def grouped(name, x, w, offsets, odtype="i32"):
        S, K = x.values.shape
        E, _, N = w.values.shape
        y = np.zeros((S, N))
        for e, (lo, hi) in enumerate(bounds_of(offsets, S)):
            y[lo:hi] = x.values[lo:hi] @ w.values[e]
        add("nn.grouped_matmul", name, [x, w, T(odtype, offsets)], [T(x.dtype, y)])
    grouped("f32_four_experts", randt("f32", [10, 5]), randt("f32", [4, 5, 3]), [2, 2, 7, 10])
    grouped("f32_rows_past_the_last_offset", randt("f32", [9, 4]), randt("f32", [3, 4, 6]),
            [1, 4, 6], "i64")
    grouped("bf16_one_expert_takes_all", randt("bf16", [6, 8]), randt("bf16", [2, 8, 5]), [0, 6])
    grouped("f32_no_rows", randt("f32", [0, 3]), randt("f32", [2, 3, 2]), [0, 0])

    def grouped_wgrad(name, x, g, offsets, odtype="i32"):
        S, K = x.values.shape
        N = g.values.shape[1]
        E = len(offsets)
        w = np.zeros((E, K, N))
        for e, (lo, hi) in enumerate(bounds_of(offsets, S)):
            w[e] = x.values[lo:hi].T @ g.values[lo:hi]
        add("nn.grouped_matmul_weight_grad", name, [x, g, T(odtype, offsets)],
            [T(x.dtype, w)])
    grouped_wgrad("f32_four_experts", randt("f32", [10, 5]), randt("f32", [10, 3]),
                  [2, 2, 7, 10])
    grouped_wgrad("f32_rows_past_the_last_offset", randt("f32", [9, 4]), randt("f32", [9, 6]),
                  [1, 4, 6], "i64")
    grouped_wgrad("bf16_empty_expert", randt("bf16", [6, 8]), randt("bf16", [6, 5]), [0, 6])

    # A block of the groups (expert parallelism): weight[e] is group
    # group_start + e; rows of the other groups are zero.
    def grouped_block(name, x, w, offsets, start, odtype="i32"):
        S = x.values.shape[0]
        y = np.zeros((S, w.values.shape[2]))
        for e, (lo, hi) in enumerate(bounds_of(offsets, S)[start:start + w.values.shape[0]]):
            y[lo:hi] = x.values[lo:hi] @ w.values[e]
        add("nn.grouped_matmul", name, [x, w, T(odtype, offsets)], [T(x.dtype, y)],
            attrs={"group_start": start})
    grouped_block("f32_first_block", randt("f32", [10, 5]), randt("f32", [2, 5, 3]),
                  [2, 2, 7, 10], 0)
    grouped_block("f32_second_block_with_an_empty_group", randt("f32", [10, 5]),
                  randt("f32", [2, 5, 3]), [3, 3, 3, 10], 2, "i64")
    grouped_block("bf16_middle_block_rows_past_the_last", randt("bf16", [70, 8]),
                  randt("bf16", [2, 8, 66]), [5, 20, 69, 69], 1)

    def grouped_wgrad_block(name, x, g, offsets, start, groups, odtype="i32"):
        S, K = x.values.shape
        w = np.zeros((groups, K, g.values.shape[1]))
        for e, (lo, hi) in enumerate(bounds_of(offsets, S)[start:start + groups]):
            w[e] = x.values[lo:hi].T @ g.values[lo:hi]
        add("nn.grouped_matmul_weight_grad", name, [x, g, T(odtype, offsets)],
            [T(x.dtype, w)], attrs={"group_start": start})
    grouped_wgrad_block("f32_second_block", randt("f32", [10, 5]), randt("f32", [10, 3]),
                        [2, 2, 7, 10], 2, 2)
    grouped_wgrad_block("bf16_middle_block_with_an_empty_group", randt("bf16", [70, 8]),
                        randt("bf16", [70, 66]), [5, 5, 69, 70], 1, 2, "i64")


def kernel_names():
    # Kernels.def is generated by the build (loom-tblgen, from the nn ODS):
    # read it from the build directory, LOOM_BUILD_DIR or ./build.
    build = os.environ.get("LOOM_BUILD_DIR", os.path.join(ROOT, "build"))
    path = os.path.join(build, "runtime", "abi", "Kernels.def")
    if not os.path.exists(path):
        sys.exit("make_cases.py: %s not found: build Loom first (or set LOOM_BUILD_DIR)" % path)
    with open(path) as f:
        return re.findall(r'^LOOM_KERNEL\("([^"]+)"', f.read(), re.M)


def gen_sum_squares():
    """nn.sum_squares_multi (the gradient norm, --loom-fuse-sum-squares): per
    tensor, or their total, as f32; the f64 scratch holds each 32768-element
    chunk's sum of squares, then each tensor's sum (runtime/abi/SumSquares.h)."""
    chunk = 32768
    for name, specs in [("f32_bf16_chunks", [("f32", [4, 3]), ("f32", [70001]), ("bf16", [9, 7])]),
                        ("one_f16", [("f16", [5, 37])])]:
        inputs = [randt(dtype, shape, -3, 3) for dtype, shape in specs]
        partials, sums = [], []
        for t in inputs:
            x = t.values.reshape(-1)
            chunks = [x[i:i + chunk] for i in range(0, x.size, chunk)]
            partials += [float(np.sum(c * c)) for c in chunks]
            sums.append(float(np.sum(x * x)))
        scratch = T("f64", np.array(partials + sums))
        add("nn.sum_squares_multi", name + "_each", inputs,
            [T("f32", np.array(v)) for v in sums] + [scratch], attrs={"total": 0}, rtol=1e-6)
        add("nn.sum_squares_multi", name + "_total", inputs,
            [T("f32", np.array(sum(sums))), scratch], attrs={"total": 1}, rtol=1e-6)


def gen_norm_weight_grad(cases=(("rms_bf16_to_f32", "bf16", "f32", [3, 25, 24], 0),
                                ("layer_f32", "f32", "f32", [70, 13], 1),
                                ("rms_f16", "f16", "f16", [40, 16], 0))):
    """nn.norm_weight_grad (--loom-fuse-norm-weight-grad): dw = the sum over
    rows of dy * xhat (rms_norm's, or layer_norm's with centered = 1); the f32
    scratch holds each row's inverse deviation and mean, then per block of 32
    rows the column sums (runtime/abi/NormWeightGrad.h)."""
    block = 32
    for name, dtype, out_dtype, shape, centered in cases:
        x, dy = randt(dtype, shape), randt(dtype, shape)
        eps = 1e-5
        xv = x.values.reshape(-1, shape[-1])
        dv = dy.values.reshape(-1, shape[-1])
        mean = xv.mean(-1, keepdims=True) if centered else np.zeros((xv.shape[0], 1))
        rstd = 1 / np.sqrt(((xv - mean) ** 2).mean(-1, keepdims=True) + eps)
        prod = dv * (xv - mean) * rstd
        rows = xv.shape[0]
        partials = [prod[b:b + block].sum(0) for b in range(0, rows, block)]
        scratch = np.concatenate([rstd.reshape(-1), mean.reshape(-1)] + partials)
        attrs = {"epsilon": eps}
        if centered:
            attrs["centered"] = 1
        add("nn.norm_weight_grad", name, [x, dy], [T(out_dtype, prod.sum(0)), T("f32", scratch)],
            attrs=attrs, rtol=1e-4, atol=1e-4)


def gen_loss_grad_narrowed(specs=(("f32_to_bf16_mean", "f32", 6, 300, [2]),
                                   ("f32_to_bf16_wide", "f32", 3, 5000, []))):
    """nn.cross_entropy_grad writing a bf16 gradient (--loom-widen-results
    folds the loss gradient's cast from f32 logits): the gradient rounded once
    to bf16. Also called with rows of more than 8192 classes that are whole
    16-byte vectors (the CUDA kernel's vector path)."""
    for name, dtype, n, c, ignored in specs:
        logits = randt(dtype, [n, c], -4, 4)
        labels = ints([n], 0, c)
        for r in ignored:
            labels[r] = -100
        valid = labels != -100
        dloss = T("f32", np.array(0.75))
        grad = ce_grad(logits.values, labels, valid, dloss.values, "mean")
        add("nn.cross_entropy_grad", name, [logits, T("i64", labels), dloss], [T("bf16", grad)],
            attrs={"ignore_index": -100, "reduction": "mean"})


def gen_cast_multi():
    """nn.cast_multi (--loom-fuse-casts): each tensor as nn.cast rounds it."""
    for name, src, dst, shapes in [("f32_to_bf16", "f32", "bf16", [[4, 3], [16390], [37]]),
                                   ("bf16_to_f32", "bf16", "f32", [[5, 7], [9]])]:
        inputs = [randt(src, s, -3, 3) for s in shapes]
        add("nn.cast_multi", name, inputs, [T(dst, t.values) for t in inputs], exact=True)


def gen_linear_cross_entropy():
    """nn.linear_cross_entropy (--loom-fuse-linear-cross-entropy): the loss of
    the logits x w^T (f32) and its gradients dx = g w, dw = g^T x, g the logits'
    gradient rounded to x's type, chunk by chunk of rows (the last chunk
    short); the f32 scratch (runtime/abi/LinearCrossEntropy.h) is working
    memory, sized here and not compared."""
    align = 64

    def up(words):
        return (words + align - 1) // align * align

    for name, dtype, dw_dtype, n, h, v, chunk, ignored, reduction in [
            ("bf16_mean_chunks", "bf16", "f32", 37, 24, 300, 16, [3, 20], "mean"),
            ("bf16_wide_vocab", "bf16", "f32", 9, 40, 9000, 4, [], "mean"),
            ("f32_sum_one_chunk", "f32", "f32", 12, 8, 50, 64, [0], "sum"),
            ("bf16_dw_bf16", "bf16", "bf16", 20, 16, 130, 7, [5], "mean")]:
        x, w = randt(dtype, [n, h], -1, 1), randt(dtype, [v, h], -1, 1)
        labels = ints([n], 0, v)
        for r in ignored:
            labels[r] = -100
        valid = labels != -100
        dloss = T("f32", np.array(0.5))
        logits = x.values.astype(np.float64) @ w.values.astype(np.float64).T
        m = logits.max(-1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True))).reshape(-1)
        rows = lse - logits[np.arange(n), labels.clip(0, v - 1)]
        total = rows[valid].sum()
        loss = total / max(valid.sum(), 1) if reduction == "mean" else total
        g = ce_grad(logits, labels, valid, dloss.values, reduction)
        g = T(dtype, g).values.astype(np.float64)  # rounded to x's type
        dx = g @ w.values.astype(np.float64)
        dw = g.T @ x.values.astype(np.float64)
        c = min(chunk, n)
        grad_words = (c * v * (2 if dtype == "bf16" else 4) + 3) // 4
        words = up(c * v) + up(grad_words) + up(n) + align + (0 if dw_dtype == "f32" else v * h)
        add("nn.linear_cross_entropy", name, [x, w, T("i64", labels), dloss],
            [T("f32", np.array(loss)), T(dtype, dx), T(dw_dtype, dw), T("f32", np.zeros(words))],
            attrs={"ignore_index": -100, "reduction": reduction, "chunk": chunk},
            rtol=2e-2, atol=2e-2, scratch=(3,))


def gen_empty_operands():
    """Operands with no elements (the weights of an expert of size 0 and
    their gradients): a contraction over nothing gives zeros, or the addend;
    a result with no elements is nothing to write. cuBLASLt has no algorithm
    for either; the CUDA backend writes them itself."""
    for name, dtype, ashape, bshape, tb, addend in [
            ("f32_empty_contraction", "f32", [4, 0], [0, 3], 0, False),
            ("bf16_empty_contraction_transposed", "bf16", [2, 5, 0], [6, 0], 1, False),
            ("bf16_empty_contraction_add", "bf16", [4, 0], [3, 0], 1, True),
            ("f32_empty_result", "f32", [0, 8], [8, 3], 0, False),
            ("bf16_empty_columns", "bf16", [5, 8], [0, 8], 1, False)]:
        a, b = randt(dtype, ashape, -1, 1), randt(dtype, bshape, -1, 1)
        y = matmul_ref(a.values.astype(np.float64), b.values.astype(np.float64), 0, tb)
        inputs, attrs = [a, b], {"transpose_lhs": 0, "transpose_rhs": tb}
        if addend:
            c = randt(dtype, list(y.shape), -1, 1)
            inputs.append(c)
            attrs["epilogue"] = "add"
            y = y + c.values
        add("nn.matmul", name, inputs, [T(dtype, y)], attrs=attrs)


def gen_matmul_addend():
    """nn.matmul with epilogue "add" (--loom-fuse-matmul-epilogue folds an add of
    the product's shape: a residual, a running sum of gradients): the CPU
    rounds the product and then adds, as the unfused ops; the GPU adds in f32
    and rounds once (cuBLASLt's beta = 1), within one rounding of it."""
    for name, dtype, out, ashape, bshape, ta, tb in [
            ("bf16_residual", "bf16", "bf16", [2, 9, 24], [16, 24], 0, 1),
            ("f32_batched", "f32", "f32", [3, 5, 7], [3, 7, 6], 0, 0),
            ("bf16_to_f32_wgrad_sum", "bf16", "f32", [40, 12], [40, 20], 1, 0)]:
        a, b = randt(dtype, ashape, -1, 1), randt(dtype, bshape, -1, 1)
        y = matmul_ref(a.values.astype(np.float64), b.values.astype(np.float64), ta, tb)
        c = randt(out, list(y.shape), -1, 1)
        y = y + c.values
        add("nn.matmul", name + "_add", [a, b, c], [T(out, y)],
            attrs={"transpose_lhs": ta, "transpose_rhs": tb, "epilogue": "add"},
            rtol=1e-2, atol=1e-2 if out != "f32" else 1e-4)


def gen_norm_grad_addend(shapes=(("bf16_vec_addend", "bf16", [3, 64], True),
                                 ("f32_odd_addend", "f32", [2, 5, 37], False))):
    """nn.rms_norm_grad / nn.layer_norm_grad with has_addend = 1
    (--loom-fuse-matmul-epilogue folds the residual gradient's add): dx plus
    the addend, on shapes that take the vector path and that do not."""
    def grad(x, dy, w, eps, centered):
        g = dy * w if w is not None else dy
        mean = x.mean(-1, keepdims=True) if centered else 0.0
        inv = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
        xhat = (x - mean) * inv
        gm = g.mean(-1, keepdims=True) if centered else 0.0
        return inv * (g - gm - xhat * (g * xhat).mean(-1, keepdims=True))

    for kernel, centered, eps in (("nn.rms_norm_grad", False, 1e-6),
                                  ("nn.layer_norm_grad", True, 1e-5)):
        for name, dtype, shape, has_w in shapes:
            x, dy, r = randt(dtype, shape), randt(dtype, shape), randt(dtype, shape)
            w = randt(dtype, [shape[-1]], 0.5, 1.5) if has_w else None
            dx = grad(x.values, dy.values, w.values if w is not None else None, eps, centered)
            # The CPU rounds dx to the dtype and then adds (the unfused add).
            step = (lambda v: v) if dtype == "f32" else (lambda v: round_to(v, dtype))
            add(kernel, name, [t for t in (x, dy, w, r) if t is not None],
                [T(dtype, step(dx) + r.values)],
                attrs={"epsilon": eps, "has_weight": int(has_w), "has_addend": 1})


def gen_swiglu():
    """nn.swiglu and nn.swiglu_grad (--loom-fuse-swiglu): each step rounded to
    the dtype as the unfused nn.silu, nn.mul and nn.silu_grad round it; sizes
    that are and are not whole 16-byte vectors."""
    for name, dtype, shape in [("bf16_vectors", "bf16", [4, 64]), ("bf16_tail", "bf16", [3, 37]),
                               ("f32", "f32", [5, 12]), ("f16_odd", "f16", [7])]:
        step = (lambda v: v) if dtype == "f32" else (lambda v: round_to(v, dtype))
        g, u, dy = randt(dtype, shape, -6, 6), randt(dtype, shape), randt(dtype, shape)
        s = step(g.values * sigmoid(g.values))
        h = step(s * u.values)
        add("nn.swiglu", name, [g, u], [T(dtype, s), T(dtype, h)])
        sig = sigmoid(g.values)
        a = step(dy.values * u.values)
        dg = a * sig * (1 + g.values * (1 - sig))
        du = dy.values * s
        add("nn.swiglu_grad", name, [g, u, T(dtype, s), dy], [T(dtype, dg), T(dtype, du)])


def gen_attention_seq_major():
    """The four attention kernels with `seq_major`: bit i stores the call's
    tensor i (inputs, then outputs) as [B, S, H, D] instead of [B, H, S, D];
    the statistics keep theirs. The references are the head-major ones with
    those tensors transposed. Shapes cover the tensor-core and cuDNN paths
    (bf16, head dims 64 and 128) and the fallback (f32, odd sizes)."""
    def sm(t, on):
        return T(t.dtype, np.transpose(t.values, (0, 2, 1, 3))) if on else t

    specs = [
        # name, dtype, B, Hq, Hkv, S, Skv, D, causal, forward mask, grad-with-stats mask, grad mask, cuda atol of the grads
        ("f32_gqa_v_out", "f32", 2, 4, 2, 5, 7, 8, 1, 0b1100, 0b100101100, 0b1001100, None),
        ("f32_all_seq_major", "f32", 1, 2, 1, 6, 6, 16, 1, 0b1111, 0b111101111, 0b1111111, None),
        ("bf16_d64_v_out_odd", "bf16", 1, 4, 2, 37, 37, 64, 1, 0b1100, 0b100101100, 0b1001100, 0.08),
        ("bf16_d128_all", "bf16", 2, 2, 2, 19, 19, 128, 1, 0b1111, 0b111101111, 0b1111111, 0.08),
        # The same problem head-major, after it: a cached cuDNN plan must
        # not be shared across layouts.
        ("bf16_d128_none", "bf16", 2, 2, 2, 19, 19, 128, 1, 0, 0, 0, 0.08),
    ]
    for name, dtype, B, Hq, Hkv, S, Skv, D, causal, fwd, gws, gr, grad_atol in specs:
        name = "seq_major_" + name
        q = randt(dtype, [B, Hq, S, D])
        k = randt(dtype, [B, Hkv, Skv, D])
        v = randt(dtype, [B, Hkv, Skv, D])
        dout = randt(dtype, [B, Hq, S, D])
        eff = 1 / math.sqrt(D)
        out, backward, lse = attention_ref(q.values, k.values, v.values, causal, eff)
        dq, dk, dv = backward(dout.values)
        o, dqT, dkT, dvT = T(dtype, out), T(dtype, dq), T(dtype, dk), T(dtype, dv)
        bit = lambda mask, i: bool(mask >> i & 1)
        fin = [sm(t, bit(fwd, i)) for i, t in enumerate([q, k, v])]
        add("nn.attention", name, fin, [sm(o, bit(fwd, 3))],
            attrs={"causal": causal, "seq_major": fwd})
        add("nn.attention_with_stats", name, fin, [sm(o, bit(fwd, 3)), T("f32", lse)],
            attrs={"causal": causal, "seq_major": fwd})
        atol = {"cuda": grad_atol} if grad_atol else None
        ins = [sm(t, bit(gr, i)) for i, t in enumerate([q, k, v, dout])]
        outs = [sm(t, bit(gr, 4 + i)) for i, t in enumerate([dqT, dkT, dvT])]
        add("nn.attention_grad", name, ins, outs, attrs={"causal": causal, "seq_major": gr},
            backend_atol=atol)
        ins = [sm(t, bit(gws, i)) for i, t in enumerate([q, k, v, o])] + [T("f32", lse),
                                                                          sm(dout, bit(gws, 5))]
        outs = [sm(t, bit(gws, 6 + i)) for i, t in enumerate([dqT, dkT, dvT])]
        add("nn.attention_grad_with_stats", name, ins, outs,
            attrs={"causal": causal, "seq_major": gws}, backend_atol=atol)


def gen_attention_window():
    """The four attention kernels under a sliding window (attr window, with
    causal): each query sees its last W keys. Shapes for the SIMT kernels
    (f32, odd, more keys than queries, GQA), and for the tensor-core ones
    (bf16, head dims 64 and 128) with windows shorter than a key tile and
    spanning several, so whole tiles before the window are skipped; cuDNN
    declines windows, so CUDA runs Loom's own kernels on all of them."""
    specs = [
        # name, dtype, B, Hq, Hkv, S, Skv, D, window, cuda atol of the grads
        ("f32_gqa_square_odd_w3", "f32", 1, 4, 2, 13, 13, 16, 3, None),
        ("f32_skv_gt_s_w4", "f32", 2, 2, 1, 5, 9, 8, 4, None),
        ("f32_window_past_start_w20", "f32", 1, 2, 2, 11, 11, 8, 20, None),
        ("bf16_d64_gqa_w7_odd", "bf16", 1, 4, 2, 37, 45, 64, 7, 0.08),
        ("bf16_d64_w70_tiles", "bf16", 1, 2, 1, 200, 200, 64, 70, 0.08),
        ("bf16_d128_w33_tiles", "bf16", 1, 2, 2, 161, 161, 128, 33, 0.08),
    ]
    for name, dtype, B, Hq, Hkv, S, Skv, D, window, grad_atol in specs:
        name = "window_" + name
        q = randt(dtype, [B, Hq, S, D])
        k = randt(dtype, [B, Hkv, Skv, D])
        v = randt(dtype, [B, Hkv, Skv, D])
        dout = randt(dtype, [B, Hq, S, D])
        eff = 1 / math.sqrt(D)
        attrs = {"causal": 1, "window": window}
        out, backward, lse = attention_ref(q.values, k.values, v.values, 1, eff, window)
        if S <= 13:
            # Against a direct derivation: each row's softmax over its window.
            g = Hq // Hkv
            ke, ve = np.repeat(k.values, g, axis=1), np.repeat(v.values, g, axis=1)
            for i in range(S):
                last = i + Skv - S
                lo = max(0, last - window + 1)
                sc = np.einsum("bhd,bhjd->bhj", q.values[:, :, i], ke[:, :, lo:last + 1]) * eff
                pr = np.exp(sc - sc.max(-1, keepdims=True))
                pr /= pr.sum(-1, keepdims=True)
                assert np.allclose(np.einsum("bhj,bhjd->bhd", pr, ve[:, :, lo:last + 1]),
                                   out[:, :, i])
        dq, dk, dv = backward(dout.values)
        if dtype == "f32":
            fq = lambda x: attention_ref(x, k.values, v.values, 1, eff, window)[0]
            fk = lambda x: attention_ref(q.values, x, v.values, 1, eff, window)[0]
            check_grad(fq, q.values, dout.values, dq)
            check_grad(fk, k.values, dout.values, dk)
        atol = {"cuda": grad_atol} if grad_atol else None
        o = T(dtype, out)
        add("nn.attention", name, [q, k, v], [o], attrs=attrs)
        add("nn.attention_with_stats", name, [q, k, v], [o, T("f32", lse)], attrs=attrs)
        grads = [T(dtype, dq), T(dtype, dk), T(dtype, dv)]
        add("nn.attention_grad", name, [q, k, v, dout], grads, attrs=attrs, backend_atol=atol)
        add("nn.attention_grad_with_stats", name, [q, k, v, o, T("f32", lse), dout], grads,
            attrs=attrs, backend_atol=atol)


def gen_adamw_multi_copies():
    """nn.adamw_multi with attr copies: after the 3 results per parameter, the
    listed parameters' compute copies, the new f32 parameter rounded to the
    copy's type as nn.cast rounds it (once, to nearest even)."""
    def group(shape):
        return (randt("f32", shape), T("f32", uniform(shape, -1, 1)),
                randt("f32", shape, -0.1, 0.1), T("f32", uniform(shape, 0, 0.05)))

    def case(name, params, lr, step, scale, copies, exact=False):
        """params: (p, g, m, v, decay) per parameter; copies: {index: dtype}."""
        lr_t, step_t = T("f32", np.array(lr)), T("f32", np.array(step))
        inputs = [lr_t, step_t]
        if scale is not None:
            inputs.append(T("f32", np.array(scale)))
        outs, aliases, new_params = [], [], []
        for p, g, m, v, wd in params:
            base = len(inputs)
            inputs += [p, g, m, v]
            gv = g.values
            if scale is not None:
                gv = (np.float32(g.values) * np.float32(scale)).astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                res = adamw_ref(p.values, gv, m.values, v.values, float(lr_t.values),
                                float(step_t.values), 0.9, 0.95, 1e-8, wd)
            outs += [T("f32", r) for r in res]
            aliases += [base, base + 2, base + 3]
            new_params.append(outs[-3])
        for i in sorted(copies):
            # nn.cast of the new f32 parameter (already rounded to f32).
            outs.append(T(copies[i], new_params[i].values))
            aliases.append(None)
        attrs = {"beta1": 0.9, "beta2": 0.95, "epsilon": 1e-8,
                 "has_scale": int(scale is not None),
                 "weight_decays": ("f64s", [q[4] for q in params]),
                 "copies": sorted(copies)}
        add("nn.adamw_multi", name, inputs, outs, attrs=attrs, aliases=aliases, exact=exact)

    # (a) Three parameters of odd shapes (one past a CUDA chunk of 16384
    # elements, with a tail past its vectors), bf16 copies of the first and
    # the last, with a gradient scale. Compared at the default tolerances,
    # as the other adamw_multi cases (the bias corrections' pow may differ
    # by an ulp between backends).
    params = [group(s) + (wd,) for s, wd in [([5, 7], 0.1), ([13], 0.0), ([16387], 0.02)]]
    case("copies_bf16_first_and_last_scaled", params, 2e-3, 5.0, 0.37, {0: "bf16", 2: "bf16"})
    # (b) Copies to f16 and to f32 (a plain copy of the new parameter), one
    # parameter each, the first parameter without a copy; no scale.
    params = [group(s) + (wd,) for s, wd in [([3, 3], 0.01), ([2, 1, 9], 0.05), ([11], 0.0)]]
    case("copies_f16_and_f32_unscaled", params, 1e-3, 2.0, None, {1: "f16", 2: "f32"})

    # (c) New parameters exactly halfway between two bf16 (and f16) values,
    # so the rounding mode decides the copy's bits. With zero gradient and
    # moments, lr = 1 and weight decay 1/2, the update is exact in any
    # backend: p' = p - (p / 2 + 0 / (sqrt(0) + eps)) = p / 2, whatever the
    # bias corrections. So the whole case is compared bit for bit.
    def bits_f32(b):
        return np.asarray(b, dtype=np.uint32).view(np.float32).astype(np.float64)

    def zero_moments(values, wd):
        z = np.zeros_like(values)
        return (T("f32", values), T("f32", z), T("f32", z), T("f32", z), wd)

    # bf16 ties: a bf16 pattern, then exactly half an ulp (the f32's low 16
    # bits 0x8000), odd and even mantissas (ties round up and down), both
    # signs, normal and subnormal; then just below and above a tie.
    hi = _rng.integers(0x0000, 0x7F00, size=36, dtype=np.uint32)  # finite bf16
    hi[:4] = [0x3F80, 0x3F81, 0x0000, 0x0001]  # 1 and its odd neighbour, subnormals
    sign = np.where(_rng.random(36) < 0.5, 0x80000000, 0).astype(np.uint32)
    low = np.full(36, 0x8000, dtype=np.uint32)
    low[-4:] = [0x7FFF, 0x8001, 0x7FFF, 0x8001]
    bf16_ties = bits_f32(sign | (hi << 16) | low)
    # f16 ties: an f16 value plus half its ulp (normal, subnormal, and the
    # overflow tie 65520, which rounds to infinity).
    f16_vals = np.abs(_rng.uniform(-1000, 1000, size=20)).astype(np.float16).astype(np.float64)
    f16_vals[:3] = [1.0, 2.0**-24, 65504.0]
    _, e = np.frexp(f16_vals)
    ulp = np.ldexp(1.0, np.maximum(e - 1, -14) - 10)
    f16_ties = (f16_vals + ulp / 2) * np.where(_rng.random(20) < 0.5, -1.0, 1.0)
    below = float(np.nextafter(np.float32(65520), np.float32(0)))  # just below: 65504
    f16_ties = np.append(f16_ties, [below, 2049.0, 2051.0, 2.0**-25, 3 * 2.0**-25])
    # Special values, updated as p' = p (zero decay): the largest f32 and the
    # bf16 overflow tie become infinities in bf16, NaN and infinities give
    # NaN (0 * inf), signed zeros stay.
    fmax = float(np.finfo(np.float32).max)
    specials = np.concatenate([
        [fmax, -fmax, np.nan, np.inf, -np.inf, 0.0, -0.0],
        bits_f32([0x7F7F8000, 0x7F7F7FFF, 0xFF7F8000, 0x00008000, 0x80018000, 0x00017FFF])])
    params = [zero_moments(2 * bf16_ties.reshape(6, 6), 0.5),
              zero_moments(specials, 0.0),
              zero_moments(2 * f16_ties.reshape(5, 5), 0.5)]
    assert all(np.array_equal(q[0].values, v, equal_nan=True) for q, v in
               zip(params, [2 * bf16_ties.reshape(6, 6), specials, 2 * f16_ties.reshape(5, 5)])), \
        "the tie inputs must be exact f32 values"
    case("copies_rounding_ties_exact", params, 1.0, 3.0, None,
         {0: "bf16", 1: "bf16", 2: "f16"}, exact=True)


def gen_fp8():
    """nn.quantize, nn.dequantize, nn.amax and nn.fp8_scale (NNFp8Ops.td):
    tensorwise, rowwise, 1x128 and 128x128 tilings, both formats,
    saturation past the format's largest value, NaN and zeros. Quantize is
    x / scale in f32, clamped, then rounded once; dequantize q * scale in
    f32, then rounded once to the result type."""
    cuda_gap = None
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    def tile_index(shape, tiles):
        if not tiles:
            return np.zeros(shape, dtype=np.int64)
        idx = np.zeros(shape, dtype=np.int64)
        for d, (n, t) in enumerate(zip(shape, tiles)):
            c = np.arange(n) // (n // t)
            view = [1] * len(shape)
            view[d] = n
            idx = idx * t + c.reshape(view)
        return idx

    def amax_ref(x, tiles):
        idx = tile_index(x.shape, tiles).ravel()
        n = int(np.prod(tiles)) if tiles else 1
        out = np.zeros(n)
        v = np.abs(x.ravel())
        for i in range(n):
            sel = v[idx == i]
            out[i] = np.nan if np.isnan(sel).any() else (sel.max() if sel.size else 0.0)
        return out.reshape(tiles if tiles else ())

    def scale_ref(amax, fmt, margin):
        a = amax.astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            s = (a * np.float32(2.0 ** margin)) / np.float32(fmax[fmt])
        s = np.where(a == 0, np.float32(1.0), s)
        s = np.where(np.isfinite(a), s, np.nan)
        return s.astype(np.float64)

    def quantize_ref(x, scale, tiles, fmt):
        idx = tile_index(x.shape, tiles)
        s = np.asarray(scale, dtype=np.float32).ravel()[idx]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v = x.astype(np.float32) / s
        v = np.where(np.isnan(v), v, np.clip(v, -fmax[fmt], fmax[fmt]))
        return round_to(v.astype(np.float64), fmt)

    def dequantize_ref(q, scale, tiles, out_dtype):
        idx = tile_index(q.shape, tiles)
        s = np.asarray(scale, dtype=np.float32).ravel()[idx]
        v = q.astype(np.float32) * s
        return round_to(v.astype(np.float64), out_dtype)

    specs = [
        # name, input dtype, shape, tiling, format, out dtype of dequantize, margin
        ("tensorwise_bf16_e4m3", "bf16", [6, 40], [], "f8E4M3FN", "bf16", 0),
        ("rowwise_f32_e4m3", "f32", [5, 33], [5, 1], "f8E4M3FN", "f32", 1),
        ("tile1x128_bf16_e4m3", "bf16", [3, 256], [3, 2], "f8E4M3FN", "bf16", 0),
        ("block128_bf16_e4m3", "bf16", [256, 128], [2, 1], "f8E4M3FN", "f32", 0),
        ("tensorwise_f16_e5m2", "f16", [7, 9], [], "f8E5M2", "f16", 2),
    ]
    for name, dtype, shape, tiles, fmt, out_dtype, margin in specs:
        x = randt(dtype, shape, -3.0, 3.0)
        amax = amax_ref(x.values, tiles)
        add("nn.amax", name, [x], [T("f32", amax)], exact=True, unsupported=cuda_gap)
        fname = "e4m3" if fmt == "f8E4M3FN" else "e5m2"
        scale = scale_ref(np.asarray(amax), fmt, margin)
        add("nn.fp8_scale", name, [T("f32", amax)], [T("f32", scale)],
            attrs={"format": fname, "margin": margin}, exact=True, unsupported=cuda_gap)
        q = quantize_ref(x.values, scale, tiles, fmt)
        add("nn.quantize", name, [x, T("f32", scale)], [T(fmt, q)], exact=True,
            unsupported=cuda_gap)
        add("nn.dequantize", name, [T(fmt, q), T("f32", scale)],
            [T(out_dtype, dequantize_ref(q, scale, tiles, out_dtype))], exact=True,
            unsupported=cuda_gap)

    # Saturation: a scale that puts values past the largest finite value,
    # NaN passing through, zeros; amax of a tile with a NaN, scale of zero
    # and non-finite amax.
    special = np.array([[0.0, -0.0, 1.0, -1.0, 1000.0, -1000.0, np.nan, 3.5]])
    xs = T("f32", special)
    for fmt in ("f8E4M3FN", "f8E5M2"):
        s = np.array(0.5 if fmt == "f8E4M3FN" else 0.01)
        q = quantize_ref(xs.values, s, [], fmt)
        add("nn.quantize", "saturates_nan_" + fmt, [xs, T("f32", s)], [T(fmt, q)],
            exact=True, unsupported=cuda_gap)
    add("nn.amax", "nan_tile", [xs], [T("f32", amax_ref(xs.values, [1, 2]))], exact=True,
        unsupported=cuda_gap)
    a = np.array([0.0, np.inf, np.nan, 448.0, 1e-30])
    add("nn.fp8_scale", "zero_nonfinite_tiny", [T("f32", a)],
        [T("f32", scale_ref(a, "f8E4M3FN", 0))], attrs={"format": "e4m3"}, exact=True,
        unsupported=cuda_gap)


def gen_fp8_transposed():
    """nn.quantize with its transposed copy (one scale for the tensor), as
    the FP8 pass emits it for the weight-gradient GEMMs: shapes that are and
    are not multiples of the CUDA kernel's 32 x 32 tiles, a batch of
    matrices; and the amax of whole tensors large enough that many thread
    blocks reduce them."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}
    for name, dtype, shape, fmt in [
        ("transposed_bf16_e4m3", "bf16", [64, 96], "f8E4M3FN"),
        ("transposed_odd_f32_e5m2", "f32", [37, 70], "f8E5M2"),
        ("transposed_batched_bf16_e4m3", "bf16", [3, 33, 65], "f8E4M3FN"),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        amax = np.max(np.abs(x.values))
        scale = np.float32(amax) / np.float32(fmax[fmt])
        add("nn.amax", "whole_" + name, [x], [T("f32", np.array(amax))], exact=True)
        v = (x.values.astype(np.float32) / scale).astype(np.float64)
        q = round_to(np.clip(v, -fmax[fmt], fmax[fmt]), fmt)
        add("nn.quantize", name, [x, T("f32", np.array(scale))],
            [T(fmt, q), T(fmt, np.swapaxes(q, -1, -2))], exact=True)
    big = randt("bf16", [512, 1024], -2.0, 2.0)
    add("nn.amax", "whole_bf16_512x1024", [big], [T("f32", np.array(np.max(np.abs(big.values))))],
        exact=True)


def fp8_tile_size(n, t):
    """Elements a tile spans when n elements are cut into t tiles: the
    smallest power of two whose t tiles cover n (runtime/abi/Fp8Tiling.h)."""
    size = 1
    while size * t < n:
        size *= 2
    return size


def gen_fp8_tiled():
    """The tiled FP8 recipes on CUDA's layouts: tiles of a power-of-two size
    with a ragged last tile (runtime/abi/Fp8Tiling.h). nn.scaled_matmul with
    one scale per row (cuBLASLt's outer vectors), 1 x 128 tiles against
    128 x 128 blocks (VEC128 x BLK128x128: the forward and data gradient of
    DeepSeek-V3's blockwise), 1 x 128 tiles on both sides (the weight
    gradient), K and N cut with a ragged last tile; nn.quantize's transposed
    copy with its own tiles; nn.amax over row segments, column tiles and
    blocks."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    tile_size = fp8_tile_size

    def expand(scale, rows, cols):
        """Each element's scale of a tiling of [rows, cols]."""
        scale = np.asarray(scale, dtype=np.float32)
        if scale.ndim == 0:
            return np.full((rows, cols), scale, np.float32)
        r = np.arange(rows) // tile_size(rows, scale.shape[0])
        c = np.arange(cols) // tile_size(cols, scale.shape[1])
        return scale[r[:, None], c[None, :]]

    def scales(shape, rng_lo=0.02, rng_hi=4.0):
        return np.exp2(np.round(uniform(shape, np.log2(rng_lo), np.log2(rng_hi)) * 4) / 4).astype(np.float32)

    def smm(name, adt, bdt, odt, m, n, k, sa_shape, sb_shape):
        a = T(adt, uniform([m, k], -3, 3))
        b = T(bdt, uniform([n, k], -3, 3))
        sa, sb = scales(sa_shape), scales(sb_shape)
        ea, eb = expand(sa, m, k).astype(np.float64), expand(sb, n, k).astype(np.float64)
        y = (a.values * ea) @ (b.values * eb).T
        bound = float(np.max(np.abs(a.values * ea) @ np.abs(b.values * eb).T)) * 2.0 ** -13
        add("nn.scaled_matmul", name, [a, b, T("f32", sa), T("f32", sb)], [T(odt, y)],
            backend_atol={"cuda": bound})
    smm("rowwise_e4m3_to_bf16", "f8E4M3FN", "f8E4M3FN", "bf16", 32, 48, 64, [32, 1], [48, 1])
    smm("rowwise_e5m2_to_f32", "f8E5M2", "f8E4M3FN", "f32", 40, 32, 96, [40, 1], [32, 1])
    smm("blockwise_fwd_ragged_k_to_bf16", "f8E4M3FN", "f8E4M3FN", "bf16", 64, 256, 320,
        [64, 3], [2, 3])
    smm("blockwise_dgrad_ragged_n_to_f32", "f8E5M2", "f8E4M3FN", "f32", 32, 192, 256,
        [32, 2], [2, 2])
    smm("blockwise_wgrad_to_bf16", "f8E4M3FN", "f8E4M3FN", "bf16", 64, 96, 384, [64, 3], [96, 3])

    def q(x, s, fmt):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v = x.astype(np.float32) / s
        return round_to(np.clip(v, -fmax[fmt], fmax[fmt]).astype(np.float64), fmt)

    for name, dtype, shape, st, stt, fmt in [
        ("tiled_transposed_bf16_e4m3", "bf16", [40, 320], [40, 3], [320, 1], "f8E4M3FN"),
        ("rowwise_transposed_f32_e5m2", "f32", [33, 70], [33, 1], [70, 1], "f8E5M2"),
        ("blocks_transposed_bf16_e4m3", "bf16", [256, 192], [2, 2], [2, 2], "f8E4M3FN"),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        s, t = scales(st, 0.004, 0.02), scales(stt, 0.004, 0.02)
        rows, cols = shape
        qd = q(x.values, expand(s, rows, cols), fmt)
        qt = q(x.values.T, expand(t, cols, rows), fmt)
        add("nn.quantize", name, [x, T("f32", s), T("f32", t)], [T(fmt, qd), T(fmt, qt)],
            attrs={"has_transposed_scale": 1}, exact=True)

    x = randt("bf16", [200, 320], -3.0, 3.0)
    for tiles in ([200, 3], [2, 320], [2, 3], [1, 320], [200, 1]):
        tr, tc = tile_size(200, tiles[0]), tile_size(320, tiles[1])
        v = np.abs(x.values)
        out = np.zeros(tiles)
        for i in range(tiles[0]):
            for j in range(tiles[1]):
                out[i, j] = v[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc].max()
        add("nn.amax", "tiles_%dx%d_of_200x320" % tuple(tiles), [x], [T("f32", out)], exact=True)


def gen_amax_paths():
    """nn.amax on CUDA's vector and scalar paths: a whole tensor reduced by
    blocks with a tail past the last 16-byte vector, row segments and column
    tiles of rows whose width is not a multiple of 4 (the scalar paths)
    and of rows whose width is (four columns a thread)."""
    for name, dtype, shape in [("whole_f32_61x517_tail", "f32", [61, 517]),
                               ("whole_bf16_33x1021_tail", "bf16", [33, 1021])]:
        x = randt(dtype, shape, -3.0, 3.0)
        add("nn.amax", name, [x], [T("f32", np.array(np.max(np.abs(x.values))))], exact=True)
    for rows, cols, tiles in [(136, 322, [2, 322]), (136, 322, [136, 3]), (130, 516, [2, 516]),
                              (8, 1028, [8, 9])]:
        x = randt("bf16", [rows, cols], -3.0, 3.0)
        tr, tc = fp8_tile_size(rows, tiles[0]), fp8_tile_size(cols, tiles[1])
        v = np.abs(x.values)
        out = np.zeros(tiles)
        for i in range(tiles[0]):
            for j in range(tiles[1]):
                out[i, j] = v[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc].max()
        add("nn.amax", "tiles_%dx%d_of_%dx%d" % (tiles[0], tiles[1], rows, cols), [x],
            [T("f32", out)], exact=True)


def gen_quantize_sixteen():
    """nn.quantize with its transposed copy on CUDA's 16-element path (rows
    and cols multiples of 16): a batch of matrices under one scale, f32
    rows, and tiles narrower than 16 elements (a scale per element of a
    run)."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    def expand(scale, rows, cols):
        scale = np.asarray(scale, dtype=np.float32)
        if scale.ndim == 0:
            return np.full((rows, cols), scale, np.float32)
        r = np.arange(rows) // (rows // scale.shape[0])
        c = np.arange(cols) // (cols // scale.shape[1])
        return scale[r[:, None], c[None, :]]

    def q(x, s, fmt):
        v = x.astype(np.float32) / s
        return round_to(np.clip(v, -fmax[fmt], fmax[fmt]).astype(np.float64), fmt)

    x = randt("bf16", [2, 32, 48], -3.0, 3.0)
    values = x.values.copy()
    values[0, 0, 1] = -0.0  # keeps its sign through the reciprocal's correction
    x = T("bf16", values)
    s = np.float32(np.max(np.abs(x.values))) / np.float32(448.0)
    qd = q(x.values, s, "f8E4M3FN")
    add("nn.quantize", "sixteen_batched_bf16_e4m3", [x, T("f32", np.array(s))],
        [T("f8E4M3FN", qd), T("f8E4M3FN", np.swapaxes(qd, -1, -2))], exact=True)
    for name, dtype, shape, st, stt, fmt in [
        ("sixteen_narrow_tiles_bf16_e4m3", "bf16", [32, 64], [32, 8], [64, 4], "f8E4M3FN"),
        ("sixteen_rowwise_f32_e5m2", "f32", [48, 80], [48, 1], [80, 1], "f8E5M2"),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        s = np.exp2(np.round(uniform(st, np.log2(0.004), np.log2(0.02)) * 4) / 4).astype(np.float32)
        t = np.exp2(np.round(uniform(stt, np.log2(0.004), np.log2(0.02)) * 4) / 4).astype(np.float32)
        rows, cols = shape
        qd = q(x.values, expand(s, rows, cols), fmt)
        qt = q(x.values.T, expand(t, cols, rows), fmt)
        add("nn.quantize", name, [x, T("f32", s), T("f32", t)], [T(fmt, qd), T(fmt, qt)],
            attrs={"has_transposed_scale": 1}, exact=True)


def gen_quantize_own_scalar_scales():
    """nn.quantize with its transposed copy under a scale of its own, both
    scalars (has_transposed_scale): the copy divided by its scale, not by
    x's, on each of CUDA's paths (16-element runs, 4-wide tiles, the general
    tiled kernel)."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    def q(x, s, fmt):
        v = x.astype(np.float32) / np.float32(s)
        return round_to(np.clip(v, -fmax[fmt], fmax[fmt]).astype(np.float64), fmt)

    for name, dtype, shape, fmt in [
        ("own_scalar_scales_sixteen_bf16_e4m3", "bf16", [32, 48], "f8E4M3FN"),
        ("own_scalar_scales_wide_bf16_e5m2", "bf16", [36, 44], "f8E5M2"),
        ("own_scalar_scales_tiled_f32_e4m3", "f32", [33, 70], "f8E4M3FN"),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        amax = np.float32(np.max(np.abs(x.values)))
        s = np.float32(amax / np.float32(fmax[fmt]))
        t = np.float32(s * np.float32(0.375))  # the copy's own, smaller: some of it saturates
        add("nn.quantize", name, [x, T("f32", np.array(s)), T("f32", np.array(t))],
            [T(fmt, q(x.values, s, fmt)), T(fmt, q(x.values.T, t, fmt))],
            attrs={"has_transposed_scale": 1}, exact=True)


def gen_untested_cuda_paths():
    """CUDA paths no earlier case reached (an audit, 2026-11-29): nn.quantize
    with one scale tiled and the other a scalar, and a batch of matrices
    with the copy's own scales; nn.scaled_matmul with 128 x 128 blocks or a
    scalar on the left against 1 x 128 tiles on the right (BLK128x128 on
    cuBLASLt's B side), and a scalar beside per-row scales; the grouped
    GEMMs' tensor-core kernels (bf16 and f16, K and N multiples of 8): an
    empty first group, a group over 128 rows, a ragged N tile, rows past the
    last offset, a block of the groups (group_start)."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    def expand(scale, rows, cols):
        scale = np.asarray(scale, dtype=np.float32)
        if scale.ndim == 0:
            return np.full((rows, cols), scale, np.float32)
        r = np.arange(rows) // fp8_tile_size(rows, scale.shape[0])
        c = np.arange(cols) // fp8_tile_size(cols, scale.shape[1])
        return scale[r[:, None], c[None, :]]

    def scales(shape, lo=0.004, hi=0.02):
        return np.exp2(np.round(uniform(shape, np.log2(lo), np.log2(hi)) * 4) / 4).astype(np.float32)

    def q(x, s, fmt):
        v = x.astype(np.float32) / s
        return round_to(np.clip(v, -fmax[fmt], fmax[fmt]).astype(np.float64), fmt)

    for name, dtype, shape, st, stt in [
        ("rowwise_scale_scalar_copy_sixteen_bf16", "bf16", [32, 64], [32, 1], []),
        ("scalar_scale_rowwise_copy_tiled_f32", "f32", [33, 70], [], [70, 1]),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        s, t = scales(st), scales(stt)
        rows, cols = shape
        add("nn.quantize", name, [x, T("f32", s), T("f32", t)],
            [T("f8E4M3FN", q(x.values, expand(s, rows, cols), "f8E4M3FN")),
             T("f8E4M3FN", q(x.values.T, expand(t, cols, rows), "f8E4M3FN"))],
            attrs={"has_transposed_scale": 1}, exact=True)
    x = randt("bf16", [2, 33, 65], -3.0, 3.0)
    for name, st, stt in [("batched_rowwise_own_scales_bf16", [2, 33, 1], [2, 65, 1]),
                          ("batched_own_scalar_scales_bf16", [], [])]:
        s, t = scales(st), scales(stt)
        qd = np.stack([q(x.values[b], expand(s[b] if s.ndim else s, 33, 65), "f8E4M3FN")
                       for b in range(2)])
        qt = np.stack([q(x.values[b].T, expand(t[b] if t.ndim else t, 65, 33), "f8E4M3FN")
                       for b in range(2)])
        add("nn.quantize", name, [x, T("f32", s), T("f32", t)],
            [T("f8E4M3FN", qd), T("f8E4M3FN", qt)], attrs={"has_transposed_scale": 1},
            exact=True)

    def smm(name, m, n, k, sa_shape, sb_shape):
        a = T("f8E4M3FN", uniform([m, k], -3, 3))
        b = T("f8E4M3FN", uniform([n, k], -3, 3))
        sa, sb = scales(sa_shape, 0.02, 4.0), scales(sb_shape, 0.02, 4.0)
        ea, eb = expand(sa, m, k).astype(np.float64), expand(sb, n, k).astype(np.float64)
        y = (a.values * ea) @ (b.values * eb).T
        bound = float(np.max(np.abs(a.values * ea) @ np.abs(b.values * eb).T)) * 2.0 ** -13
        add("nn.scaled_matmul", name, [a, b, T("f32", sa), T("f32", sb)], [T("bf16", y)],
            backend_atol={"cuda": bound})
    smm("blocks_lhs_tiles_rhs_to_bf16", 256, 64, 256, [2, 2], [64, 2])
    smm("scalar_lhs_tiles_rhs_to_bf16", 256, 64, 256, [], [64, 2])
    smm("scalar_lhs_rowwise_rhs_to_bf16", 32, 48, 64, [], [48, 1])

    def bounds_of(offsets):
        b = [0] + [int(v) for v in offsets]
        return [(b[e], b[e + 1]) for e in range(len(offsets))]

    def grouped(name, x, w, offsets, start=0, transpose=False):
        S = x.values.shape[0]
        y = np.zeros((S, w.values.shape[1 if transpose else 2]))
        for e, (lo, hi) in enumerate(bounds_of(offsets)[start:start + w.values.shape[0]]):
            we = w.values[e].T if transpose else w.values[e]
            y[lo:hi] = x.values[lo:hi].astype(np.float64) @ we.astype(np.float64)
        attrs = {}
        if start:
            attrs["group_start"] = start
        if transpose:
            attrs["transpose_weight"] = 1
        add("nn.grouped_matmul", name, [x, w, T("i32", offsets)], [T(x.dtype, y)],
            attrs=attrs or None)

    def grouped_wgrad(name, x, g, offsets, groups, start=0):
        K, N = x.values.shape[1], g.values.shape[1]
        w = np.zeros((groups, K, N))
        for e, (lo, hi) in enumerate(bounds_of(offsets)[start:start + groups]):
            w[e] = x.values[lo:hi].T.astype(np.float64) @ g.values[lo:hi].astype(np.float64)
        add("nn.grouped_matmul_weight_grad", name, [x, g, T("i32", offsets)],
            [T(x.dtype, w)], attrs={"group_start": start} if start else None)
    x = randt("bf16", [300, 72], -1.0, 1.0)
    grouped("tensor_cores_bf16_empty_first_ragged_n", x, randt("bf16", [4, 72, 136], -1.0, 1.0),
            [0, 130, 130, 290])
    grouped("tensor_cores_bf16_block_of_groups", x, randt("bf16", [2, 72, 136], -1.0, 1.0),
            [10, 130, 200, 290], start=1)
    grouped("tensor_cores_f16_empty_first_ragged_n", randt("f16", [300, 72], -1.0, 1.0),
            randt("f16", [4, 72, 136], -1.0, 1.0), [0, 130, 130, 290])
    g = randt("bf16", [300, 136], -1.0, 1.0)
    grouped_wgrad("tensor_cores_bf16_empty_first", x, g, [0, 130, 130, 290], 4)
    grouped_wgrad("tensor_cores_bf16_block_of_groups", x, g, [10, 130, 200, 290], 2, start=1)
    # Deeper than the kernels' pipelines (520 = 8 full 64-deep steps and a
    # part), more than one column tile, rows past the last offset.
    xd = randt("bf16", [390, 520], -1.0, 1.0)
    grouped("tensor_cores_bf16_deep", xd, randt("bf16", [3, 520, 264], -1.0, 1.0),
            [1, 1, 140, 385], start=1)
    grouped_wgrad("tensor_cores_bf16_deep", randt("bf16", [390, 264], -1.0, 1.0),
                  randt("bf16", [390, 200], -1.0, 1.0), [70, 75, 385], 3)
    # The weight stored [E, N, K] and read transposed (K-major on the
    # tensor cores): deep, ragged N over three column tiles, a block of the
    # groups; f16; f32 on the CUDA cores.
    grouped("tensor_cores_bf16_transposed_weight", xd, randt("bf16", [3, 264, 520], -1.0, 1.0),
            [1, 1, 140, 385], start=1, transpose=True)
    grouped("tensor_cores_f16_transposed_weight", randt("f16", [300, 72], -1.0, 1.0),
            randt("f16", [4, 136, 72], -1.0, 1.0), [0, 130, 130, 290], transpose=True)
    grouped("f32_transposed_weight", randt("f32", [70, 20], -1.0, 1.0),
            randt("f32", [3, 67, 20], -1.0, 1.0), [10, 10, 65], transpose=True)


def gen_quantize_big():
    """nn.quantize with its transposed copy under one scale on CUDA's 128 x
    128 path (rows and cols multiples of 128): bf16 with -0, values past the
    format (saturated) and a NaN; f32 to e5m2 in a batch of two matrices;
    f16."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    def q(x, s, fmt):
        v = x.astype(np.float32) / s
        return round_to(np.clip(v, -fmax[fmt], fmax[fmt]).astype(np.float64), fmt)

    for name, dtype, shape, fmt, squeeze in [
        ("big_bf16_e4m3", "bf16", [256, 384], "f8E4M3FN", 4.0),
        ("big_batched_f32_e5m2", "f32", [2, 128, 256], "f8E5M2", 1.0),
        ("big_f16_e4m3", "f16", [128, 128], "f8E4M3FN", 1.0),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        values = x.values.copy()
        if dtype == "bf16":
            values[0, 0] = -0.0
            values[5, 17] = np.nan
        x = T(dtype, values)
        finite = np.abs(values[np.isfinite(values)])
        # squeeze > 1: a scale that puts the largest values past the format.
        s = np.float32(np.max(finite)) / np.float32(fmax[fmt]) / np.float32(squeeze)
        qd = q(values, s, fmt)
        add("nn.quantize", name, [x, T("f32", np.array(s))],
            [T(fmt, qd), T(fmt, np.swapaxes(qd, -1, -2))], exact=True)


def gen_quantize_tiles():
    """nn.quantize_tiles (--loom-fuse-fp8-quantize): each scale nn.fp8_scale
    of nn.amax over its tiles (powers of two, the last ragged), q and qT
    nn.quantize of x with them. CUDA's one-pass kernel takes 1 x 128 tiles
    of x and of its copy, 128 x 128 blocks, and rows one tile wide; other
    tilings and shapes (rows not a multiple of 16) take the unfused
    kernels. A zero row (scale 1) and a NaN (its tiles' scales NaN)."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    tile_size = fp8_tile_size

    def scales(x, tiles, fmt, margin):
        rows, cols = x.shape
        tr, tc = tile_size(rows, tiles[0]), tile_size(cols, tiles[1])
        out = np.zeros(tiles, dtype=np.float32)
        v = np.abs(x.astype(np.float32))
        for i in range(tiles[0]):
            for j in range(tiles[1]):
                t = v[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc]
                out[i, j] = np.nan if np.isnan(t).any() else t.max()
        with np.errstate(invalid="ignore", over="ignore"):
            s = (out * np.float32(2.0 ** margin)) / np.float32(fmax[fmt])
        s = np.where(out == 0, np.float32(1.0), s)
        return np.where(np.isfinite(out), s, np.float32(np.nan)).astype(np.float32)

    def expand(s, rows, cols):
        r = np.arange(rows) // tile_size(rows, s.shape[0])
        c = np.arange(cols) // tile_size(cols, s.shape[1])
        return s[r[:, None], c[None, :]]

    def quantize(x, s, fmt):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v = x.astype(np.float32) / s
        v = np.where(np.isnan(v), v, np.clip(v, -fmax[fmt], fmax[fmt]))
        return round_to(v.astype(np.float64), fmt)

    for name, dtype, shape, st, stt, fmt, margin in [
        ("tiles_1x128_bf16_e4m3", "bf16", [256, 320], [256, 3], [320, 2], "f8E4M3FN", 0),
        ("blocks_128x128_bf16_e4m3", "bf16", [256, 192], [2, 2], [2, 2], "f8E4M3FN", 0),
        ("rows_f32_e5m2_margin", "f32", [64, 96], [64, 1], [96, 1], "f8E5M2", 1),
        ("unfused_odd_rows_bf16", "bf16", [40, 70], [40, 1], [70, 1], "f8E4M3FN", 0),
        ("unfused_wide_tiles_bf16", "bf16", [32, 512], [32, 1], [512, 1], "f8E4M3FN", 0),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        values = x.values.copy()
        if name.startswith("tiles_1x128"):
            values[5, :] = 0.0
            values[6, 3] = -0.0
            values[17, 200] = np.nan
            x = T(dtype, values)
        rows, cols = shape
        s = scales(values, st, fmt, margin)
        sT = scales(values.T, stt, fmt, margin)
        q = quantize(values, expand(s, rows, cols), fmt)
        qT = quantize(values.T, expand(sT, cols, rows), fmt)
        fname = "e4m3" if fmt == "f8E4M3FN" else "e5m2"
        add("nn.quantize_tiles", name, [x],
            [T(fmt, q), T(fmt, qT), T("f32", s.astype(np.float64)), T("f32", sT.astype(np.float64))],
            attrs={"format": fname, "margin": margin}, exact=True)


def gen_quantize_tensor():
    """nn.quantize_tensor (--loom-fuse-fp8-quantize, tensorwise): one scale,
    nn.fp8_scale of nn.amax of all of x, q and qT nn.quantize of x and its
    copy with it. CUDA takes the amax and scale in one launch whose last
    block writes the scale (several blocks at [128, 512]), for 16-byte
    aligned x; a NaN gives a NaN scale, an all-zero x scale 1."""
    fmax = {"f8E4M3FN": 448.0, "f8E5M2": 57344.0}

    def quantize(x, s, fmt):
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v = x.astype(np.float32) / np.float32(s)
        v = np.where(np.isnan(v), v, np.clip(v, -fmax[fmt], fmax[fmt]))
        return round_to(v.astype(np.float64), fmt)

    for name, dtype, shape, fmt, margin in [
        ("bf16_e4m3_blocks", "bf16", [128, 512], "f8E4M3FN", 0),
        ("bf16_e4m3_odd", "bf16", [40, 70], "f8E4M3FN", 0),
        ("f32_e5m2_margin", "f32", [64, 96], "f8E5M2", 2),
        ("bf16_nan", "bf16", [32, 48], "f8E4M3FN", 0),
        ("bf16_zeros", "bf16", [16, 32], "f8E4M3FN", 0),
    ]:
        x = randt(dtype, shape, -3.0, 3.0)
        values = x.values.copy()
        if name.endswith("nan"):
            values[3, 7] = np.nan
        if name.endswith("zeros"):
            values[:] = 0.0
            values[1, 1] = -0.0
        x = T(dtype, values)
        with np.errstate(invalid="ignore"):
            a = np.float32(np.nan) if np.isnan(values).any() else np.float32(np.abs(values).max())
        if np.isnan(a):
            s = np.float32(np.nan)
        elif a == 0:
            s = np.float32(1.0)
        else:
            s = np.float32(a * np.float32(2.0 ** margin)) / np.float32(fmax[fmt])
        fname = "e4m3" if fmt == "f8E4M3FN" else "e5m2"
        add("nn.quantize_tensor", name, [x],
            [T(fmt, quantize(values, s, fmt)), T(fmt, quantize(values.T, s, fmt)),
             T("f32", np.array(s, dtype=np.float64))],
            attrs={"format": fname, "margin": margin}, exact=True)


def fp8_scale_of(values, fmt="e4m3", margin=0):
    """nn.fp8_scale of nn.amax of `values`, as the CPU computes it in f32."""
    amax = np.float32(np.max(np.abs(np.asarray(values, dtype=np.float64))))
    if not np.isfinite(amax):
        return np.float32(np.nan)
    if amax == 0:
        return np.float32(1.0)
    limit = np.float32(448.0 if fmt == "e4m3" else 57344.0)
    return np.float32(np.float32(amax * np.float32(2.0 ** margin)) / limit)


def gen_fp8_scale_epilogue():
    """The FP8 scale epilogue (runtime/abi/KernelList.h): a kernel with
    fp8_scale_of writes, after its own outputs, the FP8 scale of each listed
    one. SwiGLU and its gradient finish the amax on CUDA as they write (a
    tail, two outputs, and e5m2 with a margin); nn.silu through the
    backend's pass after the kernel."""
    for name, dtype, shape in [("bf16_vectors", "bf16", [4, 64]), ("bf16_tail", "bf16", [3, 37]),
                               ("f32", "f32", [5, 12])]:
        step = (lambda v: v) if dtype == "f32" else (lambda v: round_to(v, dtype))
        g, u, dy = randt(dtype, shape, -6, 6), randt(dtype, shape), randt(dtype, shape)
        s = step(g.values * sigmoid(g.values))
        h = step(s * u.values)
        add("nn.swiglu", "fp8_scale_" + name, [g, u],
            [T(dtype, s), T(dtype, h), T("f32", np.array(fp8_scale_of(h)).reshape(()))],
            attrs={"fp8_scale_of": [1], "fp8_format": "e4m3"}, rtol=1e-6)
        sig = sigmoid(g.values)
        a = step(dy.values * u.values)
        dg = step(a * sig * (1 + g.values * (1 - sig)))
        du = step(dy.values * s)
        add("nn.swiglu_grad", "fp8_scale_" + name, [g, u, T(dtype, s), dy],
            [T(dtype, dg), T(dtype, du),
             T("f32", np.array(fp8_scale_of(du, "e5m2", 1)).reshape(())),
             T("f32", np.array(fp8_scale_of(dg, "e5m2", 1)).reshape(()))],
            attrs={"fp8_scale_of": [1, 0], "fp8_format": "e5m2", "fp8_margin": 1}, rtol=1e-5)
    x = randt("bf16", [8, 40], -3, 3)
    y = round_to(x.values * sigmoid(x.values), "bf16")
    add("nn.silu", "fp8_scale", [x], [T("bf16", y), T("f32", np.array(fp8_scale_of(y)).reshape(()))],
        attrs={"fp8_scale_of": [0], "fp8_format": "e4m3"}, rtol=1e-6)



def gen_grouped_wgrad_widened():
    """nn.grouped_matmul_weight_grad from bf16 or f16 operands to an f32
    result (--loom-widen-results): the accumulators unrounded. On CUDA the
    tensor-core kernel (16-byte rows) and the CUDA-core one (odd widths);
    experts with no rows, a block of the experts."""
    def bounds_of(offsets):
        b = [0] + [int(v) for v in offsets]
        return [(b[e], b[e + 1]) for e in range(len(offsets))]

    def wgrad(name, x, g, offsets, groups, start=0):
        K, N = x.values.shape[1], g.values.shape[1]
        w = np.zeros((groups, K, N))
        for e, (lo, hi) in enumerate(bounds_of(offsets)[start:start + groups]):
            w[e] = x.values[lo:hi].T.astype(np.float64) @ g.values[lo:hi].astype(np.float64)
        add("nn.grouped_matmul_weight_grad", name, [x, g, T("i32", offsets)], [T("f32", w)],
            attrs={"group_start": start} if start else None, rtol=1e-5, atol=2e-4)
    x = randt("bf16", [300, 72], -1.0, 1.0)
    g = randt("bf16", [300, 136], -1.0, 1.0)
    wgrad("widened_bf16_tensor_cores", x, g, [0, 130, 130, 290], 4)
    wgrad("widened_bf16_block_of_groups", x, g, [10, 130, 200, 290], 2, start=1)
    wgrad("widened_f16_tensor_cores", randt("f16", [300, 72], -1.0, 1.0),
          randt("f16", [300, 136], -1.0, 1.0), [0, 130, 130, 290], 4)
    wgrad("widened_bf16_odd_widths", randt("bf16", [70, 20], -1.0, 1.0),
          randt("bf16", [70, 67], -1.0, 1.0), [10, 10, 65], 3)


def gen_reduce_middle():
    """A middle dim reduced, the innermost kept (the sum of a token's k routed
    rows): the CUDA backend's 16-byte vector path where the inner size is a
    multiple of the vector (8 bf16, 4 f32), the scalar one where not."""
    fns = {"nn.reduce_sum": np.sum, "nn.reduce_mean": np.mean, "nn.reduce_max": np.max}
    for kernel, name, dtype, shape in (
            ("nn.reduce_sum", "bf16_middle_vectors", "bf16", [8, 3, 2048]),
            ("nn.reduce_sum", "f32_middle_vectors", "f32", [2, 3, 4096]),
            ("nn.reduce_max", "bf16_middle_vectors", "bf16", [5, 2, 64]),
            ("nn.reduce_mean", "f32_middle_vectors", "f32", [4, 2, 12]),
            ("nn.reduce_sum", "bf16_middle_odd_inner", "bf16", [3, 2, 12]),
            # Kept dims that merge (the leading two), and a size-1 dim dropped:
            # the vector path sees [6, 16] and [4, 8], not the ops' shapes.
            ("nn.reduce_sum", "bf16_middle_merged_outer", "bf16", [2, 3, 2, 16]),
            ("nn.reduce_sum", "f32_middle_size1_outer", "f32", [1, 4, 3, 8]),
            ("nn.reduce_sum", "i64_middle_vectors", "i64", [2, 8, 8])):
        x = randt(dtype, shape) if dtype != "i64" else T("i64", ints(shape, -1000, 1000))
        dim = len(shape) - 2
        with np.errstate(all="ignore"):
            y = fns[kernel](x.values, axis=(dim,), keepdims=False)
        add(kernel, name, [x], [T(dtype, y)], attrs={"dims": [dim], "keepdim": 0})


def main():
    gen_unary()
    gen_binary()
    gen_compare_where_cast()
    gen_dropout_iota()
    mm = gen_matmul()
    gen_scaled_matmul()
    layer_norm, rms_norm = gen_reduce()
    gen_rope()
    gen_attention()
    gen_data_movement()
    gen_losses()
    gen_optimizer()
    gen_backward(layer_norm, rms_norm)
    # Cases added later go last, so that earlier cases keep their inputs.
    gen_matmul_widened(mm)
    gen_rope_transposed()
    gen_attention_stats()
    gen_fused()
    gen_sum_squares()
    gen_norm_weight_grad()
    gen_loss_grad_narrowed()
    gen_cast_multi()
    gen_linear_cross_entropy()
    gen_matmul_addend()
    gen_norm_grad_addend()
    gen_swiglu()
    gen_attention_seq_major()
    gen_adamw_multi_copies()
    gen_fp8()
    gen_fp8_transposed()
    gen_fp8_tiled()
    gen_moe()
    # The CUDA kernel's one-pass paths (a block of 256, 512 or 1024 threads
    # covering a row), with rows that fill no whole block or batch; drawn
    # last so the cases above keep their values.
    gen_norm_weight_grad((("layer_bf16_one_pass_256", "bf16", "bf16", [70, 64], 1),
                          ("layer_f32_one_pass_512", "f32", "f32", [37, 1028], 1),
                          ("rms_f32_one_pass_1024", "f32", "f32", [9, 2052], 0)))
    # Rows the vector path spreads over 128 threads (257 vectors of 8).
    gen_norm_grad_addend((("bf16_vec_wide_addend", "bf16", [5, 2056], True),))
    gen_loss_grad_narrowed((("bf16_wide_vectors", "bf16", 3, 8200, [1]),
                            ("f32_to_bf16_wide_vectors", "f32", 2, 8204, [])))
    gen_amax_paths()
    gen_quantize_sixteen()
    gen_quantize_tiles()
    gen_quantize_tensor()
    gen_fp8_scale_epilogue()
    gen_quantize_big()
    gen_quantize_own_scalar_scales()
    gen_untested_cuda_paths()
    gen_empty_operands()
    gen_grouped_wgrad_widened()
    gen_reduce_middle()
    gen_attention_window()
    gen_router()
    names = kernel_names()
    missing = [k for k in names if k not in CASES]
    extra = [k for k in CASES if k not in names]
    if missing or extra:
        sys.exit("kernels without cases: %s; cases of unknown kernels: %s" % (missing, extra))
    os.makedirs(OUT_DIR, exist_ok=True)
    for old in os.listdir(OUT_DIR):
        if old.endswith(".json"):
            os.remove(os.path.join(OUT_DIR, old))
    total = 0
    for kernel in names:
        with open(os.path.join(OUT_DIR, kernel + ".json"), "w") as f:
            json.dump({"kernel": kernel, "cases": CASES[kernel]}, f, indent=1)
            f.write("\n")
        total += len(CASES[kernel])
    print("wrote %d cases of %d kernels to %s" % (total, len(names), OUT_DIR))


if __name__ == "__main__":
    main()


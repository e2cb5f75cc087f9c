#!/usr/bin/env python3
"""The FP8 training recipe (loom-compile --fp8=tensorwise) against NumPy.

usage:
  fp8_reference.py generate OUTDIR
      writes OUTDIR/model.mlir (embedding -> fc1 -> gelu(tanh) -> fc2 ->
      + residual -> head, weights inline), OUTDIR/tokens.npy, and the first
      step's loss and parameter gradients as NumPy computes them with
      tensorwise FP8 emulated, in the layout compare_gradients.py reads
      (REF/loss.npy, REF/grads/<name>.npy), for:
        OUTDIR/e4m3          every FP8 operand e4m3
        OUTDIR/hybrid        the incoming gradient e5m2, the rest e4m3
        OUTDIR/f32           no FP8 at all
      and references the test must tell apart from e4m3:
        OUTDIR/e4m3-no-<g>   GEMM <g> left in f32, one for each of the six
                             FP8 GEMMs (fc1, fc2 forward; .dgrad, .wgrad)
        OUTDIR/e4m3-ties-away          ties rounded away from zero
        OUTDIR/e4m3-flush-subnormals   FP8 subnormals flushed to zero
      The weights carry planted ties and subnormals (see plant()).
  fp8_reference.py generate-tiled OUTDIR
      the same model, larger (160 tokens, D 192, F 320: dims that 128-element
      tiles cut with a ragged last tile), and references for the tiled
      recipes: OUTDIR/<recipe>-<format> for rowwise and blockwise, e4m3 and
      hybrid; and neighbours each must be told apart from: the tensorwise
      reference, blockwise with the weights in 1 x 128 tiles
      (blockwise-w1x128), blockwise with the transposed copies quantized as
      the transposes of the direct ones (blockwise-no-own-transpose).
  fp8_reference.py compare LOOM_DIR REF_DIR... --rtol R [--expect-mismatch]
      Loom's loss.npy and grad.<name>.npy (loom-run --output-dir of a
      --mode=gradients executable) against each reference: the error of a
      tensor is max |loom - ref| / max |ref|. Without --expect-mismatch every
      reference must agree within R; with it, every reference must disagree
      (some tensor's error above R): the test could fail. --quantile Q takes
      a tensor's error as the Q-quantile of its elements' errors (default
      1: the largest), for models big enough that an f32 intermediate which
      NumPy computes in float64 lands, for a few elements, on the other side
      of an FP8 rounding boundary (one step of the grid: up to 1/8 of e4m3).

The FP8 GEMM emulated, as Loom defines it (passes/fp8/Passes.td,
kernels/cpu/Fp8.cpp, Matmul.cpp): each operand tensor T, seen as rows, is
quantized once for every GEMM that reads it: amax = max |T| (f32), scale =
amax / fmax in f32 (1 if amax is 0; fmax 448 for e4m3, 57344 for e5m2),
q = round_to_nearest_even(clamp(T / scale in f32, -fmax, fmax)) on the
format's grid; the GEMM sums q_a * q_b in f32 in k order (exact products)
and multiplies by scale_a * scale_b (that product rounded to f32 first), in
f32. That part is bit-exact here; everything else runs in float64.

The tiled recipes scale each tile of an operand as it is laid out for its
GEMM ([rows, K]): rowwise one scale per row; blockwise 128 x 128 blocks of
weights and 1 x 128 tiles of the rest (activations and gradients, along K:
the transposed copies a weight gradient reads have their own tiles). With
tiles along K, each K tile's products are summed in f32 and times its two
scales' product, the tiles' results summed in f32 in order.
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_cases import Program, gelu_tanh_ref, ttype  # noqa: E402

B, S, V, D, F = 2, 8, 32, 32, 64
FORMATS = {  # mantissa bits, smallest normal exponent, largest finite value
    "e4m3": (3, -6, 448.0),
    "e5m2": (2, -14, 57344.0),
}
GEMMS = ["fc1", "fc2", "fc1.dgrad", "fc2.dgrad", "fc1.wgrad", "fc2.wgrad"]


# How round_fp8 rounds: "even" is the recipe's; the others are references
# the test must tell apart (ties away from zero; FP8 subnormals flushed).
ROUNDING = "even"


def round_fp8(x, fmt):
    """x (float32, already within +-fmax) rounded to the format's grid: to
    nearest, ties to even (or as ROUNDING says)."""
    man, emin, _ = FORMATS[fmt]
    x = x.astype(np.float64)
    _, e = np.frexp(x)  # |x| = m * 2^e, m in [0.5, 1)
    ulp = np.ldexp(1.0, np.maximum(e - 1, emin) - man)
    if ROUNDING == "away":
        return (np.sign(x) * np.floor(np.abs(x) / ulp + 0.5) * ulp).astype(np.float32)
    q = np.round(x / ulp) * ulp  # np.round: half to even
    if ROUNDING == "flush":
        q[np.abs(q) < 2.0 ** emin] = 0
    return q.astype(np.float32)


def quantize(t, fmt, tile=None):
    """(q, scales, tile): t's FP8 values (as f32) and its dequantization
    scales, one per tile of `tile` = (rows, cols) elements (None: one for
    the tensor), the last tiles ragged."""
    t = np.asarray(t, np.float32)
    fmax = np.float32(FORMATS[fmt][2])
    tr, tc = tile or t.shape
    rows, cols = -(-t.shape[0] // tr), -(-t.shape[1] // tc)
    scales = np.ones((rows, cols), np.float32)
    q = np.zeros_like(t)
    for i in range(rows):
        for j in range(cols):
            block = t[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc]
            amax = np.abs(block).max()
            s = np.float32(1) if amax == 0 else np.float32(amax / fmax)
            scales[i, j] = s
            q[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc] = np.clip(block / s, -fmax, fmax)
    return round_fp8(q, fmt), scales, (tr, tc)


def scaled_matmul(a, b):
    """(q_a [M, K], scales, tile) and (q_b [N, K], ...) -> [M, N]: per K
    tile an f32 sum in k order times the two scales' product (f32), the
    tiles summed in f32 in order."""
    (qa, sa, ta), (qb, sb, tb) = a, b
    k = qa.shape[1]
    tk = min(ta[1], tb[1])  # one tile along K, or tiles of one size
    row_a, row_b = np.arange(qa.shape[0]) // ta[0], np.arange(qb.shape[0]) // tb[0]
    out = np.zeros((qa.shape[0], qb.shape[0]), np.float32)
    for t0 in range(0, k, tk):
        acc = np.zeros_like(out)
        for c in range(t0, min(k, t0 + tk)):
            acc = acc + np.outer(qa[:, c], qb[:, c])  # products of FP8 values: exact
        scale = np.outer(sa[row_a, min(t0 // ta[1], sa.shape[1] - 1)],
                         sb[row_b, min(t0 // tb[1], sb.shape[1] - 1)]).astype(np.float32)
        out = out + acc * scale
    return out.astype(np.float64)


def gelu_tanh_grad(x):
    c = math.sqrt(2 / math.pi)
    u = c * (x + 0.044715 * x ** 3)
    t = np.tanh(u)
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


class Gemms:
    """The six FP8 GEMMs: each operand tensor quantized once per format and
    layout; `exact` names GEMMs left in f32 (the ablated references).
    `recipe`: tensorwise, rowwise, blockwise, or the neighbours
    blockwise-w1x128 and blockwise-no-own-transpose."""

    def __init__(self, grad_fmt, exact=(), recipe="tensorwise"):
        self.grad_fmt, self.exact, self.cache = grad_fmt, set(exact), {}
        self.recipe = recipe

    def tile(self, weight):
        if self.recipe == "tensorwise":
            return None
        if self.recipe == "rowwise":
            return (1, 1 << 30)
        return (128 if weight and self.recipe != "blockwise-w1x128" else 1, 128)

    def q(self, name, t, fmt, transposed=False):
        """The operand as its GEMM reads it ([rows, K])."""
        weight = name.startswith("w")
        if self.recipe in ("tensorwise", "blockwise-no-own-transpose") and transposed:
            qv, s, tile = self.q(name, t, fmt)
            return qv.T, s.T, tile[::-1]
        key = (name, fmt, transposed)
        if key not in self.cache:
            self.cache[key] = quantize(t.T if transposed else t, fmt, self.tile(weight))
        return self.cache[key]

    def __call__(self, gemm, lhs, rhs):
        """lhs = (tensor name, value, is the incoming gradient, read
        transposed), rhs likewise: [M, K] and [N, K] once transposed; a
        transposed operand is the transpose of its tensor's quantization."""
        if gemm in self.exact:
            a, b = (t.T if tr else t for _, t, _, tr in (lhs, rhs))
            return a.astype(np.float64) @ b.astype(np.float64).T
        return scaled_matmul(*(self.q(name, t, self.grad_fmt if is_grad else "e4m3", transposed)
                               for name, t, is_grad, transposed in (lhs, rhs)))


def f32(x):
    """A value as Loom holds it between ops (f32), for the FP8 GEMMs' inputs."""
    return np.asarray(x, np.float32)


def reference(params, tokens, grad_fmt, exact=(), recipe="tensorwise"):
    wte, w1, w2, wh = (params[n] for n in ("embed.weight", "fc1.weight", "fc2.weight", "head.weight"))
    ids, labels = tokens[:, :-1].reshape(-1), tokens[:, 1:].reshape(-1)
    n = ids.size
    g = Gemms(grad_fmt, exact, recipe)
    # Operands: (tensor name, value as stored [rows, cols], is the incoming
    # gradient, read transposed).
    X = f32(wte[ids])
    H = g("fc1", ("x", X, False, False), ("w1", f32(w1), False, False))
    G = gelu_tanh_ref(H)
    Y = g("fc2", ("g", f32(G), False, False), ("w2", f32(w2), False, False))
    R = X.astype(np.float64) + Y
    L = R @ wh.T
    m = L.max(1, keepdims=True)
    lse = np.log(np.exp(L - m).sum(1, keepdims=True)) + m
    loss = float((lse[:, 0] - L[np.arange(n), labels]).mean())
    dL = np.exp(L - lse)
    dL[np.arange(n), labels] -= 1
    dL /= n
    grads = {"head.weight": dL.T @ R}
    dR = dL @ wh
    dY = f32(dR)
    # dgrad dX = dY @ W: [M, N] x ([K, N] = W^T); wgrad dW = dY^T @ X:
    # ([N, M] = dY^T) x ([K, M] = X^T).
    grads["fc2.weight"] = g("fc2.wgrad", ("dy2", dY, True, True), ("g", f32(G), False, True))
    dG = g("fc2.dgrad", ("dy2", dY, True, False), ("w2", f32(w2), False, True))
    dH = f32(dG * gelu_tanh_grad(H))
    grads["fc1.weight"] = g("fc1.wgrad", ("dy1", dH, True, True), ("x", X, False, True))
    dX = g("fc1.dgrad", ("dy1", dH, True, False), ("w1", f32(w1), False, True))
    dE = dR + dX
    grads["embed.weight"] = np.zeros_like(wte)
    np.add.at(grads["embed.weight"], ids, dE)  # rows of repeated ids add up
    return loss, grads


def plant(w, rng, region):
    """w with FP8's corner cases planted where it is quantized (w[region]):
    its amax made 448 * 2^k, so that its scale is exactly 2^k and w / scale
    exact; an eighth of the elements exactly halfway between two e4m3
    values (ties: nearest even, not away from zero), a sixteenth on or
    halfway between e4m3 subnormals (0 to 7.5 quanta of 2^-9)."""
    w = w.astype(np.float32).astype(np.float64)
    block = w[region]
    scale = 2.0 ** np.ceil(np.log2(np.abs(block).max() / 448))
    flat = block.reshape(-1)
    idx = rng.permutation(flat.size)
    ties, subs = idx[: flat.size // 8], idx[flat.size // 8: flat.size // 8 + flat.size // 16]
    sign = lambda n: np.where(rng.rand(n) < 0.5, -1.0, 1.0)  # noqa: E731
    flat[ties] = sign(ties.size) * (1 + (rng.randint(0, 8, ties.size) + 0.5) / 8) * 2.0 ** rng.randint(1, 7, ties.size) * scale
    flat[subs] = sign(subs.size) * rng.randint(0, 16, subs.size) * 2.0 ** -10 * scale
    flat[idx[-1]] = 448 * scale * np.sign(flat[idx[-1]])
    w[region] = flat.reshape(block.shape)
    return w


def write_model(out, rng, dims):
    """The program (weights inline) and tokens; returns the parameters and
    tokens as NumPy holds them."""
    B, S, V, D, F = dims
    tokens = rng.randint(0, V, size=(B, S + 1)).astype(np.int64)
    used = np.unique(tokens[:, :-1])  # the embedding rows fc1 reads
    p = Program()
    wte, wte_ref = p.param("embed.weight", plant(rng.randn(V, D), rng, used))
    w1, w1_ref = p.param("fc1.weight", plant(rng.randn(F, D) / math.sqrt(D), rng, slice(None)))
    w2, w2_ref = p.param("fc2.weight", plant(rng.randn(D, F) / math.sqrt(F), rng, slice(None)))
    wh, wh_ref = p.param("head.weight", rng.randn(V, D) / math.sqrt(D))
    xs, hs, ls = [B, S, D], [B, S, F], [B, S, V]
    e = p.op("nn.embedding %s, %%ids : (%s, %s) -> %s" % (wte, ttype([V, D]), ttype([B, S], "i64"), ttype(xs)))

    def linear(x, x_shape, w, w_shape, y_shape):
        return p.op("nn.matmul %s, %s {transpose_rhs} : (%s, %s) -> %s" % (
            x, w, ttype(x_shape), ttype(w_shape), ttype(y_shape)))

    h = linear(e, xs, w1, [F, D], hs)
    gl = p.op("nn.gelu %s approximate = tanh : %s" % (h, ttype(hs)))
    y = linear(gl, hs, w2, [D, F], xs)
    r = p.op("nn.add %s, %s : (%s, %s) -> %s" % (e, y, ttype(xs), ttype(xs), ttype(xs)))
    logits = linear(r, xs, wh, [V, D], ls)
    text = p.func([("%ids", ttype([B, S], "i64"), "ids")], [(logits, ttype(ls), "logits")])

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.mlir"), "w") as f:
        f.write(text)
    np.save(os.path.join(out, "tokens.npy"), tokens)
    params = {"embed.weight": wte_ref, "fc1.weight": w1_ref, "fc2.weight": w2_ref, "head.weight": wh_ref}
    return params, tokens


def write_refs(out, params, tokens, refs):
    """refs: {name: (gradient format, GEMMs left exact, rounding, recipe)}."""
    global ROUNDING
    for name, (grad_fmt, exact, rounding, recipe) in refs.items():
        ROUNDING = rounding
        loss, grads = reference(params, tokens, grad_fmt, exact, recipe)
        os.makedirs(os.path.join(out, name, "grads"), exist_ok=True)
        np.save(os.path.join(out, name, "loss.npy"), np.array(loss))
        for k, v in grads.items():
            np.save(os.path.join(out, name, "grads", k + ".npy"), v)
    ROUNDING = "even"


def generate(out):
    rng = np.random.RandomState(20)
    params, tokens = write_model(out, rng, (2, 8, 32, 32, 64))
    refs = {"e4m3": ("e4m3", (), "even", "tensorwise"), "hybrid": ("e5m2", (), "even", "tensorwise"),
            "f32": ("e4m3", GEMMS, "even", "tensorwise"),
            "e4m3-ties-away": ("e4m3", (), "away", "tensorwise"),
            "e4m3-flush-subnormals": ("e4m3", (), "flush", "tensorwise")}
    for gemm in GEMMS:
        refs["e4m3-no-" + gemm] = ("e4m3", (gemm,), "even", "tensorwise")
    write_refs(out, params, tokens, refs)


def generate_tiled(out):
    rng = np.random.RandomState(21)
    params, tokens = write_model(out, rng, (2, 80, 32, 192, 320))
    refs = {}
    for recipe in ("rowwise", "blockwise"):
        refs[recipe + "-e4m3"] = ("e4m3", (), "even", recipe)
        refs[recipe + "-hybrid"] = ("e5m2", (), "even", recipe)
    for recipe in ("tensorwise", "blockwise-w1x128", "blockwise-no-own-transpose"):
        refs[recipe + "-e4m3"] = ("e4m3", (), "even", recipe)
    write_refs(out, params, tokens, refs)


def load_loss(d):
    return float(np.load(os.path.join(d, "loss.npy")))


def errors(loom, ref, quantile=1.0):
    """{tensor: relative error} of Loom's run against one reference: the
    `quantile` of the elements' |loom - ref| / max |ref|."""
    out = {"loss": abs(load_loss(loom) - load_loss(ref)) / abs(load_loss(ref))}
    for f in sorted(os.listdir(os.path.join(ref, "grads"))):
        name = f[:-4]
        r = np.load(os.path.join(ref, "grads", f)).astype(np.float64)
        path = os.path.join(loom, "grad." + name + ".npy")
        got = np.load(path).astype(np.float64) if os.path.exists(path) else None
        if got is None or got.shape != r.shape:
            out[name] = float("inf")
        else:
            out[name] = np.quantile(np.abs(got - r), quantile) / max(np.abs(r).max(), 1e-30)
    return out


def compare(args):
    failures = []
    for ref in args.refs:
        err = errors(args.loom, ref, args.quantile)
        worst = max(err, key=err.get)
        label = os.path.basename(os.path.normpath(ref))
        print("%s: loss loom %.6f ref %.6f, %d tensors, worst rel err %.2e (%s), tolerance %.0e: %s" % (
            label, load_loss(args.loom), load_loss(ref), len(err), err[worst], worst, args.rtol,
            "match" if err[worst] <= args.rtol else "differ"))
        if args.verbose:
            for k in sorted(err):
                print("  %-14s %.3e" % (k, err[k]))
        if args.expect_mismatch and not err[worst] > args.rtol:
            failures.append("%s matches (worst %.2e): the test cannot tell it apart" % (label, err[worst]))
        if not args.expect_mismatch and not err[worst] <= args.rtol:
            failures.append("%s: %s" % (label, ", ".join("%s %.2e" % (k, v) for k, v in sorted(err.items())
                                                         if not v <= args.rtol)))
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("OK")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("out")
    g = sub.add_parser("generate-tiled")
    g.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("loom")
    c.add_argument("refs", nargs="+")
    c.add_argument("--rtol", type=float, required=True)
    c.add_argument("--expect-mismatch", action="store_true")
    c.add_argument("--verbose", action="store_true")
    c.add_argument("--quantile", type=float, default=1.0)
    args = ap.parse_args()
    if args.cmd == "generate":
        generate(args.out)
    elif args.cmd == "generate-tiled":
        generate_tiled(args.out)
    else:
        compare(args)

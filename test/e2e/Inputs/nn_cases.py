#!/usr/bin/env python3
"""Writes an nn program with random weights inline, its inputs, and the
outputs NumPy computes for it independently (in float64).

usage: nn_cases.py CASE OUTDIR    (CASE: mlp | llama_block | gpt_head)
writes OUTDIR/model.mlir, OUTDIR/in<i>.npy, OUTDIR/expected<i>.npy
"""
import math
import os
import sys

import numpy as np

rng = np.random.RandomState(1234)


def dense(a):
    """An exact MLIR literal: the raw little-endian bytes as hex."""
    a = np.ascontiguousarray(a)
    return 'dense<"0x%s">' % a.tobytes().hex().upper()


def ttype(shape, dtype="f32"):
    return "tensor<%s%s>" % ("".join("%dx" % d for d in shape), dtype)


# With --separate-weights, parameters carry no values in the program (they
# start from a seeded initializer) and their values go to weights.safetensors.
SEPARATE_WEIGHTS = False
WEIGHTS = {}


def write_safetensors(path, tensors):
    """The safetensors format: an 8-byte header size, a JSON header, the bytes."""
    import json
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)


class Program:
    def __init__(self):
        self.lines = []
        self.params = []
        self.n = 0

    def param(self, name, a, frozen=False):
        a = a.astype(np.float32)
        v = self.fresh()
        if SEPARATE_WEIGHTS:
            WEIGHTS[name] = a
            self.lines.append('%s = nn.parameter "%s"%s init(normal, 0.02) : %s' % (
                v, name, " frozen" if frozen else "", ttype(a.shape)))
        else:
            self.lines.append('%s = nn.parameter "%s"%s value(%s : %s) : %s' % (
                v, name, " frozen" if frozen else "", dense(a), ttype(a.shape),
                ttype(a.shape)))
        return v, a.astype(np.float64)

    def fresh(self):
        self.n += 1
        return "%%v%d" % self.n

    def op(self, text):
        v = self.fresh()
        self.lines.append("%s = %s" % (v, text))
        return v

    def func(self, args, results):
        head = "func.func @main(%s) -> (%s) {" % (
            ", ".join('%s: %s {loom.name = "%s"}' % (v, t, n) for v, t, n in args),
            ", ".join('%s {loom.name = "%s"}' % (t, n) for _, t, n in results))
        body = ["  " + l for l in self.lines]
        ret = "  return %s : %s" % (", ".join(v for v, _, _ in results),
                                     ", ".join(t for _, t, _ in results))
        return "\n".join([head] + body + [ret, "}"]) + "\n"


def linear(p, x_v, x_shape, w_v, out_dim):
    shape = list(x_shape[:-1]) + [out_dim]
    return p.op("nn.matmul %s, %s {transpose_rhs} : (%s, %s) -> %s" % (
        x_v, w_v, ttype(x_shape), ttype([out_dim, x_shape[-1]]), ttype(shape))), shape


def rms_norm_ref(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def layer_norm_ref(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh_ref(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax_ref(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def rope_ref(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def case_mlp():
    """layer_norm -> linear+bias -> gelu(tanh) -> linear -> softmax."""
    B, D, H, O = 4, 16, 32, 8
    p = Program()
    x = rng.randn(B, D).astype(np.float32)
    lw, lw_ref = p.param("ln.weight", 1 + 0.1 * rng.randn(D))
    lb, lb_ref = p.param("ln.bias", 0.1 * rng.randn(D))
    w1, w1_ref = p.param("fc1.weight", rng.randn(H, D) / math.sqrt(D))
    b1, b1_ref = p.param("fc1.bias", 0.1 * rng.randn(H))
    w2, w2_ref = p.param("fc2.weight", rng.randn(O, H) / math.sqrt(H))
    n = p.op("nn.layer_norm %%x, weight %s, bias %s epsilon = 1.0e-05 : (%s, %s, %s) -> %s" % (
        lw, lb, ttype([B, D]), ttype([D]), ttype([D]), ttype([B, D])))
    h, hs = linear(p, n, [B, D], w1, H)
    hb = p.op("nn.add %s, %s : (%s, %s) -> %s" % (h, b1, ttype(hs), ttype([H]), ttype(hs)))
    g = p.op("nn.gelu %s approximate = tanh : %s" % (hb, ttype(hs)))
    o, os_ = linear(p, g, hs, w2, O)
    s = p.op("nn.softmax %s dim = 1 : %s" % (o, ttype(os_)))
    text = p.func([("%x", ttype([B, D]), "x")], [(s, ttype(os_), "probs")])
    ref = layer_norm_ref(x.astype(np.float64), lw_ref, lb_ref, 1e-5)
    ref = gelu_tanh_ref(ref @ w1_ref.T + b1_ref)
    ref = softmax_ref(ref @ w2_ref.T)
    return text, [x], [ref]


def case_llama_block(decomposed=False):
    """A Llama decoder layer: RMSNorm, GQA causal attention with RoPE, SwiGLU.

    With `decomposed`, written as exporters write it (RMSNorm from pow/mean/
    sqrt/reciprocal, rotate_half slices, attention from matmul/softmax with a
    causal additive mask and repeated KV heads, silu from sigmoid): the
    raising passes must turn it back into the high-level ops."""
    B, S, Dm, Hq, Hkv, Dh, F = 2, 8, 32, 4, 2, 8, 64
    p = Program()
    x = rng.randn(B, S, Dm).astype(np.float32)
    inv_freq = 1.0 / (10000 ** (np.arange(0, Dh, 2) / Dh))
    freqs = np.outer(np.arange(S), inv_freq)
    emb = np.concatenate([freqs, freqs], -1)
    table_shape = (1, 1, S, Dh) if decomposed else (S, Dh)
    cos_v, cos_ref = p.param("rope.cos", np.cos(emb).reshape(table_shape), frozen=True)
    sin_v, sin_ref = p.param("rope.sin", np.sin(emb).reshape(table_shape), frozen=True)
    ln1, ln1_ref = p.param("input_layernorm.weight", 1 + 0.1 * rng.randn(Dm))
    wq, wq_ref = p.param("self_attn.q_proj.weight", rng.randn(Hq * Dh, Dm) / math.sqrt(Dm))
    wk, wk_ref = p.param("self_attn.k_proj.weight", rng.randn(Hkv * Dh, Dm) / math.sqrt(Dm))
    wv, wv_ref = p.param("self_attn.v_proj.weight", rng.randn(Hkv * Dh, Dm) / math.sqrt(Dm))
    wo, wo_ref = p.param("self_attn.o_proj.weight", rng.randn(Dm, Hq * Dh) / math.sqrt(Hq * Dh))
    ln2, ln2_ref = p.param("post_attention_layernorm.weight", 1 + 0.1 * rng.randn(Dm))
    wg, wg_ref = p.param("mlp.gate_proj.weight", rng.randn(F, Dm) / math.sqrt(Dm))
    wu, wu_ref = p.param("mlp.up_proj.weight", rng.randn(F, Dm) / math.sqrt(Dm))
    wd, wd_ref = p.param("mlp.down_proj.weight", rng.randn(Dm, F) / math.sqrt(F))
    cos_ref, sin_ref = cos_ref.reshape(S, Dh), sin_ref.reshape(S, Dh)

    xs = [B, S, Dm]
    hs = [B, S, 1]

    def const(value, shape, dtype="f32"):
        return p.op("nn.constant dense<%s> : %s" % (value, ttype(shape, dtype)))

    def rms_norm(v, w):
        if not decomposed:
            return p.op("nn.rms_norm %s, weight %s epsilon = 1.0e-05 : (%s, %s) -> %s" % (
                v, w, ttype(xs), ttype([Dm]), ttype(xs)))
        two = const("2.0", [])
        sq = p.op("nn.pow %s, %s : (%s, tensor<f32>) -> %s" % (v, two, ttype(xs), ttype(xs)))
        m = p.op("nn.reduce_mean %s dims = [2] keepdim : %s -> %s" % (sq, ttype(xs), ttype(hs)))
        eps = const("1.0e-05", [])
        a = p.op("nn.add %s, %s : (%s, tensor<f32>) -> %s" % (m, eps, ttype(hs), ttype(hs)))
        r = p.op("nn.reciprocal %s : %s" % (p.op("nn.sqrt %s : %s" % (a, ttype(hs))), ttype(hs)))
        n = p.op("nn.mul %s, %s : (%s, %s) -> %s" % (v, r, ttype(xs), ttype(hs), ttype(xs)))
        return p.op("nn.mul %s, %s : (%s, %s) -> %s" % (w, n, ttype([Dm]), ttype(xs), ttype(xs)))

    h = rms_norm("%x", ln1)

    def heads(w, n):
        y, ys = linear(p, h, xs, w, n * Dh)
        r = p.op("nn.reshape %s : %s -> %s" % (y, ttype(ys), ttype([B, S, n, Dh])))
        return p.op("nn.transpose %s permutation = [0, 2, 1, 3] : %s -> %s" % (
            r, ttype([B, S, n, Dh]), ttype([B, n, S, Dh])))

    def rope(v, n):
        shape = [B, n, S, Dh]
        if not decomposed:
            return p.op("nn.rope %s, %s, %s : (%s, %s, %s) -> %s" % (
                v, cos_v, sin_v, ttype(shape), ttype([S, Dh]), ttype([S, Dh]), ttype(shape)))
        half = [B, n, S, Dh // 2]
        a = p.op("nn.mul %s, %s : (%s, %s) -> %s" % (v, cos_v, ttype(shape), ttype(table_shape), ttype(shape)))
        lo = p.op("nn.slice %s starts = [0, 0, 0, 0] limits = [%d, %d, %d, %d] strides = [1, 1, 1, 1] : %s -> %s" % (
            v, B, n, S, Dh // 2, ttype(shape), ttype(half)))
        hi = p.op("nn.slice %s starts = [0, 0, 0, %d] limits = [%d, %d, %d, %d] strides = [1, 1, 1, 1] : %s -> %s" % (
            v, Dh // 2, B, n, S, Dh, ttype(shape), ttype(half)))
        ng = p.op("nn.neg %s : %s" % (hi, ttype(half)))
        cat = p.op("nn.concat %s, %s dim = 3 : (%s, %s) -> %s" % (ng, lo, ttype(half), ttype(half), ttype(shape)))
        b = p.op("nn.mul %s, %s : (%s, %s) -> %s" % (cat, sin_v, ttype(shape), ttype(table_shape), ttype(shape)))
        return p.op("nn.add %s, %s : (%s, %s) -> %s" % (a, b, ttype(shape), ttype(shape), ttype(shape)))

    q, k, v = heads(wq, Hq), heads(wk, Hkv), heads(wv, Hkv)
    qr, kr = rope(q, Hq), rope(k, Hkv)
    qs4, kv4 = [B, Hq, S, Dh], [B, Hkv, S, Dh]
    if not decomposed:
        a = p.op("nn.attention %s, %s, %s causal : (%s, %s, %s) -> %s" % (
            qr, kr, v, ttype(qs4), ttype(kv4), ttype(kv4), ttype(qs4)))
    else:
        rep = Hq // Hkv

        def repeat(t):
            u = p.op("nn.reshape %s : %s -> %s" % (t, ttype(kv4), ttype([B, Hkv, 1, S, Dh])))
            e = p.op("nn.broadcast %s : %s -> %s" % (u, ttype([B, Hkv, 1, S, Dh]), ttype([B, Hkv, rep, S, Dh])))
            return p.op("nn.reshape %s : %s -> %s" % (e, ttype([B, Hkv, rep, S, Dh]), ttype(qs4)))

        kk, vv = repeat(kr), repeat(v)
        k3 = p.op("nn.reshape %s : %s -> %s" % (kk, ttype(qs4), ttype([B * Hq, S, Dh])))
        kt3 = p.op("nn.transpose %s permutation = [0, 2, 1] : %s -> %s" % (k3, ttype([B * Hq, S, Dh]), ttype([B * Hq, Dh, S])))
        kt = p.op("nn.reshape %s : %s -> %s" % (kt3, ttype([B * Hq, Dh, S]), ttype([B, Hq, Dh, S])))
        c = const("%.9e" % math.sqrt(1 / math.sqrt(Dh)), [])
        qsc = p.op("nn.mul %s, %s : (%s, tensor<f32>) -> %s" % (qr, c, ttype(qs4), ttype(qs4)))
        ktsc = p.op("nn.mul %s, %s : (%s, tensor<f32>) -> %s" % (kt, c, ttype([B, Hq, Dh, S]), ttype([B, Hq, Dh, S])))
        sc = p.op("nn.matmul %s, %s : (%s, %s) -> %s" % (qsc, ktsc, ttype(qs4), ttype([B, Hq, Dh, S]), ttype([B, Hq, S, S])))
        mask = np.triu(np.full((S, S), -np.inf, np.float32), 1).reshape(1, 1, S, S)
        mk = p.op("nn.constant %s : %s" % (dense(mask), ttype([1, 1, S, S])))
        sm = p.op("nn.add %s, %s : (%s, %s) -> %s" % (sc, mk, ttype([B, Hq, S, S]), ttype([1, 1, S, S]), ttype([B, Hq, S, S])))
        pr = p.op("nn.softmax %s dim = 3 : %s" % (sm, ttype([B, Hq, S, S])))
        nan = p.op("nn.compare ne, %s, %s : (%s, %s) -> %s" % (pr, pr, ttype([B, Hq, S, S]), ttype([B, Hq, S, S]), ttype([B, Hq, S, S], "i1")))
        zero = const("0.0", [])
        pg = p.op("nn.where %s, %s, %s : (%s, tensor<f32>, %s) -> %s" % (
            nan, zero, pr, ttype([B, Hq, S, S], "i1"), ttype([B, Hq, S, S]), ttype([B, Hq, S, S])))
        a = p.op("nn.matmul %s, %s : (%s, %s) -> %s" % (pg, vv, ttype([B, Hq, S, S]), ttype(qs4), ttype(qs4)))
    at = p.op("nn.transpose %s permutation = [0, 2, 1, 3] : %s -> %s" % (
        a, ttype([B, Hq, S, Dh]), ttype([B, S, Hq, Dh])))
    ar = p.op("nn.reshape %s : %s -> %s" % (at, ttype([B, S, Hq, Dh]), ttype([B, S, Hq * Dh])))
    o, _ = linear(p, ar, [B, S, Hq * Dh], wo, Dm)
    x1 = p.op("nn.add %%x, %s : (%s, %s) -> %s" % (o, ttype(xs), ttype(xs), ttype(xs)))
    h2 = rms_norm(x1, ln2)
    h = h2
    g, gs = linear(p, h2, xs, wg, F)
    u, _ = linear(p, h2, xs, wu, F)
    if decomposed:
        sig = p.op("nn.sigmoid %s : %s" % (g, ttype(gs)))
        sg = p.op("nn.mul %s, %s : (%s, %s) -> %s" % (g, sig, ttype(gs), ttype(gs), ttype(gs)))
    else:
        sg = p.op("nn.silu %s : %s" % (g, ttype(gs)))
    m = p.op("nn.mul %s, %s : (%s, %s) -> %s" % (sg, u, ttype(gs), ttype(gs), ttype(gs)))
    d, _ = linear(p, m, gs, wd, Dm)
    y = p.op("nn.add %s, %s : (%s, %s) -> %s" % (x1, d, ttype(xs), ttype(xs), ttype(xs)))
    text = p.func([("%x", ttype(xs), "hidden")], [(y, ttype(xs), "out")])

    X = x.astype(np.float64)
    hr = rms_norm_ref(X, ln1_ref, 1e-5)

    def heads_ref(w, n):
        return (hr @ w.T).reshape(B, S, n, Dh).transpose(0, 2, 1, 3)

    Q = rope_ref(heads_ref(wq_ref, Hq), cos_ref, sin_ref)
    K = rope_ref(heads_ref(wk_ref, Hkv), cos_ref, sin_ref)
    V = heads_ref(wv_ref, Hkv)
    rep = Hq // Hkv
    K, V = np.repeat(K, rep, axis=1), np.repeat(V, rep, axis=1)
    scores = Q @ K.transpose(0, 1, 3, 2) / math.sqrt(Dh)
    scores = scores + np.triu(np.full((S, S), -np.inf), 1)
    A = softmax_ref(scores) @ V
    A = A.transpose(0, 2, 1, 3).reshape(B, S, Hq * Dh)
    X1 = X + A @ wo_ref.T
    H2 = rms_norm_ref(X1, ln2_ref, 1e-5)
    G = H2 @ wg_ref.T
    Y = X1 + ((G / (1 + np.exp(-G))) * (H2 @ wu_ref.T)) @ wd_ref.T
    return text, [x], [Y]


def case_gpt_mlp_decomposed():
    """GPT-2's block pieces as exporters decompose them: layer norm (with
    weight and bias), GELU in its tanh form, and GELU in its erf form."""
    B, D, H = 4, 16, 32
    p = Program()
    x = rng.randn(B, D).astype(np.float32)
    lw, lw_ref = p.param("ln.weight", 1 + 0.1 * rng.randn(D))
    lb, lb_ref = p.param("ln.bias", 0.1 * rng.randn(D))
    w1, w1_ref = p.param("fc1.weight", rng.randn(H, D) / math.sqrt(D))
    w2, w2_ref = p.param("fc2.weight", rng.randn(H, H) / math.sqrt(H))
    xs, rs, hs = [B, D], [B, 1], [B, H]

    def const(value):
        return p.op("nn.constant dense<%s> : tensor<f32>" % value)

    def bin(opname, a, b, ta, tb, tr):
        return p.op("nn.%s %s, %s : (%s, %s) -> %s" % (opname, a, b, ta, tb, tr))

    mu = p.op("nn.reduce_mean %%x dims = [1] keepdim : %s -> %s" % (ttype(xs), ttype(rs)))
    d = bin("sub", "%x", mu, ttype(xs), ttype(rs), ttype(xs))
    sq = bin("mul", d, d, ttype(xs), ttype(xs), ttype(xs))
    var = p.op("nn.reduce_mean %s dims = [1] keepdim : %s -> %s" % (sq, ttype(xs), ttype(rs)))
    a = bin("add", var, const("1.0e-05"), ttype(rs), "tensor<f32>", ttype(rs))
    s = p.op("nn.sqrt %s : %s" % (a, ttype(rs)))
    n = bin("div", d, s, ttype(xs), ttype(rs), ttype(xs))
    nw = bin("mul", n, lw, ttype(xs), ttype([D]), ttype(xs))
    nb = bin("add", nw, lb, ttype(xs), ttype([D]), ttype(xs))
    h, _ = linear(p, nb, xs, w1, H)
    # 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3)))
    c3 = bin("pow", h, const("3.0"), ttype(hs), "tensor<f32>", ttype(hs))
    c3k = bin("mul", c3, const("4.471500e-02"), ttype(hs), "tensor<f32>", ttype(hs))
    inner = bin("add", h, c3k, ttype(hs), ttype(hs), ttype(hs))
    inner2 = bin("mul", inner, const("0.797884583"), ttype(hs), "tensor<f32>", ttype(hs))
    t = p.op("nn.tanh %s : %s" % (inner2, ttype(hs)))
    onep = bin("add", t, const("1.0"), ttype(hs), "tensor<f32>", ttype(hs))
    half = bin("mul", h, const("0.5"), ttype(hs), "tensor<f32>", ttype(hs))
    g1 = bin("mul", half, onep, ttype(hs), ttype(hs), ttype(hs))
    h2, _ = linear(p, g1, hs, w2, H)
    # h2 * 0.5 * (1 + erf(h2 / sqrt(2)))
    e_in = bin("div", h2, const("1.41421354"), ttype(hs), "tensor<f32>", ttype(hs))
    e = p.op("nn.erf %s : %s" % (e_in, ttype(hs)))
    onee = bin("add", const("1.0"), e, "tensor<f32>", ttype(hs), ttype(hs))
    g2a = bin("mul", h2, const("0.5"), ttype(hs), "tensor<f32>", ttype(hs))
    g2 = bin("mul", g2a, onee, ttype(hs), ttype(hs), ttype(hs))
    text = p.func([("%x", ttype(xs), "x")], [(g2, ttype(hs), "y")])
    X = x.astype(np.float64)
    ref = layer_norm_ref(X, lw_ref, lb_ref, 1e-5) @ w1_ref.T
    ref = gelu_tanh_ref(ref) @ w2_ref.T
    from math import erf
    ref = 0.5 * ref * (1 + np.vectorize(erf)(ref / math.sqrt(2)))
    return text, [x], [ref]


def case_gpt_head():
    """Embedding, positions from iota, tied LM head, log_softmax and cross-entropy."""
    B, S, V, D = 2, 6, 40, 16
    p = Program()
    ids = rng.randint(0, V, size=(B, S)).astype(np.int64)
    labels = rng.randint(0, V, size=(B * S,)).astype(np.int64)
    labels[3] = -100  # ignored
    wte, wte_ref = p.param("wte.weight", 0.5 * rng.randn(V, D))
    wpe, wpe_ref = p.param("wpe.weight", 0.5 * rng.randn(S, D))
    pos = p.op("nn.iota dim = 1 : %s" % ttype([B, S], "i64"))
    te = p.op("nn.embedding %s, %%ids : (%s, %s) -> %s" % (wte, ttype([V, D]), ttype([B, S], "i64"), ttype([B, S, D])))
    pe = p.op("nn.embedding %s, %s : (%s, %s) -> %s" % (wpe, pos, ttype([S, D]), ttype([B, S], "i64"), ttype([B, S, D])))
    h = p.op("nn.add %s, %s : (%s, %s) -> %s" % (te, pe, ttype([B, S, D]), ttype([B, S, D]), ttype([B, S, D])))
    n = p.op("nn.layer_norm %s : (%s) -> %s" % (h, ttype([B, S, D]), ttype([B, S, D])))
    logits = p.op("nn.matmul %s, %s {transpose_rhs} : (%s, %s) -> %s" % (
        n, wte, ttype([B, S, D]), ttype([V, D]), ttype([B, S, V])))
    flat = p.op("nn.reshape %s : %s -> %s" % (logits, ttype([B, S, V]), ttype([B * S, V])))
    lsm = p.op("nn.log_softmax %s dim = 1 : %s" % (flat, ttype([B * S, V])))
    loss = p.op("nn.cross_entropy %s, %%labels : (%s, %s) -> tensor<f32>" % (
        flat, ttype([B * S, V]), ttype([B * S], "i64")))
    text = p.func([("%ids", ttype([B, S], "i64"), "ids"), ("%labels", ttype([B * S], "i64"), "labels")],
                  [(lsm, ttype([B * S, V]), "log_probs"), (loss, "tensor<f32>", "loss")])
    Hr = wte_ref[ids] + wpe_ref[np.arange(S)][None]
    Nr = layer_norm_ref(Hr, 1.0, 0.0, 1e-5)
    L = (Nr @ wte_ref.T).reshape(B * S, V)
    lse = np.log(np.exp(L - L.max(1, keepdims=True)).sum(1, keepdims=True)) + L.max(1, keepdims=True)
    LSM = L - lse
    keep = labels != -100
    loss_ref = -LSM[np.arange(B * S)[keep], labels[keep]].mean()
    return text, [ids, labels], [LSM, np.array(loss_ref)]


CASES = {
    "mlp": case_mlp,
    "llama_block": case_llama_block,
    "llama_block_decomposed": lambda: case_llama_block(decomposed=True),
    "gpt_mlp_decomposed": case_gpt_mlp_decomposed,
    "gpt_head": case_gpt_head,
}

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--separate-weights"]
    SEPARATE_WEIGHTS = len(args) != len(sys.argv) - 1
    if len(args) != 2 or args[0] not in CASES:
        sys.exit("usage: nn_cases.py {%s} OUTDIR [--separate-weights]" % "|".join(CASES))
    sys.argv[1:] = args
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    text, inputs, expected = CASES[sys.argv[1]]()
    with open(os.path.join(out, "model.mlir"), "w") as f:
        f.write(text)
    for i, a in enumerate(inputs):
        np.save(os.path.join(out, "in%d.npy" % i), a)
    for i, a in enumerate(expected):
        np.save(os.path.join(out, "expected%d.npy" % i), a)
    if SEPARATE_WEIGHTS:
        write_safetensors(os.path.join(out, "weights.safetensors"), WEIGHTS)

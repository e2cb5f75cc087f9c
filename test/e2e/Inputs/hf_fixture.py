#!/usr/bin/env python3
"""hf_fixture.py FIXTURE_DIR WORK_DIR [--rtol R]

Checks one folder written by scripts/export-hf.py (see
test/frontend/Inputs/fixtures/hf/make_fixtures.py) with Loom's tools on the
CPU backend, exiting non-zero on the first failure:

  1. every model.pt2 / model.dyn.pt2 / model.onnx in the folder compiles for
     inference, runs on ids.npy, and matches PyTorch's logits.npy within
     --rtol (relative to the largest logit); a model with an
     attention_mask input (export-hf.py --attention-mask or --onnx-exporter
     torchscript writes attention_mask.npy beside it) gets a mask of ones,
     and a symbolic sequence is fixed by --seq;
  2. the dynamic-batch .pt2 (else the static one, re-batched) compiled at
     batch 1 matches the first sequence's logits;
  3. loom-run --weights model.safetensors loads every tensor of the file by
     its Hugging Face name (the executable refuses names it does not have)
     and gives the same logits.

loom-compile, loom-run and compare.py's rule come from PATH and this folder.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np


def fail(message):
    sys.exit("hf_fixture.py: FAIL: " + message)


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        fail("%s exited %d:\n%s" % (" ".join(cmd), proc.returncode, proc.stdout.strip()))
    return proc.stdout


def from_bf16_bits(a):
    """loom-run writes a bf16 output as its raw 16-bit patterns (uint16; .npy
    has no bf16): the values, as float32."""
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def rel_err(actual, expected):
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    if a.shape != e.shape:
        return float("inf"), "shape %s, expected %s" % (a.shape, e.shape)
    if not np.all(np.isfinite(a)):
        return float("inf"), "non-finite values"
    err = np.abs(a - e).max() / max(np.abs(e).max(), 1e-30)
    return err, "%.2e" % err


def batch_minimum(pt2):
    """The lower bound torch.export put on the batch of a .pt2's first
    input (its range_constraints), or None when the batch is static."""
    import zipfile
    archive = zipfile.ZipFile(pt2)
    root = archive.namelist()[0].split("/")[0]
    model = json.loads(archive.read(root + "/models/model.json"))
    graph = model["graph_module"]["graph"]
    signature = model["graph_module"]["signature"]["input_specs"]
    for spec in signature:
        user = spec.get("user_input")
        if not user:
            continue
        meta = graph["tensor_values"].get(user["arg"]["as_tensor"]["name"], {})
        size = (meta.get("sizes") or [{}])[0].get("as_expr")
        if not size:
            return None
        symbol = re.search(r"Symbol\('([^']+)'", size["expr_str"])
        bound = model.get("range_constraints", {}).get(symbol.group(1) if symbol else "", {})
        return bound.get("min_val")
    return None


def safetensors_names(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return sorted(k for k in header if k != "__metadata__")


def write_scaled(src, dst, factor):
    """Copies a safetensors file with its F32 and F16 tensors multiplied by
    factor (a power of two: exact in both)."""
    with open(src, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    for key, info in header.items():
        if key == "__metadata__" or info["dtype"] not in ("F32", "F16"):
            continue
        lo, hi = info["data_offsets"]
        t = "<f4" if info["dtype"] == "F32" else "<f2"
        values = np.frombuffer(bytes(data[lo:hi]), t) * np.dtype(t).type(factor)
        data[lo:hi] = values.astype(t).tobytes()
    with open(dst, "wb") as f:
        f.write(raw[:8 + n])
        f.write(bytes(data))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("work")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    d = args.fixture
    name = os.path.basename(os.path.normpath(d))
    os.makedirs(args.work, exist_ok=True)
    ids = os.path.join(d, "ids.npy")
    logits = np.load(os.path.join(d, "logits.npy"))

    mask = os.path.join(d, "attention_mask.npy")
    mask = mask if os.path.exists(mask) else None

    def infer(model, tag, extra_compile=(), extra_run=(), input_path=ids):
        exe = os.path.join(args.work, tag + ".loomx")
        out = os.path.join(args.work, tag + ".npy")
        inputs = ["--input", input_path]
        rows = np.load(input_path)
        compile_cmd = ["loom-compile", model, "--mode=infer", "--target=cpu", "-o", exe]
        compile_cmd += list(extra_compile)
        proc = subprocess.run(compile_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode != 0 and "symbolic dimension" in proc.stdout:
            # A sequence the export left symbolic (the TorchScript ONNX's).
            compile_cmd += ["--seq", str(rows.shape[1])]
        run(compile_cmd)
        if mask and "    attention_mask:" in run(["loom-inspect", exe]):
            # The mask of the rows given: all ones, as the export's.
            mask_path = os.path.join(args.work, tag + ".mask.npy")
            np.save(mask_path, np.ones_like(rows))
            inputs += ["--input", mask_path]
        text = run(["loom-run", exe] + inputs + ["--output", out] + list(extra_run))
        return from_bf16_bits(np.load(out)), text

    models = [m for m in ("model.pt2", "model.dyn.pt2", "model.onnx")
              if os.path.exists(os.path.join(d, m))]
    if not models:
        fail("%s: no model.pt2, model.dyn.pt2 or model.onnx" % d)
    batch = np.load(ids).shape[0]
    for m in models:
        # An ONNX batch may be symbolic with no example size: --batch fixes it.
        extra = ["--batch", str(batch)] if m.endswith(".onnx") else []
        got, _ = infer(os.path.join(d, m), m.replace(".", "_"), extra)
        err, shown = rel_err(got, logits)
        print("%s %s: logits rel err %s" % (name, m, shown))
        if not err <= args.rtol:
            fail("%s %s: logits differ from PyTorch's by %s (tolerance %.0e)" % (
                name, m, shown, args.rtol))

    # A dynamic-sequence export (export-hf.py --dynamic-seq) at its other
    # length: ids.seqN.npy and logits.seqN.npy, compiled with --seq N.
    for other in sorted(f for f in os.listdir(d) if re.fullmatch(r"ids\.seq\d+\.npy", f)):
        n = other.split(".")[1][3:]
        want = np.load(os.path.join(d, "logits.seq%s.npy" % n))
        for m in (m for m in models if m.endswith(".pt2")):
            got, _ = infer(os.path.join(d, m), m.replace(".", "_") + "_seq" + n, ["--seq", n],
                           input_path=os.path.join(d, other))
            err, shown = rel_err(got, want)
            print("%s %s --seq %s: logits rel err %s" % (name, m, n, shown))
            if not err <= args.rtol:
                fail("%s %s at --seq %s: logits differ by %s" % (name, m, n, shown))

    # One sequence through the model exported at batch 4.
    one = os.path.join(args.work, "ids1.npy")
    np.save(one, np.load(ids)[:1])
    model = "model.dyn.pt2" if "model.dyn.pt2" in models else models[0]
    low = batch_minimum(os.path.join(d, model)) if model.endswith(".pt2") else None
    if low is not None and low > 1:
        # torch.export bounded the batch below (Llama 4's export says [2,
        # inf]): loom-compile must refuse batch 1 with that range.
        proc = subprocess.run(["loom-compile", os.path.join(d, model), "--mode=infer",
                               "--target=cpu", "-o", os.path.join(args.work, "batch1.loomx"),
                               "--batch", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if proc.returncode == 0 or "outside the exported range" not in proc.stdout:
            fail("%s %s --batch 1: expected a refusal below the export's batch range, got:\n%s"
                 % (name, model, proc.stdout.strip()))
        print("%s %s --batch 1: refused, below the export's batch range [%d, ...]"
              % (name, model, low))
    else:
        got, _ = infer(os.path.join(d, model), "batch1", ["--batch", "1"], input_path=one)
        err, shown = rel_err(got, logits[:1])
        print("%s %s --batch 1: logits rel err %s" % (name, model, shown))
        if not err <= args.rtol:
            fail("%s %s at batch 1: logits differ by %s" % (name, model, shown))

    weights = os.path.join(d, "model.safetensors")
    if os.path.exists(weights):
        names = safetensors_names(weights)
        got, text = infer(os.path.join(d, model), "weights", extra_run=["--weights", weights])
        want = "loaded %d tensors" % len(names)
        if want not in text:
            fail("%s: loom-run --weights did not say %r:\n%s" % (name, want, text.strip()))
        err, shown = rel_err(got, logits)
        print("%s --weights model.safetensors: %d tensors by name (%s, ...), logits rel err %s" % (
            name, len(names), names[0], shown))
        if not err <= args.rtol:
            fail("%s with --weights: logits differ by %s" % (name, shown))
        # The file's values, not the ones inside the .pt2, are what run:
        # the same names with every weight halved give other logits.
        halved = os.path.join(args.work, "halved.safetensors")
        write_scaled(weights, halved, 0.5)
        got, _ = infer(os.path.join(d, model), "halved", extra_run=["--weights", halved])
        err, shown = rel_err(got, logits)
        if err < 1e-3:
            fail("%s: halved weights gave PyTorch's logits (rel err %s): --weights ignored" % (
                name, shown))


if __name__ == "__main__":
    main()

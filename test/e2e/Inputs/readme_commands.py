#!/usr/bin/env python3
"""readme_commands.py README.md SRC_ROOT TOOLS_DIR WORK_DIR [--mpirun CMD]

Runs every command of README.md's "Using the tools" block, in order, as
written, on the bundled example, in WORK_DIR. What the README leaves to the
reader is filled in, and said for each command:
  - model.pt2 is examples/llama/model.pt2; model.onnx a small ONNX language
    model made here with a symbolic batch and sequence; corpus.txt the
    bundled sample text; x.npy the example's ids; model.mlir the README's
    own nn program (its mlir block); mixtral/model.dyn.pt2 the tiny Mixtral
    fixture of test/frontend/Inputs/fixtures/hf_moe.tar.xz;
  - training runs 2 steps instead of hundreds (--steps N, --checkpoint-every
    N, --warmup-steps N become 2, 1, 1);
  - mpirun comes from --mpirun (root in containers needs flags), and its
    command is skipped, with a note, when there is none;
  - scripts/export-hf.py needs PyTorch and is skipped with a note.
Exits non-zero at the first command that fails, printing it and its output.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys


def block(text, heading, lang):
    start = text.index(heading)
    m = re.compile(r"```%s\n(.*?)```" % lang, re.S).search(text, start)
    return m.group(1)


def commands(sh):
    out, pending = [], ""
    for line in sh.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        # A comment: a '#' at the start of a word.
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def tiny_onnx(path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((32, 8)).astype(np.float32) * 0.1
    head = rng.standard_normal((8, 32)).astype(np.float32) * 0.1
    g = helper.make_graph(
        [helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
         helper.make_node("MatMul", ["h", "head"], ["logits"])],
        "lm", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", 32])],
        [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(head, "head")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("readme")
    ap.add_argument("src")
    ap.add_argument("tools")
    ap.add_argument("work")
    ap.add_argument("--mpirun", default="")
    args = ap.parse_args()
    args.tools, args.src = os.path.abspath(args.tools), os.path.abspath(args.src)
    text = open(args.readme).read()
    os.makedirs(args.work, exist_ok=True)
    with open(os.path.join(args.work, "model.mlir"), "w") as f:
        f.write(block(text, "A program is a", "mlir"))
    tiny_onnx(os.path.join(args.work, "model.onnx"))
    import tarfile
    with tarfile.open(os.path.join(args.src, "test/frontend/Inputs/fixtures/hf_moe.tar.xz")) as t:
        t.extract("hf_moe/mixtral_eager/model.dyn.pt2", args.work)
    files = {
        "model.pt2": os.path.join(args.src, "examples/llama/model.pt2"),
        "mixtral/model.dyn.pt2": os.path.join(args.work, "hf_moe/mixtral_eager/model.dyn.pt2"),
        "corpus.txt": os.path.join(args.src, "examples/data/sample.txt"),
        "x.npy": os.path.join(args.src, "examples/llama/ids.npy"),
    }
    shorter = {"--steps": "2", "--checkpoint-every": "1", "--warmup-steps": "1"}
    ran = 0
    for words in commands(block(text, "## Using the tools", "sh")):
        shown = " ".join(words)
        if words[0] == "python3" and any(w.endswith("export-hf.py") for w in words):
            print("skipped (needs PyTorch): " + shown)
            continue
        if words[0] == "mpirun":
            if not args.mpirun:
                print("skipped (no mpirun): " + shown)
                continue
            words = shlex.split(args.mpirun) + words[1:]
        cmd = []
        for i, w in enumerate(words):
            if w.startswith("build/bin/"):
                w = os.path.join(args.tools, w[len("build/bin/"):])
            w = files.get(w, w)
            if i > 0 and words[i - 1] in shorter:
                w = shorter[words[i - 1]]
            cmd.append(w)
        proc = subprocess.run(cmd, cwd=args.work, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            sys.exit("readme_commands.py: FAIL (exit %d): %s\n%s" % (
                proc.returncode, shown, proc.stdout[-3000:]))
        print("ok: " + shown)
        ran += 1
    print("%d README commands ran" % ran)


if __name__ == "__main__":
    main()

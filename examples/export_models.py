#!/usr/bin/env python3
"""Exports Loom's frontend fixtures and the bundled example from Hugging Face
`transformers` models with random weights (no download: configs only).

Run where torch, transformers, onnx and onnxruntime are installed (the device
machine has them):

    python3 examples/export_models.py OUTDIR [--what fixtures|example|all]

For each model it writes, under OUTDIR/<name>/:
  model.pt2                 torch.export.save of the model's forward (ids -> logits)
  model.torchscript.onnx    torch.onnx.export(dynamo=False), opset 17
  model.dynamo.onnx         torch.onnx.export(dynamo=True), opset 18
  model.external.onnx(+.data)  the dynamo export re-saved with external weights
  ids.npy, logits.npy       an input and PyTorch's float32 logits for it
  ops.txt                   the operator sets each export used
An exporter that fails is recorded in ops.txt and skipped, not fatal.
"""
import argparse
import os
import traceback

import numpy as np
import torch

torch.manual_seed(0)


class LogitsOnly(torch.nn.Module):
    """The model's forward as users export it: token ids in, logits out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def gpt2(vocab, positions, embd, layers, heads, seed):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_positions=positions, n_embd=embd,
                     n_layer=layers, n_head=heads, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg).eval()


def llama(vocab, hidden, layers, heads, kv_heads, ffn, positions, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, max_position_embeddings=positions,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def export_all(name, model, batch, seq, vocab, out):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    wrapped = LogitsOnly(model).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    with torch.no_grad():
        logits = wrapped(ids).float()
    np.save(os.path.join(d, "ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(d, "logits.npy"), logits.numpy())
    report = []

    def attempt(label, fn):
        try:
            fn()
            report.append("%s: ok" % label)
        except Exception:
            last = traceback.format_exc().strip().splitlines()[-1]
            report.append("%s: FAILED: %s" % (label, last[:300]))

    def pt2():
        ep = torch.export.export(wrapped, (ids,))
        torch.export.save(ep, os.path.join(d, "model.pt2"))
        targets = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
        report.append("pt2 ops: " + " ".join(targets))

    def onnx_ts():
        # The TorchScript exporter traces; transformers' SDPA mask code does
        # not trace, its eager attention does.
        model.config._attn_implementation = "eager"
        torch.onnx.export(wrapped, (ids,), os.path.join(d, "model.torchscript.onnx"),
                          input_names=["input_ids"], output_names=["logits"],
                          opset_version=17, dynamo=False)

    def onnx_dynamo():
        torch.onnx.export(wrapped, (ids,), os.path.join(d, "model.dynamo.onnx"),
                          input_names=["input_ids"], output_names=["logits"],
                          opset_version=18, dynamo=True, external_data=False)

    def onnx_external():
        import onnx
        m = onnx.load(os.path.join(d, "model.dynamo.onnx"))
        onnx.save(m, os.path.join(d, "model.external.onnx"), save_as_external_data=True,
                  all_tensors_to_one_file=True, location="model.external.onnx.data",
                  size_threshold=1024)

    attempt("torch.export", pt2)
    attempt("onnx dynamo", onnx_dynamo)
    attempt("onnx torchscript", onnx_ts)
    model.config._attn_implementation = "sdpa"
    if os.path.exists(os.path.join(d, "model.dynamo.onnx")):
        attempt("onnx external data", onnx_external)

    import onnx
    import onnxruntime as ort
    for f in ["model.torchscript.onnx", "model.dynamo.onnx", "model.external.onnx"]:
        p = os.path.join(d, f)
        if not os.path.exists(p):
            continue
        m = onnx.load(p, load_external_data=False)
        ops = sorted({"%s%s" % (n.domain + "::" if n.domain else "", n.op_type) for n in m.graph.node})
        opsets = ",".join("%s:%d" % (o.domain or "ai.onnx", o.version) for o in m.opset_import)
        try:
            sess = ort.InferenceSession(p, providers=["CPUExecutionProvider"])
            got = sess.run(None, {sess.get_inputs()[0].name: ids.numpy()})[0]
            err = "%.2e" % float(np.abs(got - logits.numpy()).max() / np.abs(logits.numpy()).max())
        except Exception as e:
            err = "unavailable (%s)" % str(e).splitlines()[0][:200]
        report.append("%s opsets %s, onnxruntime rel err %s, ops: %s" % (f, opsets, err, " ".join(ops)))
    with open(os.path.join(d, "ops.txt"), "w") as fh:
        fh.write("\n".join(report) + "\n")
    print(name, "\n  " + "\n  ".join(r.splitlines()[0] for r in report))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--what", default="all", choices=["fixtures", "example", "variants", "all"])
    args = ap.parse_args()
    if args.what in ("fixtures", "all"):
        export_all("gpt2_tiny", gpt2(vocab=96, positions=32, embd=32, layers=2, heads=4, seed=11),
                   batch=2, seq=12, vocab=96, out=args.out)
        export_all("llama_tiny", llama(vocab=96, hidden=32, layers=2, heads=4, kv_heads=2,
                                       ffn=64, positions=64, seed=12),
                   batch=2, seq=12, vocab=96, out=args.out)
    if args.what == "variants":
        # Other sizes and seeds than the fixtures, to check the importers on
        # models they were not written against.
        export_all("gpt2_wide", gpt2(vocab=120, positions=40, embd=48, layers=3, heads=6, seed=21),
                   batch=3, seq=10, vocab=120, out=args.out)
        export_all("gpt2_one", gpt2(vocab=64, positions=16, embd=16, layers=1, heads=2, seed=22),
                   batch=1, seq=16, vocab=64, out=args.out)
        export_all("llama_mha", llama(vocab=80, hidden=48, layers=2, heads=4, kv_heads=4,
                                      ffn=96, positions=64, seed=23),
                   batch=2, seq=9, vocab=80, out=args.out)
        export_all("llama_gqa4", llama(vocab=100, hidden=64, layers=3, heads=8, kv_heads=2,
                                       ffn=160, positions=64, seed=24),
                   batch=1, seq=20, vocab=100, out=args.out)
    if args.what in ("example", "all"):
        # The bundled example: byte-level vocabulary, about 1.7M parameters.
        export_all("llama_example", llama(vocab=256, hidden=192, layers=4, heads=6, kv_heads=2,
                                          ffn=512, positions=256, seed=7),
                   batch=1, seq=64, vocab=256, out=args.out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes PyTorch's first-step loss and gradients with the load-balancing
auxiliary loss of a mixture-of-experts fixture: the references that
`loom-compile --moe-aux-loss-coef C --mode=gradients` is checked against.

Run where torch and transformers 5 are installed (the device machine):

    python3 scripts/moe-aux-references.py --coef 0.02 FIXTURE_DIR... --out OUTDIR

Each FIXTURE_DIR holds config.json, model.safetensors and gradients/tokens.npy
(as scripts/export-hf.py and examples/gradient_references.py write them).
The model is built by transformers from the config, in eval mode (no router
jitter), loaded with the weights, and run on tokens[:, :-1] with
output_router_logits; the loss is the causal-LM cross-entropy against
tokens[:, 1:] (mean over all positions) plus coef times transformers' own
load_balancing_loss_func of the router logits (the family's module's, with
the config's experts and top-k). Writes OUTDIR/<fixture>/tokens.npy,
loss.npy, aux.npy and grads/<parameter name>.npy.
"""
import argparse
import importlib
import json
import os
import sys

import numpy as np
import torch


def reference(d, coef, out):
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(os.path.join(d, "config.json")) as f:
        model_type = json.load(f)["model_type"]
    config = AutoConfig.from_pretrained(d, local_files_only=True)
    config.output_router_logits = True
    config.use_cache = False
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    state = load_file(os.path.join(d, "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m not in getattr(model, "_tied_weights_keys", {}) and
               not m.endswith("lm_head.weight")]
    if missing or unexpected:
        raise SystemExit("%s: weights do not match the model (missing %s, unexpected %s)" % (
            d, missing[:4], unexpected[:4]))
    module = importlib.import_module("transformers.models.%s.modeling_%s" % (model_type, model_type))
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts")
    top_k = getattr(config, "num_experts_per_tok")

    # Families whose outputs do not collect router_logits: the logits are the
    # outputs of their routers (the modules named ...router or ...gate whose
    # output, or its first element, has the experts as its last dim), hooked.
    hooked = []

    def hook(module, inputs, output):
        t = output[0] if isinstance(output, (tuple, list)) else output
        if torch.is_tensor(t) and t.shape[-1] == experts:
            hooked.append(t.reshape(-1, experts))

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules()
             if n.endswith("router") or n.endswith("gate")]

    tokens = torch.from_numpy(np.load(os.path.join(d, "gradients", "tokens.npy")))
    model.zero_grad(set_to_none=True)
    outputs = model(input_ids=tokens[:, :-1], output_router_logits=True, use_cache=False)
    for h in hooks:
        h.remove()
    logits = outputs.logits
    vocab = logits.shape[-1]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab).float(),
                                           tokens[:, 1:].reshape(-1))
    router_logits = getattr(outputs, "router_logits", None)
    source = "outputs.router_logits"
    if not isinstance(router_logits, (tuple, list)) or not router_logits:
        router_logits, source = tuple(hooked), "%d hooked router layers" % len(hooked)
    if not router_logits:
        near = ["%s (%s)" % (n, type(m).__name__) for n, m in model.named_modules()
                if "router" in n or "gate" in n][:6]
        raise SystemExit("%s: no router logits (neither in the outputs nor from a router layer; "
                         "modules named router or gate: %s)" % (d, ", ".join(near) or "none"))
    mixtral = importlib.import_module("transformers.models.mixtral.modeling_mixtral")
    own = getattr(module, "load_balancing_loss_func", None)
    aux = own(router_logits, experts, top_k, None) if own else None
    if not torch.is_tensor(aux):
        aux = mixtral.load_balancing_loss_func(router_logits, experts, top_k, None)
        source += ", Mixtral's load_balancing_loss_func"
    loss = ce + coef * aux
    loss.backward()

    name = os.path.basename(os.path.normpath(d))
    o = os.path.join(out, name)
    os.makedirs(os.path.join(o, "grads"), exist_ok=True)
    np.save(os.path.join(o, "tokens.npy"), tokens.numpy().astype(np.int64))
    np.save(os.path.join(o, "loss.npy"), np.array(loss.item(), dtype=np.float32))
    np.save(os.path.join(o, "aux.npy"), np.array(aux.item(), dtype=np.float32))
    n = 0
    for pname, p in model.named_parameters():
        if p.grad is not None:
            np.save(os.path.join(o, "grads", pname + ".npy"), p.grad.float().numpy())
            n += 1
    print("%s: loss %.6f (cross-entropy %.6f, aux %.6f from %s), %d gradients" % (
        name, loss.item(), ce.item(), aux.item(), source, n))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fixtures", nargs="+", metavar="FIXTURE_DIR")
    ap.add_argument("--coef", type=float, required=True, help="the auxiliary loss's coefficient")
    ap.add_argument("--out", required=True, metavar="DIR")
    args = ap.parse_args(argv)
    failed = 0
    for d in args.fixtures:
        try:
            reference(d, args.coef, args.out)
        except SystemExit as e:
            print(e, file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Export a Hugging Face transformers causal LM to Loom's inputs.

Run where PyTorch (2.6 or newer) and transformers (5.x; 4.5x mostly works)
are installed. Nothing is downloaded: a model comes either from a config
(random weights, seeded) or from a local checkpoint folder.

Source (exactly one):
  --config NAME_OR_JSON   a fresh model with random weights. NAME is a model
                          type (llama, qwen2, mistral, gpt2, or any other
                          transformers causal-LM type), which starts from a
                          small preset (about 0.2M parameters: 2 layers,
                          hidden 64, 4 heads, vocabulary 128; the preset's
                          values are printed) rather than the type's
                          full-size defaults; or a config.json file; or
                          inline JSON ('{"model_type": "llama", ...}').
  --checkpoint DIR        a local folder with config.json and weights
                          (safetensors or .bin), read with from_pretrained
                          and local_files_only=True.
  --set KEY=VALUE         override a config field (repeatable). VALUE is
                          parsed as JSON when it can be (64, 1e-5, true,
                          null, {"rope_type": "llama3", ...}), else taken as
                          a string. Overrides go to the config's constructor.

Writes, into --out DIR:
  model.pt2               torch.export.export of the model's forward, token
                          ids [batch, seq] (int64) -> logits [batch, seq,
                          vocab] (use_cache=False), in the default training
                          IR (in-place ops such as copy_ or masked_fill_ are
                          kept; --ir functional or core for the
                          decomposed forms), saved with torch.export.save. The batch is
                          a torch.export.Dim unless --static-batch.
                          Parameter names in its graph signature are the
                          model's state_dict names (model.embed_tokens.weight,
                          lm_head.weight, ...): the model is exported as it
                          is, not inside a wrapper module.
  model.safetensors       every parameter and persistent buffer that the
                          .pt2's signature names, under that name (of tied
                          weights, the one name the .pt2 keeps), for
                          loom-run --weights; also readable by
                          from_pretrained together with config.json.
  config.json             the model's config (so DIR is itself a checkpoint).
  ids.npy, logits.npy     the example ids (int64) and PyTorch's logits for
                          them (float32).
  ids.seqN.npy, logits.seqN.npy
                          with --dynamic-seq: ids of another length N
                          (--seq - 4) and PyTorch's logits for them, for
                          checking a compile at --seq N.
  attention_mask.npy      with --attention-mask or --onnx-exporter
                          torchscript: the mask given with ids.npy (ones);
                          the exports then take input_ids and attention_mask.
  model.onnx              with --onnx: torch.onnx.export(dynamo=True),
                          opset 18, weights inline, dynamic batch unless
                          --static-batch (--onnx-exporter torchscript: the
                          TorchScript tracer, opset 17, inputs input_ids and
                          attention_mask, dynamic batch and sequence axes);
                          checked with onnxruntime when it is installed.

Examples:
  python3 scripts/export-hf.py --config llama --out llama/
  python3 scripts/export-hf.py --config qwen2 --set num_hidden_layers=4 \\
      --attn sdpa --batch 2 --seq 128 --onnx --out qwen2/
  python3 scripts/export-hf.py --checkpoint ~/models/SmolLM2-135M --seq 256 --out smol/

Then compile and run it with Loom (the script prints these for DIR):
  build/bin/loom-compile DIR/model.pt2 -o DIR/model.loomx
  build/bin/loom-run DIR/model.loomx --input DIR/ids.npy --output DIR/out.npy
  python3 test/e2e/Inputs/compare.py DIR/out.npy DIR/logits.npy --rtol 1e-4
  build/bin/loom-compile DIR/model.pt2 --mode=train --batch 16 -o DIR/train.loomx
  build/bin/loom-run DIR/train.loomx --weights DIR/model.safetensors --steps 100 --data synthetic:VOCAB

docs/models.md lists the families that import and how each is checked.
"""
import argparse
import json
import os
import struct
import shlex
import sys
import traceback
import types

PROG = "export-hf.py"


class ExportError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


# Small presets for --config NAME, in each family's own field names. Any
# other model type gets GENERIC_PRESET for the fields its config has.
PRESETS = {
    "llama": dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                  max_position_embeddings=256, tie_word_embeddings=False),
    "qwen2": dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, tie_word_embeddings=False),
    "mistral": dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=256, sliding_window=None,
                    tie_word_embeddings=False),
    "gpt2": dict(vocab_size=128, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
}
GENERIC_PRESET = dict(vocab_size=128, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=256, head_dim=16)

# Mixture-of-experts and low-rank attention fields, shrunk when a type's
# defaults are larger (its full-size expert count and widths would make a
# "tiny" model of hundreds of megabytes): 8 experts, top-2, groups of two.
SMALL_FIELDS = dict(num_experts=8, n_routed_experts=8, num_local_experts=8, moe_num_experts=8,
                    num_experts_per_tok=2, moe_k=2, moe_topk=2,
                    moe_intermediate_size=32, shared_expert_intermediate_size=32,
                    moe_shared_expert_intermediate_size=32, shared_intermediate_size=32,
                    dense_intermediate_size=128, intermediate_size_mlp=128,
                    kv_lora_rank=32, q_lora_rank=48, qk_nope_head_dim=16, qk_rope_head_dim=8,
                    v_head_dim=16, qk_head_dim=24, index_head_dim=16, index_n_heads=2,
                    first_k_dense_replace=1, num_dense_layers=1, n_group=4, topk_group=2)

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
SAFETENSORS_DTYPES = {
    "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "bool": "BOOL",
}


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="NAME_OR_JSON",
                     help="model type (small preset), config.json path, or inline JSON")
    src.add_argument("--checkpoint", metavar="DIR",
                     help="local folder with config.json and weights (no network)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field (repeatable; VALUE parsed as JSON if it can be)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random weights (--config) and of the example ids (default 0)")
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager",
                    help="attention implementation to export (default eager: matmuls and "
                         "softmax; sdpa: aten.scaled_dot_product_attention)")
    ap.add_argument("--experts", metavar="BACKEND",
                    help="a mixture-of-experts model's experts backend in transformers "
                         "(grouped_mm, batched_mm or eager; default: transformers' own choice)")
    ap.add_argument("--batch", type=int, default=2, help="example batch (default 2)")
    ap.add_argument("--seq", type=int, default=16, help="example sequence length (default 16)")
    dyn = ap.add_mutually_exclusive_group()
    dyn.add_argument("--dynamic-batch", dest="dynamic_batch", action="store_true", default=True,
                     help="export the batch dimension as a torch.export.Dim (default)")
    dyn.add_argument("--static-batch", dest="dynamic_batch", action="store_false",
                     help="export with the example batch fixed")
    ap.add_argument("--dynamic-seq", action="store_true",
                    help="export the sequence dimension as dynamic too (Dim.DYNAMIC, or "
                         "Dim('seq', min=2, max=--max-seq) on an older torch); Loom fixes "
                         "it with --seq")
    ap.add_argument("--max-seq", type=int, default=128,
                    help="the largest sequence of a named seq Dim (default 128)")
    ap.add_argument("--ir", choices=["training", "functional", "core"], default="training",
                    help="the .pt2's op set: torch.export's default training IR (in-place "
                         "ops kept), 'functional' (ExportedProgram.run_decompositions({}): "
                         "functionalized, composite ops kept) or 'core' "
                         "(run_decompositions(): core ATen, linear as addmm, softmax as "
                         "_softmax, layer_norm as native_layer_norm, ...)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="parameter dtype of the exported model (default float32; "
                         "logits.npy is float32 either way)")
    ap.add_argument("--plain-forward", action="store_true",
                    help="export the model's own forward as called with the ids alone "
                         "(use_cache left on: the outputs are the logits and the key/value "
                         "cache), as a user calling torch.export.export(model, (ids,)) gets")
    ap.add_argument("--attention-mask", action="store_true",
                    help="export forward(input_ids, attention_mask), as a user passing both "
                         "does (batch dynamic in both); writes attention_mask.npy (ones)")
    ap.add_argument("--onnx", action="store_true",
                    help="also write model.onnx (torch.onnx.export, dynamo=True, opset 18)")
    ap.add_argument("--onnx-exporter", choices=["dynamo", "torchscript"], default="dynamo",
                    help="with --onnx: torch.export-based (dynamo=True, the default) or the "
                         "TorchScript tracer (dynamo=False, as Optimum exports): opset 17, "
                         "inputs input_ids and attention_mask, batch and sequence as "
                         "dynamic axes")
    ap.add_argument("--onnx-opset", type=int, metavar="N",
                    help="with --onnx: the opset (default 18 for dynamo, 17 for torchscript)")
    ap.add_argument("--pt2-name", default="model.pt2", metavar="FILE",
                    help="file name of the .pt2 inside --out (default model.pt2)")
    ap.add_argument("--report", metavar="FILE",
                    help="append a report to FILE inside --out: the command, the .pt2's "
                         "operators (in-place ones apart), its mutations, and the "
                         "reload/onnxruntime errors against logits.npy")
    ap.add_argument("--trace-nodes", metavar="FILE",
                    help="write FILE (.npz) inside --out: the value of every tensor the exported "
                         "program computes, by node name, at the example ids (to find where "
                         "a compiler's result first departs from PyTorch's: "
                         "test/e2e/Inputs/pt2_bisect.py)")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    ap.add_argument("--debug", action="store_true", help="print full tracebacks on errors")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.seq < 1:
        ap.error("--batch and --seq must be positive")
    if os.path.basename(args.pt2_name) != args.pt2_name or not args.pt2_name.endswith(".pt2"):
        ap.error("--pt2-name must be a plain file name ending in .pt2")
    return args


def parse_overrides(items):
    out = {}
    for item in items:
        if "=" not in item:
            raise ExportError("--set %r: expected KEY=VALUE" % item)
        key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ExportError("--set %r: empty key" % item)
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def first_line(exc):
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0]
    return line if len(line) <= 300 else line[:297] + "..."


def build_config(args, overrides):
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if args.checkpoint:
        d = os.path.expanduser(args.checkpoint)
        if not os.path.isdir(d):
            raise ExportError("--checkpoint %s: no such folder" % args.checkpoint)
        if not os.path.isfile(os.path.join(d, "config.json")):
            raise ExportError("--checkpoint %s: no config.json in it" % args.checkpoint)
        try:
            return AutoConfig.from_pretrained(d, local_files_only=True, **overrides)
        except Exception as e:
            raise ExportError("bad checkpoint config %s: %s" % (
                os.path.join(args.checkpoint, "config.json"), first_line(e)))

    spec = args.config.strip()
    preset = None
    if spec.startswith("{"):
        try:
            cfg = json.loads(spec)
        except ValueError as e:
            raise ExportError("--config: inline JSON does not parse: %s" % e)
        where = "inline JSON"
    elif os.path.isfile(spec) or spec.endswith(".json"):
        try:
            with open(spec) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise ExportError("--config %s: %s" % (spec, first_line(e)))
        where = spec
    else:
        if spec not in CONFIG_MAPPING:
            raise ExportError("--config %s: not a transformers model type (e.g. llama, qwen2, "
                              "mistral, gpt2) nor a config.json file" % spec)
        cfg = {"model_type": spec}
        where = "model type %s" % spec
        preset = PRESETS.get(spec)
        if preset is None:
            generic = CONFIG_MAPPING[spec]().to_dict()
            preset = {k: v for k, v in GENERIC_PRESET.items() if k in generic}
            preset.update({k: v for k, v in SMALL_FIELDS.items()
                           if isinstance(generic.get(k), int) and not isinstance(generic[k], bool)
                           and generic[k] > v})
            if "head_dim" in preset:
                heads = overrides.get("num_attention_heads", preset.get("num_attention_heads", 4))
                hidden = overrides.get("hidden_size", preset.get("hidden_size", 64))
                preset["head_dim"] = hidden // heads if heads else 16
                # Low-rank (MLA) attention rotates qk_rope_head_dim of each
                # head: its rotary tables are head_dim wide (DeepSeek-V2/V3).
                if "qk_rope_head_dim" in generic:
                    preset["head_dim"] = overrides.get(
                        "qk_rope_head_dim", preset.get("qk_rope_head_dim", generic["qk_rope_head_dim"]))
            # A top-k left unset (None) by the type's defaults (DeepSeek-V2).
            for key in ("num_experts_per_tok",):
                if key in generic and generic[key] is None:
                    preset[key] = SMALL_FIELDS[key]
        preset = dict(preset)
        # The family's special token ids are for its full vocabulary; ids past
        # the preset's would index past the embedding (padding_idx).
        defaults = CONFIG_MAPPING[spec]().to_dict()
        vocab = overrides.get("vocab_size", preset.get("vocab_size"))
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = defaults.get(key)
            if key not in overrides and isinstance(value, int) and vocab and value >= vocab:
                preset[key] = None
        cfg.update(preset)
    if not isinstance(cfg, dict) or "model_type" not in cfg:
        raise ExportError("--config %s: the JSON has no \"model_type\"" % where)
    model_type = cfg["model_type"]
    if model_type not in CONFIG_MAPPING:
        raise ExportError("--config %s: unknown model_type %r" % (where, model_type))
    cfg = dict(cfg)
    cfg.update(overrides)
    cfg.pop("model_type", None)
    try:
        config = CONFIG_MAPPING[model_type](**cfg)
    except Exception as e:
        raise ExportError("bad config (%s): %s" % (where, first_line(e)))
    if preset is not None:
        def shown_value(key, value):
            try:
                return getattr(config, key, value)
            except Exception:  # a per-layer field that the config will not read globally
                return value
        shown = {k: shown_value(k, v) for k, v in preset.items()}
        print("%s: %s preset %s" % (PROG, model_type, json.dumps(shown, default=str)))
    return config


def randomize_zero_matrices(model, config, torch):
    """Some families initialize a router's weight to zeros (ERNIE 4.5 MoE,
    AFMoE): every token's experts then tie, and which of the tied experts
    top-k picks is up to the kernel. A fresh model's all-zero matrices are
    drawn like its other weights instead, so its routing is decided."""
    std = getattr(config, "initializer_range", 0.02) or 0.02
    names = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and p.is_floating_point() and not p.any():
                p.normal_(0.0, std)
                names.append(name)
    if names:
        print("%s: all-zero matrices drawn from N(0, %g): %s" % (PROG, std, ", ".join(names)))


def build_model(args, config, torch):
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, DTYPES[args.dtype])
    extra = {"experts_implementation": args.experts} if args.experts else {}
    try:
        if args.checkpoint:
            model = AutoModelForCausalLM.from_pretrained(
                os.path.expanduser(args.checkpoint), config=config, local_files_only=True,
                attn_implementation=args.attn, **extra)
        else:
            torch.manual_seed(args.seed)
            model = AutoModelForCausalLM.from_config(config, attn_implementation=args.attn,
                                                     **extra)
            randomize_zero_matrices(model, config, torch)
    except Exception as e:
        what = ("checkpoint %s" % args.checkpoint) if args.checkpoint else "config"
        raise ExportError("cannot build a causal LM from the %s: %s" % (what, first_line(e)))
    model = model.to(dtype=dtype).eval()
    try:
        model.config.use_cache = False
    except Exception:
        pass
    return model


def logits_forward(model, with_mask=False):
    """Makes the model's own forward ids -> logits (ids, attention_mask ->
    logits with_mask), in place. Exporting the model itself (rather than a
    wrapper module) keeps its state_dict names in the .pt2. Returns a
    function that restores the original forward."""
    had_own = "forward" in model.__dict__
    original = model.forward

    def forward(self, input_ids):
        return original(input_ids=input_ids, use_cache=False).logits

    def forward_masked(self, input_ids, attention_mask):
        return original(input_ids=input_ids, attention_mask=attention_mask,
                        use_cache=False).logits

    model.forward = types.MethodType(forward_masked if with_mask else forward, model)

    def restore():
        if had_own:
            model.forward = original
        else:
            del model.forward
    return restore


def logits_of(out):
    """The logits of what a forward returned: a tensor, or a ModelOutput
    (--plain-forward) whose first entry they are."""
    if hasattr(out, "logits"):
        return out.logits
    return out[0] if isinstance(out, (tuple, list)) else out


def batch_is_symbolic(ep, torch):
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in ep.graph_signature.user_inputs:
            val = node.meta.get("val")
            return val is not None and isinstance(val.shape[0], torch.SymInt)
    return False


def export_pt2(model, inputs, dynamic, torch, seq_dim=None):
    """inputs: (ids,) or (ids, attention_mask), alike in shape; seq_dim: a
    torch.export.Dim for the sequence (--dynamic-seq), or None."""
    ids = inputs[0]
    extra = {1: seq_dim} if seq_dim is not None else {}
    label_seq = ", dynamic sequence" if seq_dim is not None else ""
    if not dynamic:
        if extra:
            return (torch.export.export(model, inputs, dynamic_shapes=(extra,) * len(inputs)),
                    "static batch %d%s" % (ids.shape[0], label_seq))
        return torch.export.export(model, inputs), "static batch %d" % ids.shape[0]
    Dim = torch.export.Dim
    attempts = [("Dim('batch', min=1, max=4096)", lambda: Dim("batch", min=1, max=4096)),
                ("Dim('batch', min=2, max=4096)", lambda: Dim("batch", min=2, max=4096))]
    if hasattr(Dim, "AUTO"):
        attempts.append(("Dim.AUTO", lambda: Dim.AUTO))
    errors = []
    for label, dim in attempts:
        try:
            batch = dim()
            ep = torch.export.export(model, inputs,
                                     dynamic_shapes=({0: batch, **extra},) * len(inputs))
        except Exception as e:
            errors.append("%s: %s" % (label, first_line(e)))
            continue
        if batch_is_symbolic(ep, torch):
            return ep, "dynamic batch, %s%s" % (label, label_seq)
        errors.append("%s: the batch was specialized" % label)
    raise ExportError("the batch dimension could not be exported as dynamic (%s); "
                      "try --static-batch" % "; ".join(errors))


def signature_weights(ep):
    """(name, placeholder, kind) for every parameter and persistent buffer the
    .pt2's signature names; non-persistent buffers and constants are baked
    into the .pt2 and are not weights Loom loads. A tensor listed under
    several names (tied embeddings: model.embed_tokens.weight and
    lm_head.weight) is listed once, under its first name, which is the
    parameter Loom makes of it and the name a Hugging Face checkpoint keeps."""
    from torch.export.graph_signature import InputKind
    out, seen = [], set()
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.PARAMETER:
            kind = "parameter"
        elif spec.kind == InputKind.BUFFER and spec.persistent:
            kind = "buffer"
        else:
            continue
        t = ep.state_dict.get(spec.target)
        key = None
        if t is not None:
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                   tuple(t.stride()), str(t.dtype))
        if key is not None and key in seen:
            continue
        seen.add(key)
        out.append((spec.target, spec.arg.name, kind))
    return out


def check_names(ep, model):
    names = [n for n, _, _ in signature_weights(ep)]
    hf = set(model.state_dict().keys())
    bad = [n for n in names if n not in hf]
    if bad:
        raise ExportError("the .pt2 names %d weights that are not state_dict names, e.g. %r; "
                          "expected names such as %r" % (len(bad), bad[0], sorted(hf)[0]))
    return names


def tensor_bytes(t, torch):
    t = t.detach().to("cpu").contiguous().clone()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def write_safetensors_by_hand(path, tensors, torch, metadata=None):
    """The safetensors format: an 8-byte little-endian header length, a JSON
    header {name: {dtype, shape, data_offsets}} (padded with spaces to a
    multiple of 8), then the tensors' raw little-endian bytes."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name]
        dtype = str(t.dtype).replace("torch.", "")
        if dtype not in SAFETENSORS_DTYPES:
            raise ExportError("tensor %s has dtype %s, which safetensors cannot hold" % (name, dtype))
        data = tensor_bytes(t, torch)
        header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def write_safetensors(path, tensors, torch):
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in tensors.items()}
    try:
        from safetensors.torch import save_file
    except ImportError:
        write_safetensors_by_hand(path, tensors, torch, {"format": "pt"})
        return "written by hand (no safetensors package)"
    save_file(tensors, path, metadata={"format": "pt"})
    return "safetensors package"


def rel_err(got, ref, np):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return "shape %s, expected %s" % (got.shape, ref.shape)
    return "%.2e" % (np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def export_onnx_torchscript(model, ids, path, dynamic, torch, opset=17):
    """The TorchScript tracer, called as Optimum calls it: input_ids and an
    attention_mask (ones here), batch and sequence dynamic. transformers 5's
    mask code needs the attention_mask: without one it reaches aten::diff,
    which the tracer cannot export."""
    axes = {0: "batch", 1: "sequence"} if dynamic else {1: "sequence"}
    hf_forward = type(model).forward
    traced = model.forward

    def forward(self, input_ids, attention_mask):
        return hf_forward(self, input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits

    model.forward = types.MethodType(forward, model)
    try:
        torch.onnx.export(model, (ids, torch.ones_like(ids)), path,
                          input_names=["input_ids", "attention_mask"], output_names=["logits"],
                          opset_version=opset, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": axes})
    except Exception as e:
        raise ExportError("torch.onnx.export(dynamo=False) failed: %s" % first_line(e))
    finally:
        model.forward = traced
    import numpy as np
    np.save(os.path.join(os.path.dirname(path), "attention_mask.npy"), np.ones_like(ids.numpy()))
    return ("by the TorchScript tracer (dynamo=False, opset %d, inputs input_ids and "
            "attention_mask)" % opset)


def export_onnx(model, ep, inputs, path, dynamic, torch, exporter="dynamo", opset=None):
    if exporter == "torchscript":
        return export_onnx_torchscript(model, inputs[0], path, dynamic, torch, opset or 17)
    names = ["input_ids", "attention_mask"][:len(inputs)]
    kwargs = dict(input_names=names, output_names=["logits"], opset_version=opset or 18,
                  dynamo=True, external_data=False)
    errors = []
    try:
        batch = torch.export.Dim("batch", min=1, max=4096)
        dyn = ({0: batch},) * len(inputs) if dynamic else None
        torch.onnx.export(model, inputs, path, dynamic_shapes=dyn, **kwargs)
        return "from the model"
    except Exception as e:
        errors.append("from the model: %s" % first_line(e))
    try:
        torch.onnx.export(ep, inputs, path, **kwargs)
        return "from the ExportedProgram"
    except Exception as e:
        errors.append("from the ExportedProgram: %s" % first_line(e))
    raise ExportError("torch.onnx.export failed (%s)" % "; ".join(errors))


def onnx_summary(path, ids, logits, np):
    lines = []
    try:
        import onnx
        m = onnx.load(path)
        ops = sorted({("%s::" % n.domain if n.domain else "") + n.op_type for n in m.graph.node})
        opsets = ",".join("%s:%d" % (o.domain or "ai.onnx", o.version) for o in m.opset_import)
        dims = [d.dim_param or d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        lines.append("onnx %s: opsets %s, input %s %s, %d initializers" % (
            os.path.basename(path), opsets, m.graph.input[0].name, dims, len(m.graph.initializer)))
        lines.append("onnx ops: " + " ".join(ops))
    except Exception as e:
        lines.append("onnx: cannot read (%s)" % first_line(e))
    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: ids}
        # An attention_mask input (the TorchScript exporter's): no padding.
        feed.update({i.name: np.ones_like(ids) for i in sess.get_inputs()[1:]
                     if i.name == "attention_mask"})
        got = sess.run(None, feed)[0]
        lines.append("onnxruntime vs logits.npy: rel err %s" % rel_err(got, logits, np))
    except ImportError:
        lines.append("onnxruntime: not installed, not checked")
    except Exception as e:
        lines.append("onnxruntime: FAILED: %s" % first_line(e))
    return lines


def pt2_summary(ep, label, name):
    targets = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})

    def in_place(t):
        parts = t.split(".")
        op = parts[1] if len(parts) > 2 and parts[0] == "aten" else parts[-1]
        return op.endswith("_") and not op.startswith("__")
    lines = ["pt2 %s: %s, %d nodes" % (name, label, len(ep.graph.nodes)),
             "call_function targets: " + " ".join(targets),
             "in-place: " + (" ".join(t for t in targets if in_place(t)) or "none")]
    mutations = ["%s %s <- %s" % (s.kind.name.lower(), s.target, s.arg.name)
                 for s in ep.graph_signature.output_specs if s.kind.name != "USER_OUTPUT"]
    lines.append("output specs other than user outputs: " + (", ".join(mutations) or "none"))
    return lines


def run(args):
    try:
        import numpy as np
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise ExportError("needs numpy, torch and transformers: %s" % e)
    overrides = parse_overrides(args.set)
    config = build_config(args, overrides)
    model = build_model(args, config, torch)
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    vocab = getattr(text, "vocab_size", None)
    if not vocab:
        raise ExportError("the config has no vocab_size")
    positions = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
    if positions and args.seq > positions:
        raise ExportError("--seq %d exceeds the model's %d positions" % (args.seq, positions))

    out = args.out
    os.makedirs(out, exist_ok=True)
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(0, vocab, (args.batch, args.seq), generator=g, dtype=torch.int64)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float().numpy()
    np.save(os.path.join(out, "ids.npy"), ids.numpy())
    np.save(os.path.join(out, "logits.npy"), logits)
    if args.dynamic_seq:
        other_seq = max(2, args.seq - 4)
        ids_other = torch.randint(0, vocab, (args.batch, other_seq), generator=g,
                                  dtype=torch.int64)
        with torch.no_grad():
            logits_other = model(input_ids=ids_other, use_cache=False).logits.float().numpy()
        np.save(os.path.join(out, "ids.seq%d.npy" % other_seq), ids_other.numpy())
        np.save(os.path.join(out, "logits.seq%d.npy" % other_seq), logits_other)
    model.config.to_json_file(os.path.join(out, "config.json"))
    # The inputs of the export: the ids, and with --attention-mask a mask of
    # ones beside them (no padding: the logits are the unmasked model's).
    inputs = (ids,)
    if args.attention_mask:
        inputs = (ids, torch.ones_like(ids))
        np.save(os.path.join(out, "attention_mask.npy"), inputs[1].numpy())

    def with_mask(x):
        return (x, torch.ones_like(x)) if args.attention_mask else (x,)

    restore = (lambda: None) if args.plain_forward else logits_forward(model, args.attention_mask)
    try:
        try:
            longest = min(args.max_seq, positions) if positions else args.max_seq
            if args.dynamic_seq and args.seq > longest:
                raise ExportError("--seq %d exceeds --max-seq %d" % (args.seq, longest))
            # Dim.DYNAMIC: a named Dim with bounds fails on guards such as
            # min(8*s, 16*s) == 8*s that torch cannot prove over a range.
            seq_dim = None
            if args.dynamic_seq:
                seq_dim = (torch.export.Dim.DYNAMIC if hasattr(torch.export.Dim, "DYNAMIC")
                           else torch.export.Dim("seq", min=2, max=longest))
            ep, label = export_pt2(model, inputs, args.dynamic_batch, torch, seq_dim)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError("torch.export.export failed: %s" % first_line(e))
        if args.ir != "training":
            try:
                ep = ep.run_decompositions({} if args.ir == "functional" else None)
            except Exception as e:
                raise ExportError("run_decompositions failed: %s" % first_line(e))
            label += ", %s IR" % args.ir
        names = check_names(ep, model)
        pt2_path = os.path.join(out, args.pt2_name)
        torch.export.save(ep, pt2_path)
        state = ep.state_dict
        how = write_safetensors(os.path.join(out, "model.safetensors"),
                                {n: state[n] for n in names}, torch)
        onnx_path = os.path.join(out, "model.onnx")
        onnx_how = export_onnx(model, ep, inputs, onnx_path, args.dynamic_batch, torch,
                               args.onnx_exporter, args.onnx_opset) \
            if args.onnx else None
    finally:
        restore()

    params = sum(state[n].numel() for n in names)
    print("%s: %s, %s attention, %s, %d weights (%d values) named like %s" % (
        PROG, type(model).__name__, args.attn, label, len(names), params,
        names[0] if names else "-"))
    print("%s: wrote %s, model.safetensors (%s), config.json, ids.npy %s, logits.npy %s%s" % (
        PROG, pt2_path, how, list(ids.shape), list(logits.shape),
        ", model.onnx (%s)" % onnx_how if onnx_how else ""))

    if args.trace_nodes:
        write_node_trace(ep, inputs, os.path.join(out, args.trace_nodes), torch, np)

    if args.report:
        lines = ["# " + shlex.join(["scripts/" + PROG] + args.argv),
                 "model %s, transformers %s, torch %s" % (
                     type(model).__name__, transformers.__version__, torch.__version__),
                 "weights: %d tensors, first %s" % (len(names), names[0] if names else "-")]
        lines += pt2_summary(ep, label, args.pt2_name)
        # The exported program itself, before saving: tells an export that
        # differs from the eager model apart from a .pt2 that will not reload.
        try:
            with torch.no_grad():
                got = logits_of(ep.module()(*inputs)).float().numpy()
            lines.append("exported program vs logits.npy: rel err %s" % rel_err(got, logits, np))
        except Exception as e:
            lines.append("exported program: FAILED to run: %s" % first_line(e))
        try:
            reloaded = torch.export.load(pt2_path).module()
            with torch.no_grad():
                got = logits_of(reloaded(*inputs)).float().numpy()
            lines.append("pt2 reloaded vs logits.npy: rel err %s" % rel_err(got, logits, np))
            if args.dynamic_batch:
                other = args.batch + 1
                ids2 = torch.randint(0, vocab, (other, args.seq), generator=g, dtype=torch.int64)
                with torch.no_grad():
                    want = model(input_ids=ids2, use_cache=False).logits.float().numpy()
                    got = logits_of(reloaded(*with_mask(ids2))).float().numpy()
                lines.append("pt2 reloaded at batch %d vs PyTorch: rel err %s" % (
                    other, rel_err(got, want, np)))
        except Exception as e:
            lines.append("pt2 reload: FAILED: %s" % first_line(e))
        if onnx_how:
            lines.append("onnx exported %s" % onnx_how)
            lines += onnx_summary(onnx_path, ids.numpy(), logits, np)
        with open(os.path.join(out, args.report), "a") as f:
            f.write("\n".join(lines) + "\n\n")
        print("\n".join("  " + l for l in lines[1:] if l.startswith(("in-place", "onnxruntime", "pt2 re"))))

    shown = out.rstrip("/") or "."
    print("Next (from Loom's build; docs/models.md):")
    print("  build/bin/loom-compile %s/%s -o %s/model.loomx" % (shown, args.pt2_name, shown))
    print("  build/bin/loom-run %s/model.loomx --input %s/ids.npy%s --output %s/out.npy" % (
        shown, shown, " --input %s/attention_mask.npy" % shown if args.attention_mask else "",
        shown))
    print("  python3 test/e2e/Inputs/compare.py %s/out.npy %s/logits.npy --rtol 1e-4" % (shown, shown))
    print("  build/bin/loom-compile %s/%s --mode=train --batch 16 -o %s/train.loomx" % (
        shown, args.pt2_name, shown))
    print("  build/bin/loom-run %s/train.loomx --weights %s/model.safetensors --steps 100 "
          "--data synthetic:%d" % (shown, shown, vocab))
    return 0


def write_node_trace(ep, inputs, path, torch, np):
    """Every tensor result of the exported program's top-level nodes at the
    example ids, saved by node name (a node with several results as
    NAME.0, NAME.1, ...)."""
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if n.op == "call_function":
                items = result if isinstance(result, (tuple, list)) else [result]
                for i, item in enumerate(items):
                    if isinstance(item, torch.Tensor) and item.dtype != torch.bool \
                            and not item.is_complex():
                        key = n.name if len(items) == 1 else "%s.%d" % (n.name, i)
                        values[key] = item.detach().float().numpy().copy() \
                            if item.is_floating_point() else item.detach().numpy().copy()
            return result

    with torch.no_grad():
        Recorder(ep.module()).run(*inputs)
    np.savez_compressed(path, **values)
    print("%s: traced %d node values into %s" % (PROG, len(values), path))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    args.argv = argv
    try:
        return run(args)
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        if isinstance(e, ExportError):
            message, status = str(e), 2
        else:
            message = "%s: %s (--debug for the traceback)" % (type(e).__name__, first_line(e))
            status = 1
        print("%s: error: %s" % (PROG, message), file=sys.stderr)
        if args.report and os.path.isdir(args.out):
            with open(os.path.join(args.out, args.report), "a") as f:
                f.write("# %s\nFAILED: %s\n\n" % (" ".join(["scripts/" + PROG] + argv), message))
        return status


if __name__ == "__main__":
    sys.exit(main())

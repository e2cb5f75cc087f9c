#!/usr/bin/env python3
"""Trains the same Llama three ways on one GPU -- Loom, PyTorch eager and
torch.compile -- from identical initial weights on identical batches, and
prints tokens/s, step time, MFU, peak GPU memory and the first losses.

Two steps, because the GPU machine has no MLIR (Loom compiles elsewhere):

  1. On the GPU machine, export the model's graph (weights stripped):
       python3 bench/train_llama.py export --out OUTDIR [model flags]
     -> OUTDIR/model.pt2 (the forward, ids [batch, seq] -> logits, no weights)
  2. On the development machine, compile the training step:
       loom-compile OUTDIR/model.pt2 --mode=train --embed-weights=false \
           --precision=bf16 --batch 4 -o train.loomx
  3. On the GPU machine, run the comparison:
       python3 bench/train_llama.py bench --loom-run build/bin/loom-run \
           --executable train.loomx --steps 20 [model flags]

The default model is the 0.95B Llama of docs/performance.md: 16 layers,
hidden 2048, FFN 5632, 16 heads, vocab 32000, sequence 2048, batch 4.
Llama-3-8B's layer shapes, 4 of them (issue 19):
  --layers 4 --hidden 4096 --ffn 14336 --heads 32 --kv-heads 8 --vocab 128256 --seq 4096
Mixture-of-experts models, transformers' own MoE layers (issue 21; the same
flags to export and bench):
  Mixtral-shaped:  --family mixtral --layers 8 --experts 8 --top-k 2 --ffn 5632 --kv-heads 8
  DeepSeek-shaped: --family deepseek --experts 64 --top-k 6 --expert-ffn 1408 --shared-experts 2
MFU counts the experts each token is routed to.
Sliding-window attention (Mistral's layers, every layer windowed):
  --family mistral --window 4096 [--torch-attention sdpa|flex_attention|eager]
MFU counts the scores each query sees.

Options of the bench step beside the timed runs:
  --attention auto,loom   one Loom run per LOOM_ATTENTION value (cuDNN's fused
                          attention where it loads, or Loom's own kernels)
  --count-steps N         after the timed runs, one more Loom run of N steps with
                          --profile (instructions per step) and, with
                          --kernel-count-lib (bench/cuda/kernel_count.cpp built
                          as a CUPTI injection library), the GPU kernels in the
                          replayed step graph; PyTorch's kernels in one step,
                          counted with torch.profiler. With --out, the count runs
                          also write where the step's time went: OUT/loom_trace.json
                          (loom-run --trace) and OUT/compile_kernels.json,
                          OUT/eager_kernels.json (torch.profiler's kernels with their
                          device times); bench/step_profile.py tabulates them
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

import numpy as np
import torch


def model_args(ap):
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=0,
                    help="key/value heads, fewer than --heads for grouped-query attention "
                         "(default: --heads)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    # Mixture-of-experts families (issue 21): transformers' own MoE layers.
    ap.add_argument("--family", choices=["llama", "mistral", "mixtral", "deepseek"],
                    default="llama",
                    help="llama (dense), mistral (dense, sliding-window attention: --window), "
                         "mixtral (softmax top-k experts), deepseek (DeepSeek-V3: MLA attention, "
                         "sigmoid routing, shared experts)")
    ap.add_argument("--window", type=int, default=4096,
                    help="mistral: the sliding window, in tokens")
    ap.add_argument("--torch-attention", default="sdpa",
                    help="the attention transformers runs for PyTorch's runs: sdpa (default; a "
                         "window is a boolean mask), flex_attention (a block mask), eager; "
                         "comma-separated for one run of each")
    ap.add_argument("--experts", type=int, default=8, help="routed experts per MoE layer")
    ap.add_argument("--top-k", type=int, default=2, help="experts per token")
    ap.add_argument("--expert-ffn", type=int, default=0,
                    help="each expert's FFN size (default: --ffn)")
    ap.add_argument("--shared-experts", type=int, default=0, help="deepseek: shared experts")
    ap.add_argument("--dense-layers", type=int, default=0,
                    help="deepseek: the first layers are dense (first_k_dense_replace)")


class LogitsOnly(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


def moe_layers(args):
    if args.family in ("llama", "mistral"):
        return 0
    return args.layers - (args.dense_layers if args.family == "deepseek" else 0)


def build(args):
    torch.manual_seed(args.seed)
    ffn = args.expert_ffn or args.ffn
    if args.family == "mistral":
        from transformers import MistralConfig, MistralForCausalLM
        cfg = MistralConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                            num_hidden_layers=args.layers, num_attention_heads=args.heads,
                            num_key_value_heads=args.kv_heads or args.heads,
                            head_dim=args.hidden // args.heads, max_position_embeddings=args.seq,
                            rms_norm_eps=1e-5, sliding_window=args.window,
                            tie_word_embeddings=False)
        return LogitsOnly(MistralForCausalLM(cfg)).eval()
    if args.family == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM
        cfg = MixtralConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=ffn,
                            num_hidden_layers=args.layers, num_attention_heads=args.heads,
                            num_key_value_heads=args.kv_heads or args.heads,
                            num_local_experts=args.experts, num_experts_per_tok=args.top_k,
                            max_position_embeddings=args.seq, rms_norm_eps=1e-5,
                            sliding_window=None, tie_word_embeddings=False)
        return LogitsOnly(MixtralForCausalLM(cfg)).eval()
    if args.family == "deepseek":
        from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
        cfg = DeepseekV3Config(vocab_size=args.vocab, hidden_size=args.hidden,
                               intermediate_size=args.ffn, moe_intermediate_size=ffn,
                               num_hidden_layers=args.layers, num_attention_heads=args.heads,
                               num_key_value_heads=args.heads, n_routed_experts=args.experts,
                               n_shared_experts=args.shared_experts,
                               num_experts_per_tok=args.top_k, n_group=1, topk_group=1,
                               first_k_dense_replace=args.dense_layers, routed_scaling_factor=1.0,
                               norm_topk_prob=True, q_lora_rank=None, kv_lora_rank=512,
                               qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                               head_dim=64, max_position_embeddings=args.seq, rms_norm_eps=1e-5,
                               tie_word_embeddings=False)
        return LogitsOnly(DeepseekV3ForCausalLM(cfg)).eval()
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads or args.heads, max_position_embeddings=args.seq,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    return LogitsOnly(LlamaForCausalLM(cfg)).eval()


def set_attention(model, attention):
    """The attention transformers runs (sdpa, flex_attention, eager)."""
    inner = model.model
    if hasattr(inner, "set_attn_implementation"):
        inner.set_attn_implementation(attention)
    else:
        inner.config._attn_implementation = attention


def export(args):
    os.makedirs(args.out, exist_ok=True)
    model = build(args)
    ids = torch.zeros(args.batch, args.seq, dtype=torch.long)
    ep = torch.export.export(model, (ids,))
    full = os.path.join(tempfile.mkdtemp(), "full.pt2")
    torch.export.save(ep, full)
    # The graph without the weights: Loom compiles with --embed-weights=false
    # and the run gets the weights from a safetensors file.
    src = zipfile.ZipFile(full)
    dst = zipfile.ZipFile(os.path.join(args.out, "model.pt2"), "w", zipfile.ZIP_STORED)
    for info in src.infolist():
        if "/data/weights/weight_" not in info.filename:
            dst.writestr(info, src.read(info.filename))
    dst.close()
    params = sum(p.numel() for p in model.parameters())
    print("exported %.3fB parameters to %s" % (params / 1e9, os.path.join(args.out, "model.pt2")))


class PeakMemory:
    """Samples the GPU's used memory with nvidia-smi (Loom runs in another process)."""

    def __init__(self):
        self.peak = 0
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while self.running:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout.split()
            if out:
                self.peak = max(self.peak, int(out[0]))
            time.sleep(0.2)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.peak / 1024.0  # GiB


def flops_per_token(params, args):
    # 6N for the matrix products forward and backward, plus attention's
    # scores and values (12 * layers * hidden * seq per token, the causal
    # half not taken off, as PaLM's MFU counts it). Of a MoE, N counts the
    # experts a token is routed to, not the others; under a sliding window
    # seq becomes twice the mean keys a query sees (seq under causal alone).
    idle = moe_layers(args) * (args.experts - args.top_k) * 3 * args.hidden * (
        args.expert_ffn or args.ffn)
    seen = args.seq
    if args.family == "mistral" and args.window < args.seq:
        w, s = args.window, args.seq
        seen = 2 * (w * (w + 1) / 2 + (s - w) * w) / s  # twice the mean keys a query sees
    return 6 * (params - idle) + 12 * args.layers * args.hidden * seen


def torch_run(model, batches, args, compiled):
    model = model.cuda().train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if compiled else model

    def step(tokens):
        tokens = tokens.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, args.vocab),
                                                 tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats()
    losses, times = [], []
    for tokens in batches:
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = step(tokens)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    peak = torch.cuda.max_memory_allocated() / 2**30
    kernels = 0
    if args.count_steps:
        # One more step (after the timed ones), its GPU kernels counted.
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step(batches[-1])
            torch.cuda.synchronize()
        timed = []
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and \
                    not e.name.startswith(("Memcpy", "Memset")):
                kernels += 1
                timed.append({"name": e.name, "us": e.time_range.elapsed_us()})
        if args.out:
            # Where PyTorch's step went, kernel by kernel (bench/step_profile.py reads it).
            with open(os.path.join(args.out, "%s_kernels.json"
                                   % ("compile" if compiled else "eager")), "w") as f:
                json.dump(timed, f)
    model.cpu()
    del opt
    torch.cuda.empty_cache()
    return losses, times, peak, kernels


def bench(args):
    from safetensors.torch import save_file
    work = tempfile.mkdtemp()
    os.makedirs(args.out or work, exist_ok=True)
    model = build(args)
    params = sum(p.numel() for p in model.parameters())
    # Identical initial weights for every run.
    initial = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(initial, os.path.join(work, "weights.safetensors"))
    # Identical batches: windows of seq+1 tokens at stride seq, in order
    # (loom-run --sequential-data reads the file the same way).
    rng = np.random.default_rng(args.seed)
    stream = rng.integers(0, args.vocab, size=args.steps * args.batch * args.seq + 1, dtype=np.uint32)
    stream.tofile(os.path.join(work, "tokens.u32"))
    batches = []
    for s in range(args.steps):
        rows = [stream[(s * args.batch + b) * args.seq:(s * args.batch + b) * args.seq + args.seq + 1]
                for b in range(args.batch)]
        batches.append(torch.from_numpy(np.stack(rows).astype(np.int64)))
    tokens_per_step = args.batch * args.seq
    fpt = flops_per_token(params, args)
    rows = []

    def summarize(name, losses, times, peak):
        warm = times[3:] if len(times) > 4 else times
        step_time = sum(warm) / len(warm)
        tps = tokens_per_step / step_time
        rows.append((name, tps, step_time, tps * fpt / 989e12, peak, losses))

    counts = []  # (run, what, per step)

    # --executable PATH, or NAME=PATH,NAME=PATH,...: one Loom run per executable.
    executables = []
    for item in (args.executable or "").split(","):
        if item:
            label, _, path = item.rpartition("=")
            executables.append((label, path))

    def loom_cmd(steps, metrics, executable=None):
        executable = executable or executables[0][1]
        return [args.loom_run, executable, "--backend=cuda", "--weights",
                os.path.join(work, "weights.safetensors"), "--steps", str(steps), "--data",
                os.path.join(work, "tokens.u32"), "--sequential-data", "--lr", str(args.lr),
                "--metrics", metrics, "--log-every", "5"]

    def loom_process(cmd, env):
        print("$", " ".join("%s=%s" % kv for kv in env.items()), " ".join(cmd), flush=True)
        result = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True)
        sys.stdout.write(result.stdout)
        sys.stdout.write(result.stderr)
        sys.stdout.flush()
        if "cuDNN fused attention unavailable" in result.stdout + result.stderr:
            print("NOTE: loom-run could not use cuDNN's fused attention (line above)")
        return result

    variants = [v for v in (args.attention or "").split(",") if v] or [None]
    if args.loom_run:
        for (label, executable), variant in [(e, v) for e in executables for v in variants]:
            tags = [t for t in (label, variant) if t]
            name = "loom" if not tags else "loom (%s)" % ", ".join(tags)
            env = {} if variant is None else {"LOOM_ATTENTION": variant}
            metrics = os.path.join(work, "loom.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            mem = PeakMemory()
            result = loom_process(loom_cmd(args.steps, metrics, executable), env)
            peak = mem.stop()
            if result.returncode == 0:
                lines = [json.loads(l) for l in open(metrics)]
                summarize(name, [l["loss"] for l in lines], [l["step_time_s"] for l in lines], peak)
            else:
                print("loom-run failed with exit code", result.returncode)
        if args.count_steps:
            # Instructions per step from --profile; GPU kernels per step from
            # CUPTI (the step graph's kernel nodes), when the library is given.
            env = {} if variants[0] is None else {"LOOM_ATTENTION": variants[0]}
            if args.kernel_count_lib:
                env["CUDA_INJECTION64_PATH"] = os.path.abspath(args.kernel_count_lib)
                env["KERNEL_COUNT_NAMES"] = os.path.join(args.out or work, "loom_kernels.tsv")
            trace = ["--trace", os.path.join(args.out, "loom_trace.json")] if args.out else []
            result = loom_process(loom_cmd(args.count_steps, os.path.join(work, "count.jsonl"))
                                  + ["--profile"] + trace, env)
            calls, copies = 0, 0
            for line in result.stderr.splitlines():
                parts = line.split()
                if len(parts) == 6 and parts[-1] == "calls" and parts[2] == "ms":
                    if parts[0] == "copy":
                        copies += int(parts[-2])
                    else:
                        calls += int(parts[-2])
            run = "loom" if variants[0] is None else "loom (%s)" % variants[0]
            if calls:
                counts.append((run, "kernel instructions (--profile calls / steps)",
                               calls / args.count_steps))
                counts.append((run, "copy instructions (--profile)", copies / args.count_steps))
            graphs = [l for l in result.stderr.splitlines() if l.startswith("kernel_count: graph")]
            if graphs:
                nodes = max(int(l.split(":")[2].split()[0]) for l in graphs)
                counts.append((run, "GPU kernels in the step's CUDA graph (CUPTI)", nodes))
    runs = {"eager": ("pytorch eager", False), "compile": ("torch.compile", True)}
    attentions = [a for a in args.torch_attention.split(",") if a]
    for attention in attentions:
        set_attention(model, attention)
        for name, compiled in [runs[r] for r in args.pytorch.split(",") if r in runs]:
            if attentions != ["sdpa"]:
                name = "%s (%s)" % (name, attention)
            model.load_state_dict(initial)
            try:
                losses, times, peak, kernels = torch_run(model, batches, args, compiled)
            except Exception as e:  # one failed run leaves the others' figures
                print("%s failed: %s" % (name, str(e).splitlines()[0] if str(e) else type(e).__name__))
                model.cpu()
                torch.cuda.empty_cache()
                continue
            summarize(name, losses, times, peak)
            if kernels:
                counts.append((name, "GPU kernels in one step (torch.profiler)", kernels))

    print("\nmodel: %s, %.3fB parameters, batch %d x %d tokens, bf16 compute, f32 master weights, "
          "AdamW" % (args.family, params / 1e9, args.batch, args.seq))
    print("%-30s %12s %10s %7s %10s" % ("", "tokens/s", "step (ms)", "MFU", "peak GiB"))
    for name, tps, st, mfu, peak, _ in rows:
        print("%-30s %12.0f %10.1f %6.1f%% %10.1f" % (name, tps, st * 1e3, mfu * 100, peak))
    for c in [r for r in rows if r[0].startswith("torch.compile")]:
        for r in rows:
            if r[0].startswith("loom"):
                print("%s / %s: %.3fx tokens/s" % (r[0], c[0], r[1] / c[1]))
    if counts:
        print("\nkernels per training step:")
        for run, what, n in counts:
            print("%-18s %8.0f  %s" % (run, n, what))
    print("\nfirst losses:")
    for name, *_, losses in rows:
        print("%-30s %s" % (name, " ".join("%.4f" % l for l in losses[:20])))
    with open(os.path.join(args.out or work, "bench.json"), "w") as f:
        json.dump([{"name": r[0], "tokens_per_s": r[1], "step_s": r[2], "mfu": r[3],
                    "peak_gib": r[4], "losses": r[5]} for r in rows]
                  + [{"name": c[0], "count": c[1], "per_step": c[2]} for c in counts], f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export")
    e.add_argument("--out", required=True)
    model_args(e)
    b = sub.add_parser("bench")
    b.add_argument("--loom-run", help="path to loom-run (omit to run PyTorch only)")
    b.add_argument("--executable", help="the compiled training step (.loomx), or NAME=PATH,... "
                   "for one Loom run of each")
    b.add_argument("--pytorch", default="eager,compile",
                   help="PyTorch runs: eager, compile, both (default) or none")
    b.add_argument("--steps", type=int, default=20)
    b.add_argument("--lr", type=float, default=3e-4)
    b.add_argument("--out")
    b.add_argument("--attention", help="comma-separated LOOM_ATTENTION values, one Loom run each "
                   "(auto, cudnn, loom; default: one run with the environment's)")
    b.add_argument("--count-steps", type=int, default=0,
                   help="count kernels per step: a Loom run of this many steps with --profile, "
                        "and one profiled PyTorch step (default 0: off)")
    b.add_argument("--kernel-count-lib", help="bench/cuda/kernel_count.cpp built as a CUPTI "
                   "injection library: Loom's GPU kernels per step in the count run")
    model_args(b)
    args = ap.parse_args()
    export(args) if args.command == "export" else bench(args)


if __name__ == "__main__":
    main()

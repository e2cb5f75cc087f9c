#!/usr/bin/env python3
"""Pipeline parallelism on 4 GPUs: Loom's pipelined executables beside
PyTorch's torch.distributed.pipelining schedules, on the 0.95B Llama of
bench/train_llama.py, from identical weights on identical batches.

A step is 8 microbatches of one 2048-token sequence (global batch 8, set
with --batch), bf16 compute with f32 master weights, AdamW (betas 0.9/0.95,
eps 1e-8, weight decay 0.1 on matrices) and clipping at 1.0.

Steps (the GPU machine has no MLIR; Loom compiles elsewhere):

  1. On the GPU machine: python3 bench/train_llama.py export --out OUT
  2. Here, one executable per schedule (once loom-compile builds
     executables with --pp > 1, docs/pipeline.md), e.g.
       loom-compile OUT/model.pt2 --mode=train --embed-weights=false \\
           --precision=bf16 --batch 8 --microbatches 8 --pp 4 \\
           --schedule=1f1b -o pp_1f1b.loomx
     (likewise --schedule=interleaved --vpp 2, zb-h1, dualpipev, dualpipe)
  3. On the GPU machine (nvidia-h200-x4):
       python3 bench/pipeline_llama.py --loom-run build-gpu/bin/loom-run \\
           --loom 1f1b=pp_1f1b.loomx --loom dualpipev=pp_dualpipev.loomx \\
           --steps 20 --json pipeline.json
     PyTorch alone: python3 bench/pipeline_llama.py
     What would run, without torch or GPUs: add --dry-run.

PyTorch (--torch, default all five): each schedule is a fresh launch of 4
processes (NCCL, one GPU each), so a failing schedule prints its error and
the others still run. The model is cut into stages of equal layer counts,
the embedding on the first stage, the final norm, LM head and loss on the
last:
  1f1b         Schedule1F1B                   4 stages; rank r: stage r
  interleaved  ScheduleInterleaved1F1B        8 stages; rank r: r, r+4
  zb           ScheduleInterleavedZeroBubble  8 stages; rank r: r, r+4
  zbv          ScheduleZBVZeroBubble          8 stages; rank r: r, 7-r (V)
  dualpipev    ScheduleDualPipeV              8 stages; rank r: r, 7-r (V)
The loss is the mean next-token cross-entropy (train_llama's), each
microbatch's mean with scale_grads=True, so the gradient is that of the
mean over the global batch. Each rank steps AdamW on its own stages'
parameters after clipping by the global gradient norm (the per-rank sums
of squares all-reduced), which is what clip_grad_norm_ over the whole model
computes in the one-GPU and DDP runs.

Loom (--loom NAME=EXECUTABLE, repeatable; NAME is the schedule): one
loom-run for the speed, loss and peak memory (nvidia-smi, per GPU, while it
runs), then one with --trace for --loom-trace-steps steps. The traced
run's first step is eager; from the second on, loom-run replays the step's
CUDA graph with the timestamps recorded in it, so the last traced step is
timed as the untraced steps run. From the trace's last step, per rank:
bubble = 1 - (union of the rank's compute events) / (its span from the
first to the last event of the step); events on a *comm stream or of a
collective kind are communication, not busy. Each event names its step
(older traces: a step begins where the instruction index goes back
down). The last table pairs Loom's
1f1b, interleaved, zb-h1 and dualpipev with PyTorch's 1f1b, interleaved,
zb and dualpipev (zb-h1 has one stage a rank, PyTorch's zb two).

Speed is averaged over the steps after --warmup. MFU counts train_llama's
FLOPs per token against 4 x 989 TFLOP/s.
"""
import argparse
import ast
import copy
import inspect
import json
import os
import queue as queue_module
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from datetime import timedelta

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)

# PyTorch schedules: name -> (class in torch.distributed.pipelining, stages
# per rank, placement). "loop" places stage s on rank s % pp; "v" places
# rank r's two stages at r and 2*pp-1-r.
SCHEDULES = {
    "1f1b": ("Schedule1F1B", 1, "loop"),
    "interleaved": ("ScheduleInterleaved1F1B", 2, "loop"),
    "zb": ("ScheduleInterleavedZeroBubble", 2, "loop"),
    "zbv": ("ScheduleZBVZeroBubble", 2, "v"),
    "dualpipev": ("ScheduleDualPipeV", 2, "v"),
}
# Loom's schedule names (loom-compile --schedule) and PyTorch's closest.
PAIRS = {"1f1b": "1f1b", "interleaved": "interleaved", "zb-h1": "zb",
         "dualpipev": "dualpipev", "dualpipe": None}
# Collective kinds as loom-run names them in a trace.
COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
               "send", "recv"}
H200_BF16 = 989e12


def model_args(ap):
    """train_llama.model_args, taken from train_llama.py's source: importing
    train_llama imports torch, and --help and --dry-run must work without it."""
    path = os.path.join(BENCH, "train_llama.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "model_args")
    scope = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), scope)
    scope["model_args"](ap)


def stages_of(rank, pp, schedule):
    """The stage indices rank `rank` holds, in increasing order."""
    _, local, placement = SCHEDULES[schedule]
    if placement == "v":
        return [rank, 2 * pp - 1 - rank]
    return [rank + v * pp for v in range(local)]


def layers_of(stage, num_stages, layers):
    """The decoder layers [first, last) of stage `stage`."""
    per = layers // num_stages
    return stage * per, (stage + 1) * per


def describe_stage(stage, num_stages, layers):
    lo, hi = layers_of(stage, num_stages, layers)
    parts = ["embedding"] if stage == 0 else []
    parts.append("layers %d-%d" % (lo, hi - 1))
    if stage == num_stages - 1:
        parts.append("norm + head + loss")
    return "stage %d: %s" % (stage, ", ".join(parts))


# --- PyTorch ---------------------------------------------------------------

def build_stage_modules(model, stage_ids, num_stages, args, device):
    """The nn.Modules of stages `stage_ids`, sharing `model`'s parameters
    (moved to `device`). Each runs its layers through transformers' own
    LlamaModel.forward (the causal mask, rotary tables and attention kernel
    choice of the one-GPU run), under the same bf16 autocast as train_llama."""
    import torch
    from transformers import LlamaModel

    causal = model.model  # train_llama.LogitsOnly -> LlamaForCausalLM
    llama = causal.model  # LlamaModel: embed_tokens, layers, norm, rotary_emb

    class Stage(torch.nn.Module):
        def __init__(self, piece, head, first):
            super().__init__()
            self.piece = piece
            self.head = head  # the LM head on the last stage, else None
            self.first = first

        def forward(self, x):
            # Autocast inside the stage: the pipeline's shape inference and
            # the real steps see the same dtypes (the residual stream stays
            # f32 between stages, as in the unsplit model; logits bf16).
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if self.first:
                    h = self.piece(input_ids=x, use_cache=False).last_hidden_state
                else:
                    h = self.piece(inputs_embeds=x, use_cache=False).last_hidden_state
                return self.head(h) if self.head is not None else h

    modules = []
    for s in stage_ids:
        lo, hi = layers_of(s, num_stages, args.layers)
        first, last = s == 0, s == num_stages - 1
        # A LlamaModel of hi-lo layers made on the meta device (no memory),
        # then given the real modules of this stage.
        cfg = copy.deepcopy(llama.config)
        cfg.num_hidden_layers = hi - lo
        with torch.device("meta"):
            piece = LlamaModel(cfg)
        piece.embed_tokens = llama.embed_tokens if first else None
        piece.layers = torch.nn.ModuleList(llama.layers[lo:hi])
        piece.norm = llama.norm if last else torch.nn.Identity()
        piece.rotary_emb = llama.rotary_emb
        stage = Stage(piece, causal.lm_head if last else None, first)
        left = [n for n, t in list(stage.named_parameters()) + list(stage.named_buffers())
                if t.is_meta]
        if left:
            raise RuntimeError("stage %d still has meta tensors: %s" % (s, left))
        modules.append(stage.to(device).train())
    return modules


def clip_by_global_norm(params, max_norm, group=None):
    """clip_grad_norm_ over every rank's parameters: each rank's sum of
    squared gradient norms, all-reduced, then the same clamped scale as
    torch.nn.utils.clip_grad_norm_. Returns the global norm (a tensor)."""
    import torch
    import torch.distributed as dist
    grads = [p.grad for p in params if p.grad is not None]
    squares = torch.stack([torch.linalg.vector_norm(g, 2.0) for g in grads]).square().sum()
    dist.all_reduce(squares, group=group)
    norm = squares.sqrt()
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    return norm


def schedule_class(name):
    from torch.distributed import pipelining
    cls_name = SCHEDULES[name][0]
    cls = getattr(pipelining, cls_name, None)
    if cls is None:  # not every version exports every schedule from the package
        from torch.distributed.pipelining import schedules
        cls = getattr(schedules, cls_name, None)
    if cls is None:
        raise RuntimeError("this PyTorch has no torch.distributed.pipelining.%s" % cls_name)
    return cls


def torch_worker(rank, world, name, port, args, work, results):
    """One rank of a PyTorch pipeline run; puts a dict (or its error) on `results`."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from safetensors.torch import load_file
    import train_llama

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = torch.device("cuda", rank)
    try:
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device,
                                timeout=timedelta(seconds=args.timeout))
        model = train_llama.build(args)
        model.load_state_dict(load_file(os.path.join(work, "weights.safetensors")))
        num_stages = world * SCHEDULES[name][1]
        stage_ids = stages_of(rank, world, name)
        modules = build_stage_modules(model, stage_ids, num_stages, args, device)
        del model
        stages = [PipelineStage(m, s, num_stages, device) for m, s in zip(modules, stage_ids)]

        def loss_fn(logits, target):
            # train_llama's loss: mean cross-entropy of the next token, in f32.
            return torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))

        cls = schedule_class(name)
        if SCHEDULES[name][1] == 1:
            schedule = cls(stages[0], args.batch, loss_fn=loss_fn, scale_grads=True)
        else:
            schedule = cls(stages, args.batch, loss_fn=loss_fn, scale_grads=True)
        # The last stage's outputs (8 x 2048 x 32000 logits) are only kept
        # for step() to return them; newer versions let it skip that.
        extra = {}
        if "return_outputs" in inspect.signature(schedule.step).parameters:
            extra["return_outputs"] = False
        has_first, has_last = 0 in stage_ids, num_stages - 1 in stage_ids

        params = list({id(p): p for m in modules for p in m.parameters()}.values())
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

        stream = np.fromfile(os.path.join(work, "tokens.u32"), dtype=np.uint32)
        seq, batch = args.seq, args.batch
        torch.cuda.reset_peak_memory_stats(device)
        times, losses, norms = [], [], []
        for s in range(args.steps):
            # Step s reads windows s*batch .. s*batch+batch-1 of seq+1 tokens
            # at stride seq (loom-run --sequential-data reads the same).
            rows = [stream[(s * batch + b) * seq:(s * batch + b) * seq + seq + 1]
                    for b in range(batch)]
            tokens = torch.from_numpy(np.stack(rows).astype(np.int64)).to(device)
            inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
            step_losses = []
            kwargs = dict(extra)
            if has_last:
                kwargs.update(target=targets, losses=step_losses)
            torch.cuda.synchronize(device)
            dist.barrier(device_ids=[rank])
            start = time.perf_counter()
            if has_first:
                schedule.step(inputs, **kwargs)
            else:
                schedule.step(**kwargs)
            norm = clip_by_global_norm(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize(device)
            dist.barrier(device_ids=[rank])
            times.append(time.perf_counter() - start)
            norms.append(norm.item())
            if has_last:
                losses.append(torch.stack([l.detach().float() for l in step_losses]).mean().item())
        result = {"rank": rank, "stages": stage_ids, "times": times, "grad_norms": norms,
                  "params": sum(p.numel() for p in params),
                  "peak_alloc_gib": torch.cuda.max_memory_allocated(device) / 2**30,
                  "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30}
        if has_last:
            result["losses"] = losses
        results.put(result)
        dist.destroy_process_group()
    except Exception:
        # The peers may be blocked in NCCL: no destroy_process_group here;
        # the parent ends them.
        results.put({"rank": rank, "error": traceback.format_exc()})


def run_torch(name, index, args, work):
    """One fresh 4-process launch of schedule `name`: merged results, or None."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = args.port + index
    procs = [ctx.Process(target=torch_worker, args=(r, args.pp, name, port, args, work, results))
             for r in range(args.pp)]
    print("\n== pytorch %s (%s), port %d" % (name, SCHEDULES[name][0], port), flush=True)
    for p in procs:
        p.start()
    got, error = {}, None
    deadline = time.time() + args.timeout
    while len(got) < args.pp:
        try:
            r = results.get(timeout=5)
        except queue_module.Empty:
            dead = [(i, p.exitcode) for i, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead:
                error = "rank %d exited with code %d before reporting" % dead[0]
                break
            if time.time() > deadline:
                error = "no result after --timeout %d s" % args.timeout
                break
            continue
        if "error" in r:
            error = "rank %d failed:\n%s" % (r["rank"], r["error"])
            break
        got[r["rank"]] = r
    for p in procs:
        p.join(timeout=60 if error is None else 10)
    for p in procs:  # ranks left blocked by a failed peer
        if p.is_alive():
            p.terminate()
            p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    if error:
        print("pytorch %s failed: %s" % (name, error), flush=True)
        return None
    ranks = [got[r] for r in range(args.pp)]
    # The step took as long as its slowest rank (the barriers align them).
    times = [max(r["times"][i] for r in ranks) for i in range(args.steps)]
    losses = next(r["losses"] for r in ranks if "losses" in r)
    return {"times": times, "losses": losses, "grad_norms": ranks[0]["grad_norms"],
            "placement": [r["stages"] for r in ranks],
            "peak_alloc_gib": [r["peak_alloc_gib"] for r in ranks],
            "peak_reserved_gib": [r["peak_reserved_gib"] for r in ranks]}


# --- Loom ------------------------------------------------------------------

class PeakMemoryPerGpu:
    """train_llama.PeakMemory for every GPU: nvidia-smi's memory.used (the
    CUDA context included), sampled every 0.2 s while Loom runs."""

    def __init__(self, gpus):
        self.gpus = gpus
        self.peak = {g: 0 for g in gpus}
        self.ok = True
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while self.running:
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True).stdout
            except OSError:
                self.ok = False
                return
            for line in out.splitlines():
                fields = [f.strip() for f in line.split(",")]
                if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
                    if int(fields[0]) in self.peak:
                        self.peak[int(fields[0])] = max(self.peak[int(fields[0])], int(fields[1]))
            time.sleep(0.2)

    def stop(self):
        self.running = False
        self.thread.join()
        return [self.peak[g] / 1024.0 for g in self.gpus] if self.ok else None  # GiB


def loom_command(args, executable, work, steps, metrics, trace=None):
    # scaling_llama.run_loom's command, on the pipeline's GPUs.
    cmd = [args.loom_run, executable, "--backend=cuda", "--weights",
           os.path.join(work, "weights.safetensors"), "--steps", str(steps), "--data",
           os.path.join(work, "tokens.u32"), "--sequential-data", "--lr", str(args.lr),
           "--metrics", metrics, "--log-every", "5",
           "--devices", ",".join(str(i) for i in range(args.pp))]
    if trace:
        cmd += ["--trace", trace]
    return cmd


def union_length(intervals):
    """Total length covered by (start, end) intervals."""
    total, start, end = 0.0, None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        total += end - start
    return total


def trace_bubbles(path):
    """Per rank (the trace's pid) of a loom-run --trace file, the bubble of
    its last step: {rank: {"bubble", "span_us", "busy_us", "steps"}}."""
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    streams, by_rank = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            streams[(e["pid"], e["tid"])] = e.get("args", {}).get("name", "")
        elif e.get("ph") == "X":
            by_rank.setdefault(e["pid"], []).append(e)

    def communication(e):
        return (streams.get((e["pid"], e["tid"]), "").endswith("comm") or
                e.get("name") in COLLECTIVES)

    out = {}
    for rank, rank_events in sorted(by_rank.items()):
        steps = split_steps(rank_events)
        last = steps[-1]
        begin = min(e["ts"] for e in last)
        span = max(e["ts"] + e["dur"] for e in last) - begin
        busy = union_length([(e["ts"], e["ts"] + e["dur"]) for e in last if not communication(e)])
        out[rank] = {"bubble": 1.0 - busy / span if span > 0 else 0.0, "span_us": span,
                     "busy_us": busy, "steps": len(steps),
                     "graph": all(e.get("args", {}).get("graph", False) for e in last)}
    return out


def split_steps(rank_events):
    """One rank's events, step by step: by the step loom-run names in each
    event's args, or (older traces) where the instruction index goes back
    down, since each step runs the instruction list in order."""
    if all("step" in e.get("args", {}) for e in rank_events):
        by_step = {}
        for e in rank_events:
            by_step.setdefault(e["args"]["step"], []).append(e)
        return [by_step[k] for k in sorted(by_step)]
    steps, previous = [[]], None
    for e in rank_events:
        instruction = e.get("args", {}).get("instruction")
        if previous is not None and instruction is not None and instruction <= previous:
            steps.append([])
        steps[-1].append(e)
        previous = instruction
    return steps


def run_bounded(cmd, seconds):
    """subprocess.run's exit code, or -1 when the command ran past `seconds`
    (a hung run must not take the rest of the benchmark with it)."""
    try:
        return subprocess.run(cmd, timeout=seconds).returncode
    except subprocess.TimeoutExpired:
        print("timed out after %d s: %s" % (seconds, " ".join(cmd)), flush=True)
        return -1


def run_loom(name, executable, args, work):
    """The timed run and the traced run of one executable; None if loom-run failed."""
    print("\n== loom %s" % name, flush=True)
    metrics = os.path.join(work, "loom_%s.jsonl" % name)
    cmd = loom_command(args, executable, work, args.steps, metrics)
    print("$", " ".join(cmd), flush=True)
    mem = PeakMemoryPerGpu(list(range(args.pp)))
    code = run_bounded(cmd, args.loom_timeout)
    peak = mem.stop()
    if code != 0:
        print("loom-run failed for %s (exit code %d)" % (name, code), flush=True)
        return None
    lines = [json.loads(l) for l in open(metrics)]
    result = {"times": [l["step_time_s"] for l in lines], "losses": [l["loss"] for l in lines],
              "grad_norms": [l.get("grad_norm") for l in lines], "peak_used_gib": peak,
              "bubble_per_rank": None}
    if args.loom_trace_steps > 0:
        trace = os.path.join(work, "loom_%s_trace.json" % name)
        if os.path.exists(trace):  # an earlier run's, in a reused --work
            os.remove(trace)
        cmd = loom_command(args, executable, work, args.loom_trace_steps,
                           os.path.join(work, "loom_%s_trace.jsonl" % name), trace)
        print("$", " ".join(cmd), flush=True)
        if run_bounded(cmd, args.loom_timeout) != 0 or not os.path.exists(trace):
            print("loom-run --trace failed for %s: no bubble" % name, flush=True)
        else:
            result["bubble_per_rank"] = trace_bubbles(trace)
            result["trace"] = trace
    return result


# --- Command line and report --------------------------------------------

def parse_pairs(entries, flag):
    out = {}
    for entry in entries:
        if "=" not in entry:
            sys.exit("%s expects NAME=VALUE, got '%s'" % (flag, entry))
        name, value = entry.split("=", 1)
        out[name] = value
    return out


def dry_run(args, torch_names, looms, predicted):
    work = args.work or "WORK"
    args.loom_run = args.loom_run or "loom-run"
    print("model: %d layers, hidden %d, FFN %d, %d heads, vocab %d, sequence %d" %
          (args.layers, args.hidden, args.ffn, args.heads, args.vocab, args.seq))
    print("step: %d microbatches of 1 x %d tokens on %d GPUs, %d steps (timing from step %d)" %
          (args.batch, args.seq, args.pp, args.steps, args.warmup + 1))
    print("work files: %s/weights.safetensors, %s/tokens.u32 (%d tokens)%s" %
          (work, work, max(args.steps, args.loom_trace_steps) * args.batch * args.seq + 1,
           "" if args.work else "; WORK: a new temporary directory"))
    for name in torch_names:
        cls, local, placement = SCHEDULES[name]
        n = args.pp * local
        print("\npytorch %s: %s, %d stages of %d layers, %s placement" %
              (name, cls, n, args.layers // n, placement))
        for r in range(args.pp):
            print("  rank %d (cuda:%d): %s" % (r, r, "; ".join(
                describe_stage(s, n, args.layers) for s in stages_of(r, args.pp, name))))
    for name, exe in looms.items():
        print("\nloom %s (pytorch pair: %s%s):" % (
            name, PAIRS.get(name) or "none",
            "; predicted bubble %.1f%%" % (predicted[name] * 100) if name in predicted else ""))
        print("  $", " ".join(loom_command(args, exe, work, args.steps,
                                           "%s/loom_%s.jsonl" % (work, name))))
        if args.loom_trace_steps > 0:
            print("  $", " ".join(loom_command(
                args, exe, work, args.loom_trace_steps, "%s/loom_%s_trace.jsonl" % (work, name),
                "%s/loom_%s_trace.json" % (work, name))))


def validate(args, torch_names, looms):
    if args.steps <= args.warmup:
        sys.exit("--steps must be larger than --warmup")
    for name in torch_names:
        if name not in SCHEDULES:
            sys.exit("--torch: unknown schedule '%s' (known: %s)" % (name, ", ".join(SCHEDULES)))
        n = args.pp * SCHEDULES[name][1]
        if args.layers % n:
            sys.exit("--torch %s: %d layers do not split into %d equal stages" %
                     (name, args.layers, n))
        if args.batch < n:
            sys.exit("--torch %s: %d stages need at least as many microbatches (--batch)" %
                     (name, n))
    if looms and not args.loom_run and not args.dry_run:
        sys.exit("--loom needs --loom-run")


def summarize(args, fpt, framework, name, result, **more):
    """One row of the tables: speed over the steps after --warmup, MFU, the
    mean loss of the last 5 steps and, for Loom, the mean traced bubble."""
    timed = result["times"][args.warmup:]
    step = sum(timed) / len(timed)
    tps = args.batch * args.seq / step
    row = {"framework": framework, "schedule": name, "step_s": step, "tokens_per_s": tps,
           "mfu": tps * fpt / (args.pp * H200_BF16),
           "loss_last5": sum(result["losses"][-5:]) / len(result["losses"][-5:]),
           "bubble": None}
    per_rank = result.get("bubble_per_rank")
    if per_rank:
        row["bubble"] = sum(b["bubble"] for b in per_rank.values()) / len(per_rank)
    row.update(result)
    row.update(more)
    return row


def report(args, rows, params, fpt, work):
    """The two tables, the bubbles per rank, the first losses, and --json."""
    print("\nmodel: %.3fB parameters, %d microbatches x %d tokens a step on %d GPUs, "
          "bf16 compute, f32 master weights, AdamW; speed over steps %d-%d" %
          (params / 1e9, args.batch, args.seq, args.pp, args.warmup + 1, args.steps))
    print("%-8s %-12s %10s %10s %7s %7s %10s %10s %10s" %
          ("", "schedule", "step (ms)", "tokens/s", "MFU", "bubble", "alloc GiB", "GPU GiB",
           "loss"))
    for r in rows:
        alloc = max(r["peak_alloc_gib"]) if r.get("peak_alloc_gib") else None
        gpu = r.get("peak_reserved_gib") or r.get("peak_used_gib")
        print("%-8s %-12s %10.1f %10.0f %6.1f%% %7s %10s %10s %10.4f" %
              (r["framework"], r["schedule"], r["step_s"] * 1e3, r["tokens_per_s"], r["mfu"] * 100,
               "%.1f%%" % (r["bubble"] * 100) if r.get("bubble") is not None else "-",
               "%.1f" % alloc if alloc is not None else "-",
               "%.1f" % max(gpu) if gpu else "-", r["loss_last5"]))
    print("(bubble: Loom's, measured in its trace, mean over the ranks traced; "
          "alloc: PyTorch's max_memory_allocated; GPU: PyTorch's max_memory_reserved, Loom's "
          "nvidia-smi memory.used with the CUDA context; memory: the largest over the GPUs; "
          "loss: mean of the last 5 steps)")

    for r in rows:
        if r["framework"] == "loom" and r.get("bubble_per_rank"):
            per_rank = r["bubble_per_rank"]
            print("\nloom %s bubble, last of %d traced steps (%s): %s; mean %.1f%%%s" % (
                r["schedule"], max(b["steps"] for b in per_rank.values()),
                "a CUDA graph replay" if all(b.get("graph") for b in per_rank.values())
                else "issued eagerly",
                ", ".join("rank %s %.1f%% (%.1f of %.1f ms busy)" %
                          (k, b["bubble"] * 100, b["busy_us"] / 1e3, b["span_us"] / 1e3)
                          for k, b in per_rank.items()),
                r["bubble"] * 100,
                "; predicted %.1f%%" % (r["predicted_bubble"] * 100)
                if r.get("predicted_bubble") is not None else ""))
            if len(per_rank) < args.pp:
                print("  (the trace holds %d of the %d ranks: loom-run --trace records rank 0's "
                      "kernels only)" % (len(per_rank), args.pp))

    pairs = []
    by_key = {(r["framework"], r["schedule"]): r for r in rows}
    for r in rows:
        if r["framework"] != "loom":
            continue
        other = PAIRS.get(r["schedule"])
        t = by_key.get(("pytorch", other)) if other else None
        pairs.append({"loom": r["schedule"], "pytorch": other,
                      "loom_tokens_per_s": r["tokens_per_s"],
                      "pytorch_tokens_per_s": t["tokens_per_s"] if t else None,
                      "ratio": r["tokens_per_s"] / t["tokens_per_s"] if t else None})
    if pairs:
        print("\n%-12s %-12s %12s %14s %13s" %
              ("loom", "pytorch", "loom tok/s", "pytorch tok/s", "loom/pytorch"))
        for p in pairs:
            print("%-12s %-12s %12.0f %14s %13s" % (
                p["loom"], p["pytorch"] or "(none)", p["loom_tokens_per_s"],
                "%.0f" % p["pytorch_tokens_per_s"] if p["ratio"] else "-",
                "%.3f" % p["ratio"] if p["ratio"] else "-"))
    print("\nfirst losses:")
    for r in rows:
        print("%-8s %-12s %s" % (r["framework"], r["schedule"],
                                 " ".join("%.4f" % l for l in r["losses"][:10])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": {"parameters": params, "layers": args.layers,
                                 "hidden": args.hidden, "ffn": args.ffn, "heads": args.heads,
                                 "vocab": args.vocab, "seq": args.seq},
                       "config": {"gpus": args.pp, "microbatches": args.batch,
                                  "steps": args.steps, "warmup": args.warmup, "lr": args.lr,
                                  "flops_per_token": fpt, "peak_flops_per_gpu": H200_BF16,
                                  "work": work},
                       "rows": rows, "pairs": pairs}, f, indent=1)
        print("wrote", args.json)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch", default=",".join(SCHEDULES),
                    help="PyTorch schedules to run, comma-separated ('' for none; default: all)")
    ap.add_argument("--loom-run", help="path to loom-run (for --loom)")
    ap.add_argument("--loom-timeout", type=int, default=240,
                    help="seconds one loom-run may take before it counts as failed")
    ap.add_argument("--loom", action="append", default=[], metavar="NAME=EXECUTABLE",
                    help="a Loom pipelined training executable; NAME is its schedule "
                         "(1f1b, interleaved, zb-h1, dualpipev or dualpipe)")
    ap.add_argument("--loom-trace-steps", type=int, default=3,
                    help="steps of the traced Loom run that measures the bubble (0: none)")
    ap.add_argument("--predicted", action="append", default=[], metavar="NAME=FRACTION",
                    help="a Loom schedule's predicted bubble, printed beside the measured one")
    ap.add_argument("--pp", type=int, default=4, help="GPUs (pipeline ranks)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the timing")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--port", type=int, default=29531,
                    help="PyTorch's rendezvous port (the k-th schedule uses PORT+k)")
    ap.add_argument("--timeout", type=int, default=1800,
                    help="seconds a PyTorch schedule may take before it is given up")
    ap.add_argument("--work", help="directory for the weights, tokens and Loom's files "
                                   "(default: a new temporary directory)")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the stage placements and Loom commands; run nothing")
    model_args(ap)
    # --batch is the global batch: that many microbatches of one sequence.
    ap.set_defaults(batch=8)
    args = ap.parse_args()
    torch_names = [n for n in args.torch.split(",") if n and n != "none"]
    looms = parse_pairs(args.loom, "--loom")
    predicted = {k: float(v) for k, v in parse_pairs(args.predicted, "--predicted").items()}
    validate(args, torch_names, looms)
    if args.dry_run:
        dry_run(args, torch_names, looms, predicted)
        return

    import numpy as np
    from safetensors.torch import save_file
    import train_llama

    # Identical initial weights and tokens for every run (scaling_llama's files).
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    model = train_llama.build(args)
    params = sum(p.numel() for p in model.parameters())
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(work, "weights.safetensors"))
    del model
    windows = max(args.steps, args.loom_trace_steps) * args.batch
    rng = np.random.default_rng(args.seed)
    rng.integers(0, args.vocab, size=windows * args.seq + 1,
                 dtype=np.uint32).tofile(os.path.join(work, "tokens.u32"))
    fpt = train_llama.flops_per_token(params, args)
    print("work directory:", work, flush=True)

    rows = []
    for name, exe in looms.items():
        result = run_loom(name, exe, args, work)
        if result:
            rows.append(summarize(args, fpt, "loom", name, result, executable=exe,
                                  predicted_bubble=predicted.get(name)))
    for index, name in enumerate(torch_names):
        result = run_torch(name, index, args, work)
        if result:
            rows.append(summarize(args, fpt, "pytorch", name, result,
                                  schedule_class=SCHEDULES[name][0]))
    report(args, rows, params, fpt, work)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Multi-GPU scaling of the 0.95B Llama: Loom's data- and tensor-parallel
executables beside PyTorch DDP on the same GPUs, in one run.

Every configuration trains on batch 4 x 2048 tokens per data-parallel rank
(a DP4 step consumes 16 sequences), bf16 compute with f32 master weights and
AdamW, from the identical initial weights of bench/train_llama.py's model.

Steps (the GPU machine has no MLIR; Loom compiles elsewhere):

  1. On the GPU machine: python3 bench/train_llama.py export --out OUT
  2. Here, one executable per layout, e.g.
       loom-compile OUT/model.pt2 --mode=train --embed-weights=false \\
           --precision=bf16 --batch 16 --dp 4 -o dp4.loomx
       loom-compile OUT/model.pt2 ... --batch 4 --tp 4 -o tp4.loomx
     DP gradients are reduced in buckets of --dp-bucket-mb MiB (default 25,
     DDP's default; this script's DDP runs use bucket_cap_mb=100, so
     compile with --dp-bucket-mb 100 to match it, 0 for one per gradient).
  3. On the GPU machine (nvidia-h200-x4):
       python3 bench/scaling_llama.py --loom-run build/bin/loom-run \\
           --loom dp1=train.loomx:1:4 --loom dp4=dp4.loomx:4:16 \\
           --loom tp4=tp4.loomx:4:4 --ddp 1,4 --steps 20

Each --loom is NAME=EXECUTABLE:GPUS:GLOBAL_BATCH. Scaling efficiency of a
data-parallel run is its tokens/s over GPUS x the one-GPU tokens/s of the
same framework (Loom's dp1 row, DDP's 1-GPU row).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_llama  # noqa: E402  (the model, its export and the FLOP count)


def ddp_worker(rank, world, args, work, queue):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    from safetensors.torch import load_file
    model = train_llama.build(args)
    model.load_state_dict(load_file(os.path.join(work, "weights.safetensors")))
    model = model.cuda().train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank], bucket_cap_mb=100)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    stream = np.fromfile(os.path.join(work, "tokens.u32"), dtype=np.uint32)
    seq, batch = args.seq, args.batch
    times, losses = [], []
    for s in range(args.steps):
        # Global batch world*batch windows in file order; this rank's block.
        first = (s * world + rank) * batch
        rows = [stream[(first + b) * seq:(first + b) * seq + seq + 1] for b in range(batch)]
        tokens = torch.from_numpy(np.stack(rows).astype(np.int64)).cuda()
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = ddp(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, args.vocab),
                                                 tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if rank == 0:
        queue.put({"times": times, "losses": losses,
                   "peak_gib": torch.cuda.max_memory_allocated() / 2**30})
    dist.destroy_process_group()


def run_ddp(world, args, work):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=ddp_worker, args=(r, world, args, work, queue)) for r in range(world)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    return result


def run_loom(name, spec, args, work):
    executable, gpus, global_batch = spec.rsplit(":", 2)
    gpus, global_batch = int(gpus), int(global_batch)
    metrics = os.path.join(work, name + ".jsonl")
    cmd = [args.loom_run, executable, "--backend=cuda", "--weights",
           os.path.join(work, "weights.safetensors"), "--steps", str(args.steps), "--data",
           os.path.join(work, "tokens.u32"), "--sequential-data", "--lr", str(args.lr),
           "--metrics", metrics, "--log-every", "5"]
    if gpus > 1:
        cmd += ["--devices", ",".join(str(i) for i in range(gpus))]
    print("$", " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        print("loom-run failed for", name, flush=True)
        return None
    lines = [json.loads(l) for l in open(metrics)]
    return {"times": [l["step_time_s"] for l in lines], "losses": [l["loss"] for l in lines],
            "gpus": gpus, "global_batch": global_batch}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom-run")
    ap.add_argument("--loom", action="append", default=[], metavar="NAME=EXE:GPUS:BATCH")
    ap.add_argument("--ddp", default="1,4", help="GPU counts for PyTorch DDP (comma-separated)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--out")
    train_llama.model_args(ap)
    args = ap.parse_args()

    from safetensors.torch import save_file
    work = tempfile.mkdtemp()
    model = train_llama.build(args)
    params = sum(p.numel() for p in model.parameters())
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              os.path.join(work, "weights.safetensors"))
    del model
    most = max([int(g) for g in args.ddp.split(",")] +
               [int(s.rsplit(":", 2)[2]) // args.batch for s in [x.split("=", 1)[1] for x in args.loom]] + [1])
    rng = np.random.default_rng(args.seed)
    rng.integers(0, args.vocab, size=args.steps * most * args.batch * args.seq + 1,
                 dtype=np.uint32).tofile(os.path.join(work, "tokens.u32"))
    fpt = train_llama.flops_per_token(params, args)

    rows = []

    def summarize(name, framework, gpus, global_batch, result):
        warm = result["times"][3:] if len(result["times"]) > 4 else result["times"]
        step = sum(warm) / len(warm)
        tps = global_batch * args.seq / step
        rows.append({"name": name, "framework": framework, "gpus": gpus, "tokens_per_s": tps,
                     "per_gpu": tps / gpus, "step_s": step, "mfu": tps * fpt / 989e12 / gpus,
                     "losses": result["losses"]})

    for entry in args.loom:
        name, spec = entry.split("=", 1)
        result = run_loom(name, spec, args, work)
        if result:
            summarize("loom " + name, "loom", result["gpus"], result["global_batch"], result)
    for world in [int(g) for g in args.ddp.split(",")]:
        if world > torch.cuda.device_count():
            continue
        result = run_ddp(world, args, work)
        summarize("ddp %d" % world, "ddp", world, world * args.batch, result)

    base = {}
    for r in rows:
        if r["gpus"] == 1:
            base.setdefault(r["framework"], r["tokens_per_s"])
    print("\nmodel: %.3fB parameters, %d x %d tokens per data-parallel rank" %
          (params / 1e9, args.batch, args.seq))
    print("%-12s %5s %12s %12s %10s %7s %11s" %
          ("", "GPUs", "tokens/s", "per GPU", "step (ms)", "MFU", "efficiency"))
    for r in rows:
        eff = r["tokens_per_s"] / (r["gpus"] * base[r["framework"]]) if r["framework"] in base else 0
        r["efficiency"] = eff
        print("%-12s %5d %12.0f %12.0f %10.1f %6.1f%% %10.1f%%" %
              (r["name"], r["gpus"], r["tokens_per_s"], r["per_gpu"], r["step_s"] * 1e3,
               r["mfu"] * 100, eff * 100))
    print("\nfirst losses (mean over the global batch):")
    for r in rows:
        print("%-12s %s" % (r["name"], " ".join("%.4f" % l for l in r["losses"][:10])))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "scaling.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

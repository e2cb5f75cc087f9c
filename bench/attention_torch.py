"""PyTorch's scaled_dot_product_attention at the shapes loom-attention-bench
times (bench/cuda/AttentionBench.cpp), on its cuDNN and flash backends:
forward and backward milliseconds and TFLOP/s (backward FLOPs = 2.5 x
forward; causal counts half the scores). Run on the GPU machine beside
loom-attention-bench; docs/performance.md gives the command and figures.

    python3 bench/attention_torch.py [--iterations 20]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, iterations):
    for _ in range(3):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iterations


def single_launch_ms(fn, iterations):
    """Each launch timed alone (a synchronize between): (min, median) ms."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[0], times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--problems", default="4,16,16,2048,128;1,32,8,8192,128",
                        help="causal bf16 problems B,HQ,HKV,S,D[,WINDOW] separated by ';' "
                             "(WINDOW: a sliding window, each query seeing its last WINDOW keys)")
    parser.add_argument("--init", choices=["normal", "uniform"], default="normal",
                        help="the inputs' distribution (as loom-attention-bench's --init)")
    args = parser.parse_args()
    try:
        problems = [tuple(int(x) for x in p.split(",")) for p in args.problems.split(";") if p]
        if any(len(p) not in (5, 6) or min(p) <= 0 for p in problems):
            raise ValueError
    except ValueError:
        parser.error(f"--problems: '{args.problems}' is not B,HQ,HKV,S,D[,WINDOW][;...] of "
                     "positive integers")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"cuDNN {torch.backends.cudnn.version()}")
    print(f"{'problem':34s} {'backend':7s} {'fwd (ms)':>10s} {'fwd TF/s':>9s} "
          f"{'bwd (ms)':>10s} {'bwd TF/s':>9s}")
    for problem in problems:
        b, hq, hkv, s, d = problem[:5]
        window = problem[5] if len(problem) == 6 else 0
        if window:
            windowed(args, b, hq, hkv, s, d, window)
            continue
        label = f"[{b},{hq}q/{hkv}kv,{s},{d}] causal bf16"
        flops = 4.0 * b * hq * s * s * d * 0.5
        gen = torch.Generator(device="cuda").manual_seed(0)

        def draw(*shape):
            t = torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen)
            if args.init == "uniform":
                t = torch.rand(*shape, device="cuda", dtype=torch.float32, generator=gen) * 2 - 1
            return t.to(torch.bfloat16)
        q = draw(b, hq, s, d)
        k = draw(b, hkv, s, d)
        v = draw(b, hkv, s, d)
        dout = draw(b, hq, s, d)
        for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)]:
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            try:
                with sdpa_kernel(backend):
                    gqa = hq != hkv
                    fwd = lambda: F.scaled_dot_product_attention(qq, kk, vv, is_causal=True,
                                                                 enable_gqa=gqa)
                    f = time_ms(fwd, args.iterations)
                    out = fwd()
                    bwd = lambda: torch.autograd.grad(out, (qq, kk, vv), dout, retain_graph=True)
                    g = time_ms(bwd, args.iterations)
                print(f"{label:34s} {name:7s} {f:10.3f} {flops / f / 1e9:9.0f} "
                      f"{g:10.3f} {2.5 * flops / g / 1e9:9.0f}")
                with sdpa_kernel(backend):
                    fmin, fmed = single_launch_ms(fwd, args.iterations)
                    gmin, gmed = single_launch_ms(bwd, args.iterations)
                print(f"{'':34s} {name:7s} {fmin:10.3f} {flops / fmin / 1e9:9.0f} "
                      f"{gmin:10.3f} {2.5 * flops / gmin / 1e9:9.0f}   (one launch at a time: "
                      f"min; median {fmed:.3f} / {gmed:.3f})")
            except Exception as e:  # a backend that does not take the problem
                print(f"{label:34s} {name:7s} unavailable: {str(e).splitlines()[0][:100]}")


def windowed(args, b, hq, hkv, s, d, window):
    """A sliding window: PyTorch's fastest forms of it, flex_attention with a
    sliding-window block mask (compiled; it skips the blocks outside the
    window) and SDPA given the band as a boolean mask (efficient and cuDNN
    backends, which read the mask)."""
    label = f"[{b},{hq}q/{hkv}kv,{s},{d}] causal window {window} bf16"
    w = min(window, s)
    flops = 4.0 * b * hq * d * (w * (w + 1) / 2 + (s - w) * w)
    gen = torch.Generator(device="cuda").manual_seed(0)
    draw = lambda *shape: torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)
    q, k, v, dout = draw(b, hq, s, d), draw(b, hkv, s, d), draw(b, hkv, s, d), draw(b, hq, s, d)
    rows = torch.arange(s, device="cuda")[:, None]
    cols = torch.arange(s, device="cuda")[None, :]
    band = (cols <= rows) & (cols > rows - window)
    runs = []
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        mask_mod = lambda bb, h, qi, kv: (kv <= qi) & (kv > qi - window)
        block = create_block_mask(mask_mod, None, None, s, s, device="cuda")
        flex = torch.compile(flex_attention)
        runs.append(("flex", lambda qq, kk, vv: flex(qq, kk, vv, block_mask=block,
                                                     enable_gqa=hq != hkv)))
    except Exception as e:
        print(f"{label:34s} flex    unavailable: {str(e).splitlines()[0][:100]}")
    for name, backend in [("effic.", SDPBackend.EFFICIENT_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
        def sdpa(qq, kk, vv, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=band,
                                                      enable_gqa=hq != hkv)
        runs.append((name, sdpa))
    for name, run in runs:
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        try:
            fwd = lambda: run(qq, kk, vv)
            fwd()
            f = time_ms(fwd, args.iterations)
            # The backward as (forward + backward) - forward: a compiled
            # flex_attention backward cannot be run twice on one graph.
            both = lambda: torch.autograd.grad(fwd(), (qq, kk, vv), dout)
            g = time_ms(both, args.iterations) - f
            print(f"{label:34s} {name:7s} {f:10.3f} {flops / f / 1e9:9.0f} "
                  f"{g:10.3f} {2.5 * flops / g / 1e9:9.0f}")
        except Exception as e:
            print(f"{label:34s} {name:7s} unavailable: {str(e).splitlines()[0][:100]}")


if __name__ == "__main__":
    main()

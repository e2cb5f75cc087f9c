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
                        help="causal bf16 problems B,HQ,HKV,S,D separated by ';'")
    parser.add_argument("--init", choices=["normal", "uniform"], default="normal",
                        help="the inputs' distribution (as loom-attention-bench's --init)")
    args = parser.parse_args()
    try:
        problems = [tuple(int(x) for x in p.split(",")) for p in args.problems.split(";") if p]
        if any(len(p) != 5 or min(p) <= 0 for p in problems):
            raise ValueError
    except ValueError:
        parser.error(f"--problems: '{args.problems}' is not B,HQ,HKV,S,D[;...] of positive integers")
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"cuDNN {torch.backends.cudnn.version()}")
    print(f"{'problem':34s} {'backend':7s} {'fwd (ms)':>10s} {'fwd TF/s':>9s} "
          f"{'bwd (ms)':>10s} {'bwd TF/s':>9s}")
    for b, hq, hkv, s, d in problems:
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


if __name__ == "__main__":
    main()

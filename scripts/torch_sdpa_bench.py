#!/usr/bin/env python3
"""PyTorch's side of fleet's attention benchmark (scripts/gpu-check.sh quick).

Times causal scaled_dot_product_attention in bf16 on the GPU, forward and
forward with backward, on the shapes BenchmarkGPUAttention (backend/gpu)
times fleet's kernels on: B 16, T 1024, C 768, heads of 64 and of 128. q, k
and v are views of one packed [B, T, 3C] tensor, as nanoGPT makes them.
Prints one line per shape and pass: the median ms per call over the timed
calls (CUDA events) and TFLOP/s counted as fleet counts them (causal pairs
times 4·hd forward, 10·hd with the backward).
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def time_calls(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    torch.manual_seed(0)
    b, t, c = a.batch, a.block, a.embd
    for heads in (c // 64, c // 128):
        hd = c // heads
        qkv = torch.randn(b, t, 3 * c, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(b, heads, t, hd, device="cuda", dtype=torch.bfloat16)

        def fwd():
            q, k, v = (z.view(b, t, heads, hd).transpose(1, 2) for z in qkv.split(c, dim=2))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            fwd().backward(dout)

        pairs = b * heads * t * (t + 1) / 2
        with torch.no_grad():
            ms = time_calls(fwd, a.warmup, a.reps)
        print(f"sdpa hd{hd} fwd: {ms:.3f} ms/call, {pairs * 4 * hd / ms / 1e9:.1f} TFLOP/s")
        ms = time_calls(fwd_bwd, a.warmup, a.reps)
        print(f"sdpa hd{hd} fwd+bwd: {ms:.3f} ms/call, {pairs * 10 * hd / ms / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()

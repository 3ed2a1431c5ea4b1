#!/usr/bin/env python3
"""PyTorch side of fleet's GPU benchmark (scripts/gpu-check.sh quick).

Times training steps of the same GPT fleet trains (pre-LayerNorm blocks,
tanh-GELU MLP, tied head, no biases, GPT-2 init) on random tokens, the way
a PyTorch user would run it: bf16 autocast, flash attention through
scaled_dot_product_attention, fused AdamW, gradient clipping at 1.0. Eager by
default; --compile adds torch.compile. Prints one JSON line: tokens/s and
ms/step (medians over the timed steps), MFU against --peak-tflops in
llm.c's FLOPs per token (6 per parameter plus 6·layers·embd·block, as fleet
quotes it) and in PaLM's (12·layers·embd·block for attention), and the peak
memory PyTorch allocated.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c, bias=False)
        self.c_attn = nn.Linear(c, 3 * c, bias=False)
        self.attn_proj = nn.Linear(c, c, bias=False)
        self.ln_2 = nn.LayerNorm(c, bias=False)
        self.c_fc = nn.Linear(c, 4 * c, bias=False)
        self.mlp_proj = nn.Linear(4 * c, c, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=65)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=989.4, help="dense bf16 peak (H100/H200 SXM)")
    a = ap.parse_args()

    torch.manual_seed(1337)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT(a.vocab_size, a.block_size, a.n_layer, a.n_head, a.n_embd).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_fn = model
    if a.compile:
        step_fn = torch.compile(model)
    B, T = a.batch_size, a.block_size
    ms = []
    for s in range(a.warmup + a.steps):
        x = torch.randint(0, a.vocab_size, (B, T), device=dev)
        y = torch.randint(0, a.vocab_size, (B, T), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        torch.cuda.synchronize()
        if s >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1000)
    med = statistics.median(ms)
    tps = B * T / (med / 1000)
    flops_per_token = 6 * nparams + 6 * a.n_layer * a.n_embd * T
    flops_per_token_palm = 6 * nparams + 12 * a.n_layer * a.n_embd * T
    print(json.dumps({
        "system": "pytorch " + torch.__version__ + (" compile" if a.compile else " eager") + " bf16 autocast",
        "params": nparams,
        "ms_per_step": round(med, 3),
        "tokens_per_s": round(tps),
        "mfu": round(100 * tps * flops_per_token / (a.peak_tflops * 1e12), 2),
        "mfu_palm": round(100 * tps * flops_per_token_palm / (a.peak_tflops * 1e12), 2),
        "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
    }))


if __name__ == "__main__":
    main()

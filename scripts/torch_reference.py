#!/usr/bin/env python3
"""PyTorch side of fleet's side-by-side benchmark.

Trains the same character-level GPT as `fleet train` (pre-LayerNorm blocks,
tanh-GELU MLP, tied head, no biases when --bias is off, GPT-2 init) with
the same data split, schedule and optimizer, and reports what fleet's
summary.json reports: the median over steps (skipping the first 5,
evaluation excluded) of each step's tokens per second, and the best
validation loss of periodic evaluations.

Run from the repository root, for example:

  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 /usr/bin/python3 scripts/torch_reference.py \
      --data ../shared/data/tinyshakespeare.txt --max-iters 2000

It needs only torch (Debian's python3-torch works).

For a paired comparison of training quality, --fleet-windows draws every
training and evaluation window exactly as fleet's sampler does (the same
seed gives the same windows in both), and --save-init FILE writes the
initial weights as a GPT-2 safetensors file for `fleet train --init-from
FILE`. The two programs then start from the same weights and see the same
data, so what is left between their losses is arithmetic: the order of
sums, the rounding of exp and tanh.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, h, bias):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(c, elementwise_affine=True)
        self.c_attn = nn.Linear(c, 3 * c, bias=bias)
        self.attn_proj = nn.Linear(c, c, bias=bias)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c, bias=bias)
        self.mlp_proj = nn.Linear(4 * c, c, bias=bias)
        if not bias:
            self.ln_1.bias = None
            self.ln_2.bias = None

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q = q.view(b, t, self.h, c // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, c // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, c // self.h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.h)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd, bias):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, bias) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        if not bias:
            self.ln_f.bias = None
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for b in self.blocks:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15


def _splitmix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def fleet_offset(seed, stream, step, j, n):
    """Where window j of step starts in fleet's sampler (data.Sampler.Offset)
    for a split whose windows can start at 0 .. n-1 (n = its length less
    the block size): a splitmix64 stream seeded with rng.Mix(seed, stream,
    step, j), then rng.Intn(n), Lemire's unbiased multiply-and-shift draw."""
    h = 0x243F6A8885A308D3
    for w in (seed, stream, step, j):
        h = _splitmix(h ^ _splitmix((w + _GAMMA) & _M64))
    state = h
    while True:
        state = (state + _GAMMA) & _M64
        prod = _splitmix(state) * n
        lo = prod & _M64
        if lo >= n or lo >= ((1 << 64) - n) % n:
            return prod >> 64


# fleet's sampler streams (data.StreamTrain, StreamEvalTrain, StreamEvalVal).
FLEET_STREAMS = {"train": 0, "eval_train": 1, "eval_val": 2}


def save_gpt2(model, path, n_head):
    """Writes model's weights with Hugging Face GPT-2 names and Conv1D
    ([in, out]) layout, which `fleet train --init-from` reads."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import make_gpt_fixture  # the safetensors writer

    out = {"transformer.wte.weight": model.wte.weight, "transformer.wpe.weight": model.wpe.weight,
           "transformer.ln_f.weight": model.ln_f.weight}
    if model.ln_f.bias is not None:
        out["transformer.ln_f.bias"] = model.ln_f.bias
    for i, b in enumerate(model.blocks):
        p = "transformer.h.%d." % i
        for name, mod in (("ln_1", b.ln_1), ("ln_2", b.ln_2)):
            out[p + name + ".weight"] = mod.weight
            if mod.bias is not None:
                out[p + name + ".bias"] = mod.bias
        for name, mod in (("attn.c_attn", b.c_attn), ("attn.c_proj", b.attn_proj),
                          ("mlp.c_fc", b.c_fc), ("mlp.c_proj", b.mlp_proj)):
            out[p + name + ".weight"] = mod.weight.t()
            if mod.bias is not None:
                out[p + name + ".bias"] = mod.bias
    make_gpt_fixture.write_safetensors(path, {k: v.detach().float() for k, v in out.items()},
                                       {"format": "pt", "n_head": str(n_head)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-iters", type=int, default=100)
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--eval-interval", type=int, default=250)
    ap.add_argument("--eval-iters", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: forward (and so backward) matrix products under torch.autocast on the CPU "
                         "(fleet's --precision bf16)")
    ap.add_argument("--fleet-windows", action="store_true",
                    help="draw training and evaluation windows as fleet's sampler does for --seed")
    ap.add_argument("--save-init", metavar="FILE",
                    help="write the initial weights as GPT-2 safetensors (for fleet train --init-from)")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    text = open(args.data, encoding="utf-8").read()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(ids))
    splits = {"train": ids[:n], "val": ids[n:]}
    T, B = args.block_size, args.batch_size

    def batch(split, stream=None, step=0, first=0):
        d = splits[split]
        if args.fleet_windows:
            ix = [fleet_offset(args.seed, FLEET_STREAMS[stream], step, first + j, len(d) - T) for j in range(B)]
        else:
            ix = torch.randint(len(d) - T, (B,))
        return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix])

    model = GPT(len(chars), T, args.n_layer, args.n_head, args.n_embd, args.bias)
    if args.save_init:
        save_gpt2(model, args.save_init, args.n_head)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, args.beta2))

    def lr_at(it):
        if it < args.warmup_iters:
            return args.lr * (it + 1) / (args.warmup_iters + 1)
        r = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
        return args.min_lr + 0.5 * (1 + math.cos(math.pi * min(r, 1.0))) * (args.lr - args.min_lr)

    def cast():
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16")

    @torch.no_grad()
    def evaluate(step):
        model.eval()
        out = {}
        for split in ("train", "val"):
            stream = "eval_" + split
            with cast():
                out[split] = sum(model(*batch(split, stream, step, k * B)).item()
                                 for k in range(args.eval_iters)) / args.eval_iters
        model.train()
        return out

    rates, best = [], float("inf")
    for it in range(args.max_iters + 1):
        if it % args.eval_interval == 0 or it == args.max_iters:
            losses = evaluate(it)
            best = min(best, losses["val"])
            print(f"eval step {it}: train {losses['train']:.4f} val {losses['val']:.6f}", flush=True)
        if it == args.max_iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        t0 = time.perf_counter()
        x, y = batch("train", "train", it)
        with cast():
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        dt = time.perf_counter() - t0
        if it >= 5:
            rates.append(B * T / dt)
        if (it + 1) % 100 == 0:
            print(f"step {it + 1}: loss {loss.item():.4f} {B * T / dt:.0f} tok/s", flush=True)
    print(json.dumps({"tokens_per_sec": statistics.median(rates), "best_val_loss": best,
                      "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "autocast": args.autocast}))


if __name__ == "__main__":
    main()

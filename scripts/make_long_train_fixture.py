#!/usr/bin/env python3
"""Make the PyTorch reference for a 300-step run of fleet's reference model.

What it makes:
  testdata/long_train_corpus.txt         a synthetic text (about 64 KB) of made-up words
                                         whose order follows a fixed Markov chain, so that
                                         a model has something to learn
  testdata/gpt_long_train.safetensors    losses  F64 [300]  mean cross-entropy of step s
                                         norms   F64 [300]  gradient L2 norm of step s, before clipping
                                         lrs     F64 [300]  learning rate of step s
                                         eval_steps I32 [4], eval_train / eval_val F64 [4]
                                         __metadata__: the settings and torch's version

The run is the README's reference model (4 layers, 4 heads, 128 wide, block 64,
batch 12, no biases, no dropout) with the reference optimizer settings (AdamW,
lr 1e-3 with 100 warm-up steps, beta2 0.99, weight decay 0.1 on 2-D weights,
gradient clipping at 1.0), over the whole cosine decay: 300 steps down to
min-lr 1e-4 at step 300, and evaluations of 10 batches at steps 0, 100, 200
and 300. It trains in float32, as `fleet train --device cpu` does.

It starts from fleet's own initial weights and draws fleet's own windows for
--seed 1337, ported here from fleet's generators (internal/rng: a splitmix64
stream, Box-Muller normals; data.Sampler: one keyed stream per window). So
train.TestLongTrajectoryMatchesPyTorch runs `fleet train` as a user would,
with no weights or batches carried over, and compares every step.

How to run (from the repo root, with Debian's python3-torch 1.13):
  OPENBLAS_CORETYPE=Cooperlake OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \\
      /usr/bin/python3 scripts/make_long_train_fixture.py
Options: --out DIR (default testdata). With one thread and the same OpenBLAS
core, regenerating reproduces the file byte for byte.
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt_fixture as g  # noqa: E402  (safetensors writer)
import torch_reference as ref  # noqa: E402  (the model and fleet's window draw)

CORPUS = "long_train_corpus.txt"
FIXTURE = "gpt_long_train.safetensors"
SEED = 1337
CFG = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12,
           learning_rate=1e-3, min_lr=1e-4, warmup_iters=100, lr_decay_iters=300, max_iters=300,
           beta1=0.9, beta2=0.99, weight_decay=0.1, grad_clip=1.0, eps=1e-8,
           eval_interval=100, eval_iters=10, seed=SEED)


class FleetRNG:
    """internal/rng.RNG: a splitmix64 stream from a seed."""

    def __init__(self, seed):
        self.state = seed & ref._M64

    def uint64(self):
        self.state = (self.state + ref._GAMMA) & ref._M64
        return ref._splitmix(self.state)

    def float64(self):
        return (self.uint64() >> 11) / float(1 << 53)

    def norm(self):
        u1 = self.float64()
        while u1 == 0:
            u1 = self.float64()
        u2 = self.float64()
        return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


def corpus_text():
    """A made-up language: 48 words of 2-4 syllables; each word is followed by
    one of its 3 successors (weights 6:3:1); sentences of 4-12 words."""
    r = FleetRNG(20261202)

    def pick(n):
        return r.uint64() % n

    syll = ["ka", "lo", "mi", "ter", "su", "an", "ve", "ro", "di", "pel", "no", "ush", "ga", "fi", "tor", "e"]
    words = []
    while len(words) < 48:
        w = "".join(syll[pick(len(syll))] for _ in range(2 + pick(3)))
        if w not in words:
            words.append(w)
    succ = [[pick(len(words)) for _ in range(3)] for _ in words]
    out, size = [], 0
    while size < 64000:
        w = pick(len(words))
        sent = []
        for _ in range(4 + pick(9)):
            sent.append(words[w])
            u = pick(10)
            w = succ[w][0 if u < 6 else 1 if u < 9 else 2]
        s = " ".join(sent)
        s = s[0].upper() + s[1:] + (".\n" if pick(4) == 0 else ". ")
        out.append(s)
        size += len(s)
    return "".join(out)


def fleet_init(model, c, vocab):
    """model.New's draws: N(0, 0.02²) for wte, wpe, c_attn and c_fc, N(0,
    (0.02/sqrt(2·n_layer))²) for the two residual projections, in that
    order per layer, each [in, out] row-major, rounded to float32 and then
    scaled in float32; LayerNorm weights stay 1."""
    r = FleetRNG(c["seed"])
    init_std = torch.tensor(0.02, dtype=torch.float32)
    resid_std = torch.tensor(0.02 / math.sqrt(2 * c["n_layer"]), dtype=torch.float32)

    def draw(rows, cols, std):
        t = torch.tensor([r.norm() for _ in range(rows * cols)], dtype=torch.float32).view(rows, cols)
        return t * std

    C = c["n_embd"]
    with torch.no_grad():
        model.wte.weight.copy_(draw(vocab, C, init_std))
        model.wpe.weight.copy_(draw(c["block_size"], C, init_std))
        for b in model.blocks:
            b.c_attn.weight.copy_(draw(C, 3 * C, init_std).t())
            b.attn_proj.weight.copy_(draw(C, C, resid_std).t())
            b.c_fc.weight.copy_(draw(C, 4 * C, init_std).t())
            b.mlp_proj.weight.copy_(draw(4 * C, C, resid_std).t())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata")
    args = ap.parse_args()
    torch.set_num_threads(1)
    c = CFG

    text = corpus_text()
    with open(os.path.join(args.out, CORPUS), "w", encoding="utf-8") as f:
        f.write(text)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
    n = int(0.9 * len(ids))
    splits = {"train": ids[:n], "val": ids[n:]}
    T, B = c["block_size"], c["batch_size"]

    def batch(split, stream, step, first):
        d = splits[split]
        ix = [ref.fleet_offset(c["seed"], ref.FLEET_STREAMS[stream], step, first + j, len(d) - T) for j in range(B)]
        return torch.stack([d[i:i + T] for i in ix]), torch.stack([d[i + 1:i + 1 + T] for i in ix])

    model = ref.GPT(len(chars), T, c["n_layer"], c["n_head"], c["n_embd"], False)
    fleet_init(model, c, len(chars))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": other, "weight_decay": 0.0}],
                            lr=c["learning_rate"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])

    def lr_at(it):
        if it < c["warmup_iters"]:
            return c["learning_rate"] * (it + 1) / (c["warmup_iters"] + 1)
        if it > c["lr_decay_iters"]:
            return c["min_lr"]
        r = (it - c["warmup_iters"]) / (c["lr_decay_iters"] - c["warmup_iters"])
        return c["min_lr"] + 0.5 * (1 + math.cos(math.pi * r)) * (c["learning_rate"] - c["min_lr"])

    @torch.no_grad()
    def evaluate(step):
        model.eval()
        out = []
        for split in ("train", "val"):
            out.append(sum(model(*batch(split, "eval_" + split, step, k * B)).item()
                           for k in range(c["eval_iters"])) / c["eval_iters"])
        model.train()
        return out

    losses, norms, lrs, evals = [], [], [], []
    for it in range(c["max_iters"] + 1):
        if it % c["eval_interval"] == 0 or it == c["max_iters"]:
            tr, va = evaluate(it)
            evals.append((it, tr, va))
            print(f"eval step {it}: train {tr:.6f} val {va:.6f}", flush=True)
        if it == c["max_iters"]:
            break
        lr = lr_at(it)
        for grp in opt.param_groups:
            grp["lr"] = lr
        loss = model(*batch("train", "train", it, 0))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        norms.append(norm.item())
        lrs.append(lr)
        if (it + 1) % 50 == 0:
            print(f"step {it + 1}: loss {loss.item():.6f} norm {norm.item():.4f} lr {lr:.3e}", flush=True)

    meta = {k: str(v) for k, v in c.items()}
    meta.update(vocab_size=str(len(chars)), bias="false", corpus=CORPUS, torch_version=torch.__version__,
                generator="scripts/make_long_train_fixture.py")
    g.write_safetensors(os.path.join(args.out, FIXTURE), {
        "losses": torch.tensor(losses, dtype=torch.float64),
        "norms": torch.tensor(norms, dtype=torch.float64),
        "lrs": torch.tensor(lrs, dtype=torch.float64),
        "eval_steps": torch.tensor([e[0] for e in evals], dtype=torch.int32),
        "eval_train": torch.tensor([e[1] for e in evals], dtype=torch.float64),
        "eval_val": torch.tensor([e[2] for e in evals], dtype=torch.float64),
    }, meta)


if __name__ == "__main__":
    main()

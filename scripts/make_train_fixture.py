#!/usr/bin/env python3
"""Make the PyTorch reference fixture for a whole short GPT training run.

What it makes:
  testdata/gpt_train.safetensors   V=37, T=8, n_layer=2, n_head=2, n_embd=16, bias=False,
                                   B=4, 25 optimizer steps, float64 training

It holds (safetensors, written by make_gpt_fixture.write_safetensors):
  init.<param name>    F32   every parameter before training (Hugging Face GPT-2 names,
                             Conv1D [in, out] layout, tied wte, no biases anywhere)
  final.<param name>   F32   every parameter after the 25 steps (float64 rounded to float32)
  x, y                 I32   [25, 4, 8] the batch of each step (inputs, targets)
  losses               F64   [25] mean cross-entropy of step s, before its update
  norms                F64   [25] global gradient L2 norm of step s, before clipping
  lrs                  F64   [25] learning rate used by step s
  __metadata__               the config (vocab_size, block_size, n_layer, n_head, n_embd,
                             bias, batch_size, steps, learning_rate, min_lr, warmup_iters,
                             lr_decay_iters, beta1, beta2, weight_decay, grad_clip, eps,
                             init_std, seed), torch_version, generator

The model (forward pass) and the safetensors writer/reader are imported from
make_gpt_fixture.py, so this is the same GPT: learned position embeddings,
pre-LayerNorm blocks (eps 1e-5), causal attention, tanh-GELU MLP, final
LayerNorm, logits tied to wte, no dropout.

Initial weights (nanoGPT's GPT-2 init, scaled up 10x so that every part of the
model matters and gradient clipping is exercised): drawn in float32 from a
torch.Generator seeded 4321, one torch.randn per parameter in the order
  wte, wpe, then per layer i: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
  mlp.c_proj, then ln_f
(the order of the init.* names above, as in make_gpt_fixture.param_shapes):
  wte, wpe, c_attn, c_fc        INIT_STD * N(0, 1)                    (INIT_STD = 0.2)
  attn.c_proj, mlp.c_proj       INIT_STD / sqrt(2 * n_layer) * N(0, 1)
  LayerNorm weights             1 + 0.1 * N(0, 1)
After the weights the same generator draws, for each step s = 0..24, x[s] then
y[s] with torch.randint(0, vocab_size, (4, 8)).

Training step s, in float64 (exactly nanoGPT's loop without gradient accumulation):
  lr_s = learning_rate * (s+1) / (warmup_iters+1)                  if s < warmup_iters
       = min_lr                                                    if s > lr_decay_iters
       = min_lr + 0.5*(1+cos(pi*(s-warmup_iters)/(lr_decay_iters-warmup_iters)))
                     * (learning_rate - min_lr)                    otherwise
  loss = mean cross-entropy(model(x[s]), y[s]); losses[s] = loss
  loss.backward()
  norms[s] = torch.nn.utils.clip_grad_norm_(params, grad_clip)
      (torch 1.13: every gradient is multiplied by min(1, grad_clip / (norm + 1e-6)))
  torch.optim.AdamW step (single-tensor path, foreach=False), lr = lr_s, betas (0.9, 0.95),
      eps 1e-8, two param groups: weight_decay 0.1 for parameters with dim >= 2
      (wte, wpe, all Conv1D weights; the tied wte counted once), 0 for the LayerNorm
      weights. Per parameter: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
      p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), t = s+1.
  zero the gradients.

How to run (from the repo root, with Debian's python3-torch 1.13 installed):
  OPENBLAS_CORETYPE=Cooperlake /usr/bin/python3 scripts/make_train_fixture.py
Options: --out DIR (default testdata).
Regenerating with the same torch version and OPENBLAS_CORETYPE reproduces the file
byte for byte (checked in: torch 1.13, OPENBLAS_CORETYPE=Cooperlake). OpenBLAS's
default core on an unrecognised CPU (Prescott) changes only the last bit of a few
losses/norms (<= 9e-16); the F32 tensors come out the same.
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt_fixture as g  # noqa: E402  (model, safetensors writer and reader)

FILE = "gpt_train.safetensors"
CFG = dict(vocab_size=37, block_size=8, n_layer=2, n_head=2, n_embd=16, bias=False)
BATCH_SIZE = 4
STEPS = 25
SEED = 4321

# nanoGPT's GPT-2 init uses std 0.02; 10x larger here so the test discriminates:
# with 0.2 the pre-clip gradient norm is 1.0-2.3 on steps 0-10 (clipped) and
# 0.58-1.2 later, so 13 of the 25 steps clip and 12 do not.
INIT_STD = 0.2
LN_WEIGHT_STD = 0.1  # LayerNorm weight = 1 + LN_WEIGHT_STD * N(0, 1)

LEARNING_RATE = 1e-2
MIN_LR = 1e-3
WARMUP_ITERS = 5
LR_DECAY_ITERS = 25
BETA1 = 0.9
BETA2 = 0.95
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
EPS = 1e-8


def get_lr(it):
    """nanoGPT's learning-rate schedule: linear warmup, then cosine decay to MIN_LR."""
    if it < WARMUP_ITERS:
        return LEARNING_RATE * (it + 1) / (WARMUP_ITERS + 1)
    if it > LR_DECAY_ITERS:
        return MIN_LR
    ratio = (it - WARMUP_ITERS) / (LR_DECAY_ITERS - WARMUP_ITERS)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return MIN_LR + coeff * (LEARNING_RATE - MIN_LR)


def init_params(gen):
    """GPT-2 init (scaled), drawn in float32; returns name -> float64 leaf tensor."""
    cproj_std = INIT_STD / math.sqrt(2 * CFG["n_layer"])
    params = {}
    for name, shape, kind in g.param_shapes(CFG):
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind == "ln":
            w = 1.0 + LN_WEIGHT_STD * z
        elif kind in ("emb", "linear"):
            std = cproj_std if name.endswith(".c_proj.weight") else INIT_STD
            w = std * z
        else:
            raise ValueError("unexpected parameter kind %s for %s" % (kind, name))
        w = w.to(torch.float32)  # the stored values are the truth
        params[name] = w.to(torch.float64).requires_grad_(True)
    return params


def setup():
    """The run's parameters, its batches x[s], y[s] and the parameters' initial F32 values."""
    gen = torch.Generator().manual_seed(SEED)
    params = init_params(gen)
    B, T, V = BATCH_SIZE, CFG["block_size"], CFG["vocab_size"]
    xs, ys = [], []
    for _ in range(STEPS):
        xs.append(torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64))
        ys.append(torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64))
    init = {name: p.detach().to(torch.float32).clone() for name, p in params.items()}
    return params, xs, ys, init


def adamw(named):
    """torch.optim.AdamW over (name, parameter) pairs: weight decay for those with dim >= 2."""
    decay = [p for _, p in named if p.dim() >= 2]
    no_decay = [p for _, p in named if p.dim() < 2]
    return torch.optim.AdamW(
        [dict(params=decay, weight_decay=WEIGHT_DECAY),
         dict(params=no_decay, weight_decay=0.0)],
        lr=LEARNING_RATE, betas=(BETA1, BETA2), eps=EPS, foreach=False)


def train(params, xs, ys, opt, after_step=None):
    """STEPS steps: forward, backward, the global clip over every parameter, opt's step,
    then after_step(lr) where given (another rule's update), then the gradients zeroed.
    Returns the losses, the pre-clip norms and the learning rates."""
    plist = list(params.values())
    losses, norms, lrs = [], [], []
    for s in range(STEPS):
        lr = get_lr(s)
        for group in opt.param_groups:
            group["lr"] = lr
        _, loss = g.forward(CFG, params, xs[s], ys[s])
        losses.append(loss.item())
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(plist, GRAD_CLIP)
        norms.append(norm.item())
        lrs.append(lr)
        opt.step()
        if after_step is not None:
            after_step(lr)
        opt.zero_grad(set_to_none=True)
    return losses, norms, lrs


def save(path, params, init, xs, ys, losses, norms, lrs, generator, extra_meta=None):
    """Writes the run's tensors and metadata (extra_meta after the run's settings) to
    path, reads the file back to check it, and returns the tensors read."""
    tensors = {}
    for name, p in params.items():
        tensors["init." + name] = init[name]
        tensors["final." + name] = p.detach().to(torch.float32)
    tensors["x"] = torch.stack(xs).to(torch.int32)
    tensors["y"] = torch.stack(ys).to(torch.int32)
    tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
    tensors["norms"] = torch.tensor(norms, dtype=torch.float64)
    tensors["lrs"] = torch.tensor(lrs, dtype=torch.float64)

    metadata = {
        "vocab_size": str(CFG["vocab_size"]),
        "block_size": str(CFG["block_size"]),
        "n_layer": str(CFG["n_layer"]),
        "n_head": str(CFG["n_head"]),
        "n_embd": str(CFG["n_embd"]),
        "bias": "true" if CFG["bias"] else "false",
        "batch_size": str(BATCH_SIZE),
        "steps": str(STEPS),
        "learning_rate": repr(LEARNING_RATE),
        "min_lr": repr(MIN_LR),
        "warmup_iters": str(WARMUP_ITERS),
        "lr_decay_iters": str(LR_DECAY_ITERS),
        "beta1": repr(BETA1),
        "beta2": repr(BETA2),
        "weight_decay": repr(WEIGHT_DECAY),
        "grad_clip": repr(GRAD_CLIP),
        "eps": repr(EPS),
        "init_std": repr(INIT_STD),
        "seed": str(SEED),
    }
    metadata.update(extra_meta or {})
    metadata["torch_version"] = torch.__version__
    metadata["generator"] = generator
    g.write_safetensors(path, tensors, metadata)

    # verify by reading back (the reader checks offsets, sizes, order and coverage)
    back, meta = g.read_safetensors(path)
    assert meta == metadata
    assert set(back) == set(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    print("%s: %d bytes, %d tensors" % (path, os.path.getsize(path), len(back)))
    return back


def make(out_dir):
    params, xs, ys, init = setup()
    opt = adamw(list(params.items()))
    losses, norms, lrs = train(params, xs, ys, opt)
    save(os.path.join(out_dir, FILE), params, init, xs, ys, losses, norms, lrs, "scripts/make_train_fixture.py")

    print("  log V = %.6f" % math.log(CFG["vocab_size"]))
    clipped = 0
    for s in range(STEPS):
        c = norms[s] + 1e-6 > GRAD_CLIP
        clipped += c
        print("  step %2d  lr %.6f  loss %.10f  norm %.6f%s" %
              (s, lrs[s], losses[s], norms[s], "  (clipped)" if c else ""))
    print("  clipped on %d of %d steps" % (clipped, STEPS))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="testdata", help="output directory (default testdata)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions
    os.makedirs(args.out, exist_ok=True)
    make(args.out)


if __name__ == "__main__":
    main()

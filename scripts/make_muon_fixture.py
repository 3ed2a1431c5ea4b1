#!/usr/bin/env python3
"""Make the PyTorch reference fixture for a short GPT training run with Muon.

What it makes:
  testdata/gpt_train_muon.safetensors   the model, weights, batches and schedule of
                                        make_train_fixture.py (V=37, T=8, n_layer=2,
                                        n_head=2, n_embd=16, no biases, B=4, 25 steps,
                                        float64 training), trained with Muon

It holds the same tensors and metadata as testdata/gpt_train.safetensors (see
make_train_fixture.py), plus the metadata muon_lr, muon_momentum,
muon_weight_decay and optimizer=muon.

The optimizer (PyTorch 1.13 has no Muon, so it is written here from the
algorithm, in plain tensor operations):
  - Muon for the blocks' matrices: attn.c_attn (q, k and v, orthogonalised as
    three matrices), attn.c_proj, mlp.c_fc, mlp.c_proj;
  - torch.optim.AdamW for the rest, as in make_train_fixture.py: wte and wpe
    with weight decay 0.1, the LayerNorm weights without.
The weights are stored as GPT-2's Conv1D [in, out]; the matrix Muon
orthogonalises is PyTorch's Linear orientation [out, in], W[:, a:b].T for the
part of columns [a, b).

Step s, after the gradients are clipped as in make_train_fixture.py (global
norm 1.0), at AdamW rate lr_s (the schedule of make_train_fixture.py) and Muon
rate r_s = MUON_LR * lr_s / LEARNING_RATE, for each Muon matrix W with gradient
g and momentum buffer m (zero at first):
  m = mu*m + (1-mu)*g                     mu = MUON_MOMENTUM
  u = (1-mu)*g + mu*m                     Nesterov's look-ahead
  for each part [a, b):
      O = NS(u[:, a:b].T)                 [out_p, in]
      W[:, a:b] = W[:, a:b]*(1 - r_s*MUON_WEIGHT_DECAY) - r_s*s*O.T,
          s = max(1, out_p/in)**0.5
NS(G): X = G, transposed if it has more rows than columns; X = X/(||X||_F + 1e-7);
five times: A = X @ X.T; B = b*A + c*(A @ A); X = a*X + B @ X, with
(a, b, c) = (3.4445, -4.7750, 2.0315); transposed back.

How to run (from the repo root, with Debian's python3-torch 1.13 installed):
  OPENBLAS_CORETYPE=Cooperlake /usr/bin/python3 scripts/make_muon_fixture.py
Options: --out DIR (default testdata).
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt_fixture as g  # noqa: E402  (model, safetensors writer and reader)
import make_train_fixture as t  # noqa: E402  (config, init, batches, schedule)

FILE = "gpt_train_muon.safetensors"
MUON_LR = 0.02
MUON_MOMENTUM = 0.95
# Not the default (0): the fixture exercises the decay too.
MUON_WEIGHT_DECAY = 0.1
NS_COEFFS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7


def newton_schulz(G):
    """Orthogonalise G approximately: five quintic Newton–Schulz iterations."""
    a, b, c = NS_COEFFS
    X = G
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T
    X = X / (X.norm() + NS_EPS)
    for _ in range(NS_STEPS):
        A = X @ X.T
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if tall:
        X = X.T
    return X


def muon_parts(name, C):
    """The widths, along the Conv1D out axis, of the matrices fused in a block weight."""
    if name.endswith("attn.c_attn.weight"):
        return [C, C, C]
    if name.endswith("attn.c_proj.weight") or name.endswith("mlp.c_proj.weight"):
        return [C]
    if name.endswith("mlp.c_fc.weight"):
        return [4 * C]
    return None


def muon_step(W, buf, parts, rate):
    """One Muon update of W (Conv1D [in, out]) in place, from its gradient."""
    mu = MUON_MOMENTUM
    grad = W.grad
    buf.mul_(mu).add_(grad, alpha=1 - mu)
    u = (1 - mu) * grad + mu * buf
    n_in = W.shape[0]
    a = 0
    with torch.no_grad():
        for w in parts:
            O = newton_schulz(u[:, a:a + w].T)  # [w, in]
            s = max(1.0, w / n_in) ** 0.5
            W[:, a:a + w] = W[:, a:a + w] * (1 - rate * MUON_WEIGHT_DECAY) - rate * s * O.T
            a += w


def make(out_dir):
    params, xs, ys, init = t.setup()
    muon = {name: muon_parts(name, t.CFG["n_embd"]) for name in params}
    muon = {name: parts for name, parts in muon.items() if parts is not None}
    bufs = {name: torch.zeros_like(params[name]) for name in muon}
    opt = t.adamw([(name, p) for name, p in params.items() if name not in muon])

    def muon_steps(lr):
        rate = MUON_LR * lr / t.LEARNING_RATE
        for name, parts in muon.items():
            muon_step(params[name], bufs[name], parts, rate)
            params[name].grad = None

    losses, norms, lrs = t.train(params, xs, ys, opt, muon_steps)
    t.save(os.path.join(out_dir, FILE), params, init, xs, ys, losses, norms, lrs, "scripts/make_muon_fixture.py",
           {"optimizer": "muon", "muon_lr": repr(MUON_LR), "muon_momentum": repr(MUON_MOMENTUM),
            "muon_weight_decay": repr(MUON_WEIGHT_DECAY)})
    for s in range(t.STEPS):
        print("  step %2d  lr %.6f  loss %.10f  norm %.6f" % (s, lrs[s], losses[s], norms[s]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="testdata", help="output directory (default testdata)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions
    os.makedirs(args.out, exist_ok=True)
    make(args.out)


if __name__ == "__main__":
    main()

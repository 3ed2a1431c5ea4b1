#!/usr/bin/env python3
"""Make the PyTorch reference fixtures for fleet's LSTM (--arch lstm).

What it makes:
  testdata/lstm_tied.safetensors    V=29, T=7, 2 layers of 12, gate biases, tied head, B=3
  testdata/lstm_untied.safetensors  V=23, T=9, 3 layers of 8, no biases, untied head, B=2

The model is torch.nn.LSTM (batch_first, no dropout) between an embedding and a
head without a bias: logits = LSTM(embedding[x]) @ W^T, W the embedding (tied) or a
weight of its own [V, H] (untied); the loss is the mean cross-entropy over all B*T
positions. The state starts at zero.

Each file holds, under fleet's names (F32 unless said):
  embed.weight              [V, H]
  lstm.<l>.ih.weight        [H, 4H]  nn.LSTM's weight_ih_l<l> transposed: fleet's
                                     Linear keeps [in, out]; the gates keep PyTorch's
                                     order i, f, g, o in the 4H columns
  lstm.<l>.ih.bias          [4H]     bias_ih_l<l> + bias_hh_l<l> (fleet has one bias;
                                     the loss's gradient is the same for both of
                                     PyTorch's, and for their sum)
  lstm.<l>.hh.weight        [H, 4H]  weight_hh_l<l> transposed
  head.weight               [V, H]   the untied head
  grad.<name>               d loss / d <name> (grad.embed.weight includes the tied
                            head's share; grad.lstm.<l>.ih.bias is bias_ih_l<l>'s
                            gradient, which the script checks equals bias_hh_l<l>'s
                            to 1e-12)
  x, y                      I32 [B, T] tokens and targets
  logits                    [B, T, V]
  loss                      F64 []
  __metadata__              vocab_size, block_size, n_layer, n_embd, bias, tied,
                            batch_size, seed, torch_version, generator

Weights are drawn from a seeded torch.Generator in float32 (exactly what the F32
tensors hold; the two biases are drawn apart and their float64 sum stored rounded,
and the model is then run with bias_hh = 0 and bias_ih = that rounded sum so that
the reference sees exactly fleet's values); the forward and backward passes run in
float64 (nn.LSTM in double precision), and results are rounded to float32 only when
written.

How to run (from the repo root, with Debian's python3-torch):
  /usr/bin/python3 scripts/make_lstm_fixture.py
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt_fixture import read_safetensors, write_safetensors  # noqa: E402

CONFIGS = [
    dict(file="lstm_tied.safetensors", vocab_size=29, block_size=7, n_layer=2, n_embd=12,
         bias=True, tied=True, batch_size=3, seed=4242),
    dict(file="lstm_untied.safetensors", vocab_size=23, block_size=9, n_layer=3, n_embd=8,
         bias=False, tied=False, batch_size=2, seed=777),
]

# Large enough that the gates are neither saturated nor linear, and every
# layer matters to the loss.
EMB_STD = 0.8
W_STD = 0.5
BIAS_STD = 0.3
HEAD_STD = 3.0


def make(cfg, out_dir):
    gen = torch.Generator().manual_seed(cfg["seed"])
    V, T, L, H, B = cfg["vocab_size"], cfg["block_size"], cfg["n_layer"], cfg["n_embd"], cfg["batch_size"]

    def draw(std, *shape):
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * std)

    emb = draw(EMB_STD, V, H).double().requires_grad_(True)
    lstm = torch.nn.LSTM(H, H, num_layers=L, bias=cfg["bias"], batch_first=True).double()
    with torch.no_grad():
        for l in range(L):
            getattr(lstm, "weight_ih_l%d" % l).copy_(draw(W_STD, 4 * H, H).double())
            getattr(lstm, "weight_hh_l%d" % l).copy_(draw(W_STD, 4 * H, H).double())
            if cfg["bias"]:
                b = (draw(BIAS_STD, 4 * H).double() + draw(BIAS_STD, 4 * H).double()).float().double()
                getattr(lstm, "bias_ih_l%d" % l).copy_(b)
                getattr(lstm, "bias_hh_l%d" % l).zero_()
    head = emb if cfg["tied"] else draw(HEAD_STD, V, H).double().requires_grad_(True)
    x = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    y = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)

    out, _ = lstm(F.embedding(x, emb))
    logits = out @ head.t()
    loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))
    loss.backward()

    t = {}

    def put(name, value, grad):
        t[name] = value.detach().float()
        t["grad." + name] = grad.detach().float()

    put("embed.weight", emb, emb.grad)
    for l in range(L):
        wih, whh = getattr(lstm, "weight_ih_l%d" % l), getattr(lstm, "weight_hh_l%d" % l)
        put("lstm.%d.ih.weight" % l, wih.t(), wih.grad.t())
        put("lstm.%d.hh.weight" % l, whh.t(), whh.grad.t())
        if cfg["bias"]:
            bih, bhh = getattr(lstm, "bias_ih_l%d" % l), getattr(lstm, "bias_hh_l%d" % l)
            assert torch.allclose(bih.grad, bhh.grad, rtol=1e-12, atol=1e-14)
            put("lstm.%d.ih.bias" % l, bih, bih.grad)
    if not cfg["tied"]:
        put("head.weight", head, head.grad)
    t["x"], t["y"] = x.to(torch.int32), y.to(torch.int32)
    t["logits"] = logits.detach().float()
    t["loss"] = loss.detach().reshape([])

    meta = {
        "vocab_size": str(V), "block_size": str(T), "n_layer": str(L), "n_embd": str(H),
        "bias": "true" if cfg["bias"] else "false", "tied": "true" if cfg["tied"] else "false",
        "batch_size": str(B), "seed": str(cfg["seed"]), "torch_version": torch.__version__,
        "generator": "scripts/make_lstm_fixture.py",
    }
    path = os.path.join(out_dir, cfg["file"])
    write_safetensors(path, t, meta)
    back, m = read_safetensors(path)
    assert m == meta and set(back) == set(t)
    for name, v in t.items():
        assert torch.equal(back[name], v), name
    print("%s: %d bytes, %d tensors" % (path, os.path.getsize(path), len(back)))
    print("  loss = %r (log V = %r), logits std %.3f" % (loss.item(), math.log(V), logits.std().item()))


def main():
    torch.set_num_threads(1)
    for cfg in CONFIGS:
        make(cfg, "testdata")


if __name__ == "__main__":
    main()

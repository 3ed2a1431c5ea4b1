#!/usr/bin/env python3
"""Make a tiny random GPT-2 in the form of the Hugging Face hub's files,
and its logits, for fleet's interop tests.

What it makes (in testdata/):
  hf_gpt2_tiny.safetensors         the weights as the hub's GPT-2 files hold
                                   them: unprefixed names (wte.weight,
                                   h.N.attn.c_attn.weight, Conv1D [in, out]),
                                   the non-weight buffers h.N.attn.bias
                                   (causal mask) and h.N.attn.masked_bias, and
                                   lm_head.weight (a copy of wte, tied)
  hf_gpt2_tiny_logits.safetensors  x (I32 [B, T]) and the logits (F32
                                   [B, T, V]) of the model on x, computed in
                                   float64

The model: V=50, T=16, 2 layers, 2 heads, C=32, biases everywhere (as every
GPT-2 on the hub), GPT-2's tanh-GELU and LayerNorm eps 1e-5. Two heads with
C=32 is not a GPT-2 width, so loading it needs --n-head 2.

`transformers` is not needed: the forward pass is make_gpt_fixture.py's
explicit GPT-2, and the safetensors files are written by hand.

How to run (from the repo root, with Debian's python3-torch):
  /usr/bin/python3 scripts/make_hf_gpt2_fixture.py
Rerunning with the same torch version reproduces the files byte for byte.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt_fixture as g  # noqa: E402

CFG = dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=True, seed=4242)
BATCH = 2


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "testdata"
    gen = torch.Generator().manual_seed(CFG["seed"])
    params = g.init_params(CFG, gen)
    B, T, V = BATCH, CFG["block_size"], CFG["vocab_size"]
    x = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    with torch.no_grad():
        logits, _ = g.forward(CFG, params, x, x)

    hub = {}
    for name, p in params.items():
        hub[name[len("transformer."):]] = p.detach().to(torch.float32)
    mask = torch.tril(torch.ones(T, T, dtype=torch.float32)).view(1, 1, T, T)
    for i in range(CFG["n_layer"]):
        hub["h.%d.attn.bias" % i] = mask
        hub["h.%d.attn.masked_bias" % i] = torch.tensor(-1e4, dtype=torch.float32)
    hub["lm_head.weight"] = hub["wte.weight"].clone()
    meta = {"format": "pt"}
    g.write_safetensors(os.path.join(out, "hf_gpt2_tiny.safetensors"), hub, meta)
    g.write_safetensors(os.path.join(out, "hf_gpt2_tiny_logits.safetensors"),
                        {"x": x.to(torch.int32), "logits": logits.to(torch.float32)},
                        {k: str(v) for k, v in CFG.items()})
    print("wrote", out)


if __name__ == "__main__":
    main()

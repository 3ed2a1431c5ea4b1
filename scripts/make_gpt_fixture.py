#!/usr/bin/env python3
"""Make the PyTorch reference fixtures for fleet's GPT tests.

What it makes:
  testdata/gpt_bias.safetensors    V=37, T=8, n_layer=2, n_head=2, n_embd=16, bias=True,  B=3
  testdata/gpt_nobias.safetensors  V=37, T=8, n_layer=2, n_head=4, n_embd=24, bias=False, B=3

Each file is a safetensors file (written by hand here; the `safetensors`
package is not needed) holding:
  <param name>        F32   every parameter, Hugging Face GPT-2 names, Conv1D [in, out]
                            layout for the linear weights (e.g. transformer.h.0.attn.c_attn.weight)
  grad.<param name>   F32   d loss / d param (grad.transformer.wte.weight includes the
                            tied lm_head contribution)
  x, y                I32   [B, T] input tokens and targets
  loss                F64   [] mean cross-entropy over all B*T positions
  __metadata__              vocab_size, block_size, n_layer, n_head, n_embd, bias,
                            batch_size, seed, torch_version, generator

The model is nanoGPT's / GPT-2's GPT, written out explicitly below: learned
position embeddings, pre-LayerNorm blocks (eps 1e-5), causal multi-head
attention, tanh-GELU MLP, final LayerNorm, logits tied to wte, no dropout.
With bias=False there are no biases anywhere, LayerNorm included.

Weights are drawn from a seeded torch.Generator in float32 (so they are exactly
representable in the F32 tensors stored), then the forward and backward passes
run in float64 so the reference loss and gradients are as exact as possible;
gradients are rounded to float32 only when written.

How to run (from the repo root, with Debian's python3-torch installed):
  /usr/bin/python3 scripts/make_gpt_fixture.py
Options: --out DIR (default testdata), --check (also verify a few gradient
entries by central finite differences in float64).
"""

import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

CONFIGS = [
    dict(file="gpt_bias.safetensors", vocab_size=37, block_size=8, n_layer=2,
         n_head=2, n_embd=16, bias=True, batch_size=3, seed=1234),
    dict(file="gpt_nobias.safetensors", vocab_size=37, block_size=8, n_layer=2,
         n_head=4, n_embd=24, bias=False, batch_size=3, seed=5678),
]

# Standard deviations of the initial weights: large enough that every part of
# the model matters to the loss (logits std ~1-2, loss well away from log V).
EMB_STD = 0.3
LINEAR_STD = 0.3
LN_WEIGHT_STD = 0.2  # weight = 1 + LN_WEIGHT_STD * N(0, 1)
BIAS_STD = 0.1
LN_EPS = 1e-5


# ----------------------------------------------------------------------------
# parameters


def param_shapes(cfg):
    """Ordered list of (name, shape, kind) for every parameter."""
    V, T, C = cfg["vocab_size"], cfg["block_size"], cfg["n_embd"]
    bias = cfg["bias"]
    out = [
        ("transformer.wte.weight", [V, C], "emb"),
        ("transformer.wpe.weight", [T, C], "emb"),
    ]
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d." % i
        out.append((p + "ln_1.weight", [C], "ln"))
        if bias:
            out.append((p + "ln_1.bias", [C], "bias"))
        out.append((p + "attn.c_attn.weight", [C, 3 * C], "linear"))
        if bias:
            out.append((p + "attn.c_attn.bias", [3 * C], "bias"))
        out.append((p + "attn.c_proj.weight", [C, C], "linear"))
        if bias:
            out.append((p + "attn.c_proj.bias", [C], "bias"))
        out.append((p + "ln_2.weight", [C], "ln"))
        if bias:
            out.append((p + "ln_2.bias", [C], "bias"))
        out.append((p + "mlp.c_fc.weight", [C, 4 * C], "linear"))
        if bias:
            out.append((p + "mlp.c_fc.bias", [4 * C], "bias"))
        out.append((p + "mlp.c_proj.weight", [4 * C, C], "linear"))
        if bias:
            out.append((p + "mlp.c_proj.bias", [C], "bias"))
    out.append(("transformer.ln_f.weight", [C], "ln"))
    if bias:
        out.append(("transformer.ln_f.bias", [C], "bias"))
    return out


def init_params(cfg, gen):
    """Draw every parameter in float32 from gen; return name -> float64 leaf tensor."""
    params = {}
    for name, shape, kind in param_shapes(cfg):
        z = torch.randn(shape, generator=gen, dtype=torch.float32)
        if kind == "emb":
            w = EMB_STD * z
        elif kind == "linear":
            w = LINEAR_STD * z
        elif kind == "ln":
            w = 1.0 + LN_WEIGHT_STD * z
        elif kind == "bias":
            w = BIAS_STD * z
        else:
            raise ValueError(kind)
        w = w.to(torch.float32)  # the stored values are the truth
        params[name] = w.to(torch.float64).requires_grad_(True)
    return params


# ----------------------------------------------------------------------------
# model


def layer_norm(x, params, prefix):
    w = params[prefix + ".weight"]
    b = params.get(prefix + ".bias")
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
    y = (x - mean) / torch.sqrt(var + LN_EPS) * w
    if b is not None:
        y = y + b
    return y


def conv1d(x, params, prefix):
    """GPT-2 Conv1D: x @ W + b with W stored [in, out]."""
    y = x @ params[prefix + ".weight"]
    b = params.get(prefix + ".bias")
    if b is not None:
        y = y + b
    return y


def attention(x, params, prefix, n_head):
    B, T, C = x.shape
    hd = C // n_head
    qkv = conv1d(x, params, prefix + ".c_attn")  # [B, T, 3C]
    q, k, v = qkv.split(C, dim=2)
    # heads are contiguous hd-wide chunks of each of q, k, v
    q = q.view(B, T, n_head, hd).transpose(1, 2)  # [B, H, T, hd]
    k = k.view(B, T, n_head, hd).transpose(1, 2)
    v = v.view(B, T, n_head, hd).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # [B, H, T, T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = att @ v  # [B, H, T, hd]
    y = y.transpose(1, 2).contiguous().view(B, T, C)  # merge heads
    return conv1d(y, params, prefix + ".c_proj")


def mlp(x, params, prefix):
    h = conv1d(x, params, prefix + ".c_fc")
    h = F.gelu(h, approximate="tanh")
    return conv1d(h, params, prefix + ".c_proj")


def forward(cfg, params, idx, targets):
    """Returns (logits [B, T, V], loss scalar)."""
    B, T = idx.shape
    assert T <= cfg["block_size"]
    wte = params["transformer.wte.weight"]
    wpe = params["transformer.wpe.weight"]
    pos = torch.arange(T)
    x = wte[idx] + wpe[pos]  # [B, T, C]
    for i in range(cfg["n_layer"]):
        p = "transformer.h.%d" % i
        x = x + attention(layer_norm(x, params, p + ".ln_1"), params, p + ".attn", cfg["n_head"])
        x = x + mlp(layer_norm(x, params, p + ".ln_2"), params, p + ".mlp")
    x = layer_norm(x, params, "transformer.ln_f")
    logits = x @ wte.t()  # tied lm_head
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction="mean")
    return logits, loss


# ----------------------------------------------------------------------------
# safetensors (written by hand)

_DTYPES = {
    torch.float32: ("F32", "<f4"),
    torch.float64: ("F64", "<f8"),
    torch.int32: ("I32", "<i4"),
}
_FMT = {"F32": "f", "F64": "d", "I32": "i"}


def _tensor_bytes(t):
    dt, _ = _DTYPES[t.dtype]
    flat = t.detach().contiguous().reshape(-1).tolist()
    return struct.pack("<%d%s" % (len(flat), _FMT[dt]), *flat)


def write_safetensors(path, tensors, metadata):
    """tensors: name -> torch tensor (float32, float64 or int32); metadata: str -> str."""
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        dt, _ = _DTYPES[t.dtype]
        data = _tensor_bytes(t)
        header[name] = {
            "dtype": dt,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    """Minimal reader used to verify what was written. Returns (tensors, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, "header length not a multiple of 8"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    metadata = header.pop("__metadata__", {})
    spans = []
    tensors = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = info["dtype"]
        size = {"F32": 4, "F64": 8, "I32": 4}[dt]
        count = 1
        for d in info["shape"]:
            count *= d
        assert e - b == count * size, name
        vals = struct.unpack("<%d%s" % (count, _FMT[dt]), data[b:e])
        torch_dt = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32}[dt]
        tensors[name] = torch.tensor(vals, dtype=torch_dt).reshape(info["shape"])
        spans.append((b, e, name))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        assert b == pos, "gap or overlap before %s" % name
        pos = e
    assert pos == len(data), "data section not covered exactly"
    names_by_offset = [s[2] for s in spans]
    assert names_by_offset == sorted(names_by_offset), "data not in sorted-name order"
    return tensors, metadata


# ----------------------------------------------------------------------------


def finite_difference_check(cfg, params, x, y, n_per_param=2, h=1e-6):
    """Compare a few autograd gradient entries with central differences (float64)."""
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    worst = 0.0
    with torch.no_grad():
        for name, p in params.items():
            for _ in range(n_per_param):
                i = int(torch.randint(p.numel(), (1,), generator=gen))
                flat = p.view(-1)
                old = flat[i].item()
                flat[i] = old + h
                lp = forward(cfg, params, x, y)[1].item()
                flat[i] = old - h
                lm = forward(cfg, params, x, y)[1].item()
                flat[i] = old
                fd = (lp - lm) / (2 * h)
                ag = p.grad.view(-1)[i].item()
                err = abs(fd - ag) / max(1e-3, abs(fd), abs(ag))
                worst = max(worst, err)
    return worst


def make(cfg, out_dir, check):
    gen = torch.Generator().manual_seed(cfg["seed"])
    params = init_params(cfg, gen)
    B, T, V = cfg["batch_size"], cfg["block_size"], cfg["vocab_size"]
    x = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)
    y = torch.randint(0, V, (B, T), generator=gen, dtype=torch.int64)

    logits, loss = forward(cfg, params, x, y)
    loss.backward()

    tensors = {}
    for name, p in params.items():
        tensors[name] = p.detach().to(torch.float32)
        tensors["grad." + name] = p.grad.detach().to(torch.float32)
    tensors["x"] = x.to(torch.int32)
    tensors["y"] = y.to(torch.int32)
    tensors["loss"] = loss.detach().to(torch.float64).reshape([])

    metadata = {
        "vocab_size": str(V),
        "block_size": str(T),
        "n_layer": str(cfg["n_layer"]),
        "n_head": str(cfg["n_head"]),
        "n_embd": str(cfg["n_embd"]),
        "bias": "true" if cfg["bias"] else "false",
        "batch_size": str(B),
        "seed": str(cfg["seed"]),
        "torch_version": torch.__version__,
        "generator": "scripts/make_gpt_fixture.py",
    }
    path = os.path.join(out_dir, cfg["file"])
    write_safetensors(path, tensors, metadata)

    # verify by reading back
    back, meta = read_safetensors(path)
    assert meta == metadata
    assert set(back) == set(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name

    print("%s: %d bytes, %d tensors" % (path, os.path.getsize(path), len(back)))
    print("  loss = %r (log V = %r)" % (back["loss"].item(), math.log(V)))
    print("  logits std = %.3f" % logits.detach().std().item())
    gn = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params.values()))
    print("  grad global norm = %.4f" % gn)
    if check:
        print("  finite-difference worst relative error = %.3e" %
              finite_difference_check(cfg, params, x, y))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="testdata", help="output directory (default testdata)")
    ap.add_argument("--check", action="store_true",
                    help="also check gradients by finite differences")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic reductions
    os.makedirs(args.out, exist_ok=True)
    for cfg in CONFIGS:
        make(cfg, args.out, args.check)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Make random Hugging Face Llama, Qwen2, Qwen3 and Arcee folders and their
PyTorch reference logits and gradients, for fleet's model tests.

What it makes, under testdata/hf/models/ (one folder per case, plus NAME_ref.safetensors):
  llama_gqa     LlamaForCausalLM: 4 heads, 2 key/value heads, untied head, F32, one file
  llama3_tied   LlamaForCausalLM: multi-query (1 key/value head), tied head, Llama 3.1's
                rope_scaling (type llama3), attention_bias, BF16 weights, one file
  qwen2         Qwen2ForCausalLM: q/k/v biases, tied head, theta 1e6, BF16 weights, 2 shards
  qwen3         Qwen3ForCausalLM: QK-norm, head_dim 16 (not hidden/heads = 8), untied,
                F32 weights, 2 shards
  arcee         ArceeForCausalLM: Llama's blocks with a ReLU² feed-forward
                (down(relu(up(x))²), no gate_proj), GQA, untied, F32, one file

Each folder holds what those architectures' loaders read: config.json (the fields
they use), and model.safetensors or model-0000i-of-0000n.safetensors with
model.safetensors.index.json, under Hugging Face's names ([out, in] nn.Linear
weights, q_proj/k_proj/v_proj and gate_proj/up_proj apart). NAME_ref.safetensors holds:
  x, y            I32 [B, T] the batch and its targets
  logits          F32 [B, T, V]
  loss            F64 []  mean cross-entropy
  grad.<name>     F32     d loss / d weight, under the Hugging Face name (the tied
                          embedding's includes the head's share)
  eval_loss       F64 []  what `fleet eval --weights DIR --data eval.txt --tokenizer char
                          --eval-windows 4` must print: the mean loss over the first 4
                          consecutive windows of max_position_embeddings tokens of the last
                          10% of eval.txt, its characters numbered in sorted order
and testdata/hf/models/eval.txt, the text those windows are drawn from.

The model is written out below from the conventions of Hugging Face's modeling code
(not imported from it): RMSNorm with statistics in float32 and eps from the config;
rotary embeddings with rotate_half (element j pairs with j + head_dim/2), their
inverse frequencies and cos/sin computed in float32 as Hugging Face does, Llama 3.1's
frequency scaling; grouped-query attention (key/value head g serves query heads
g·H/KVH ... (g+1)·H/KVH − 1), Qwen3's QK-norm (an RMSNorm over each head of q and
k before the rotation), SwiGLU down(silu(gate(x))·up(x)) or Arcee's ReLU²
down(relu(up(x))²), a final RMSNorm and the head. Weights are drawn in float32 (rounded to bf16 for the BF16 folders, and the
reference uses the rounded values); the forward and backward passes run in float64.

How to run (from the repo root, with Debian's python3-torch):
  /usr/bin/python3 scripts/make_llama_fixture.py
"""

import json
import math
import os
import struct

import torch
import torch.nn.functional as F

CASES = [
    dict(name="llama_gqa", arch="LlamaForCausalLM", model_type="llama", vocab=41, hidden=32,
         layers=2, heads=4, kv_heads=2, head_dim=None, inter=40, tie=False, theta=10000.0,
         eps=1e-6, attention_bias=False, qkv_bias=False, qk_norm=False, rope_scaling=None,
         dtype="float32", shards=1, batch=2, seq=9, max_pos=16, seed=11),
    dict(name="llama3_tied", arch="LlamaForCausalLM", model_type="llama", vocab=37, hidden=24,
         layers=2, heads=3, kv_heads=1, head_dim=None, inter=32, tie=True, theta=500000.0,
         eps=1e-5, attention_bias=True, qkv_bias=False, qk_norm=False,
         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=8),
         dtype="bfloat16", shards=1, batch=2, seq=12, max_pos=32, seed=12),
    dict(name="qwen2", arch="Qwen2ForCausalLM", model_type="qwen2", vocab=43, hidden=24,
         layers=2, heads=3, kv_heads=1, head_dim=None, inter=36, tie=True, theta=1000000.0,
         eps=1e-6, attention_bias=False, qkv_bias=True, qk_norm=False, rope_scaling=None,
         dtype="bfloat16", shards=2, batch=2, seq=8, max_pos=32, seed=13),
    dict(name="qwen3", arch="Qwen3ForCausalLM", model_type="qwen3", vocab=39, hidden=32,
         layers=2, heads=4, kv_heads=2, head_dim=16, inter=48, tie=False, theta=1000000.0,
         eps=1e-6, attention_bias=False, qkv_bias=False, qk_norm=True, rope_scaling=None,
         dtype="float32", shards=2, batch=2, seq=10, max_pos=32, seed=14),
    dict(name="arcee", arch="ArceeForCausalLM", model_type="arcee", vocab=35, hidden=24,
         layers=2, heads=4, kv_heads=2, head_dim=None, inter=40, tie=False, theta=10000.0,
         eps=1e-5, attention_bias=False, qkv_bias=False, qk_norm=False, rope_scaling=None,
         dtype="float32", shards=1, batch=2, seq=9, max_pos=16, seed=15, mlp="relu2"),
]


def relu2(c):
    return c.get("mlp") == "relu2"


def head_dim(c):
    return c["head_dim"] or c["hidden"] // c["heads"]


def param_shapes(c):
    """Hugging Face names and shapes, in the order the loaders list them."""
    H, KV, hd, C, I, V = c["heads"], c["kv_heads"], head_dim(c), c["hidden"], c["inter"], c["vocab"]
    qkv_bias = c["attention_bias"] or c["qkv_bias"]
    out = [("model.embed_tokens.weight", (V, C))]
    for i in range(c["layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (C,)),
                (p + "self_attn.q_proj.weight", (H * hd, C)),
                (p + "self_attn.k_proj.weight", (KV * hd, C)),
                (p + "self_attn.v_proj.weight", (KV * hd, C))]
        if qkv_bias:
            out += [(p + "self_attn.q_proj.bias", (H * hd,)),
                    (p + "self_attn.k_proj.bias", (KV * hd,)),
                    (p + "self_attn.v_proj.bias", (KV * hd,))]
        out += [(p + "self_attn.o_proj.weight", (C, H * hd))]
        if c["attention_bias"]:
            out += [(p + "self_attn.o_proj.bias", (C,))]
        if c["qk_norm"]:
            out += [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
        out += [(p + "post_attention_layernorm.weight", (C,))]
        if not relu2(c):
            out += [(p + "mlp.gate_proj.weight", (I, C))]
        out += [(p + "mlp.up_proj.weight", (I, C)),
                (p + "mlp.down_proj.weight", (C, I))]
    out += [("model.norm.weight", (C,))]
    if not c["tie"]:
        out += [("lm_head.weight", (V, C))]
    return out


def init_params(c, gen):
    params = {}
    for name, shape in param_shapes(c):
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = 1 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)
        elif name.endswith(".bias"):
            w = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)
        else:
            w = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)
        if c["dtype"] == "bfloat16":
            w = w.to(torch.bfloat16)
        params[name] = w
    return params


def inv_freq(c):
    """The rotary inverse frequencies, in float32, as Hugging Face computes them."""
    hd = head_dim(c)
    f = 1.0 / (c["theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float32) / hd))
    s = c["rope_scaling"]
    if s is None:
        return f
    old = s["original_max_position_embeddings"]
    low_wave = old / s["low_freq_factor"]
    high_wave = old / s["high_freq_factor"]
    wave = 2 * math.pi / f
    scaled = torch.where(wave > low_wave, f / s["factor"], f)
    smooth = (old / wave - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = ~(wave < high_wave) & ~(wave > low_wave)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(c, T):
    f = inv_freq(c)[None, :, None].float()
    pos = torch.arange(T, dtype=torch.int64)[None, None, :].float()
    freqs = (f @ pos).transpose(1, 2)          # [1, T, hd/2], float32
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[0].double(), emb.sin()[0].double()   # [T, hd]


def rms_norm(x, w, eps):
    v = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(v + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(c, P, x, y):
    B, T = x.shape
    H, KV, hd, eps = c["heads"], c["kv_heads"], head_dim(c), c["eps"]
    cos, sin = rope_cos_sin(c, T)
    h = P["model.embed_tokens.weight"][x]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c["layers"]):
        p = "model.layers.%d." % i
        r = h
        a = rms_norm(h, P[p + "input_layernorm.weight"], eps)

        def lin(t, name, bias=None):
            out = t @ P[p + name + ".weight"].T
            if p + name + ".bias" in P:
                out = out + P[p + name + ".bias"]
            return out

        q = lin(a, "self_attn.q_proj").view(B, T, H, hd)
        k = lin(a, "self_attn.k_proj").view(B, T, KV, hd)
        v = lin(a, "self_attn.v_proj").view(B, T, KV, hd)
        if c["qk_norm"]:
            q = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, P[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(~mask, float("-inf"))
        o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
        h = r + lin(o, "self_attn.o_proj")
        r = h
        m = rms_norm(h, P[p + "post_attention_layernorm.weight"], eps)
        if relu2(c):
            m = lin(F.relu(lin(m, "mlp.up_proj")).square(), "mlp.down_proj")
        else:
            m = lin(F.silu(lin(m, "mlp.gate_proj")) * lin(m, "mlp.up_proj"), "mlp.down_proj")
        h = r + m
    h = rms_norm(h, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if c["tie"] else P["lm_head.weight"]
    logits = h @ head.T
    loss = F.cross_entropy(logits.reshape(B * T, -1), y.reshape(-1))
    return logits, loss


_DT = {torch.float32: ("F32", "f"), torch.float64: ("F64", "d"), torch.int32: ("I32", "i")}


def _bytes(t):
    if t.dtype == torch.bfloat16:
        bits = t.contiguous().view(torch.int16).flatten().tolist()
        return "BF16", struct.pack("<%dh" % len(bits), *bits)
    name, fmt = _DT[t.dtype]
    flat = t.contiguous().flatten().tolist()
    return name, struct.pack("<%d%s" % (len(flat), fmt), *flat)


def write_safetensors(path, tensors, meta=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, b = _bytes(tensors[name])
        header[name] = dict(dtype=dt, shape=list(tensors[name].shape), data_offsets=[off, off + len(b)])
        blobs.append(b)
        off += len(b)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def hf_config(c):
    cfg = dict(architectures=[c["arch"]], model_type=c["model_type"], vocab_size=c["vocab"],
               hidden_size=c["hidden"], intermediate_size=c["inter"], num_hidden_layers=c["layers"],
               num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
               max_position_embeddings=c["max_pos"], rms_norm_eps=c["eps"], rope_theta=c["theta"],
               tie_word_embeddings=c["tie"], hidden_act="relu2" if relu2(c) else "silu",
               torch_dtype=c["dtype"], bos_token_id=1, eos_token_id=2)
    if c["model_type"] == "arcee":
        cfg.update(attention_bias=c["attention_bias"], mlp_bias=False)
    if c["model_type"] == "llama":
        cfg.update(attention_bias=c["attention_bias"], mlp_bias=False, rope_scaling=c["rope_scaling"])
    if c["model_type"] in ("qwen2", "qwen3"):
        cfg.update(use_sliding_window=False, sliding_window=None)
    if c["model_type"] == "qwen3":
        cfg.update(attention_bias=False)
    if c["head_dim"]:
        cfg["head_dim"] = c["head_dim"]
    return cfg


def make(c, root, text):
    gen = torch.Generator().manual_seed(c["seed"])
    params = init_params(c, gen)
    d = os.path.join(root, c["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
        f.write("\n")
    names = [n for n, _ in param_shapes(c)]
    if c["shards"] == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), params, {"format": "pt"})
    else:
        per = (len(names) + c["shards"] - 1) // c["shards"]
        index = dict(metadata=dict(total_size=sum(params[n].numel() * params[n].element_size() for n in names)), weight_map={})
        for s in range(c["shards"]):
            file = "model-%05d-of-%05d.safetensors" % (s + 1, c["shards"])
            part = {n: params[n] for n in names[s * per:(s + 1) * per]}
            write_safetensors(os.path.join(d, file), part, {"format": "pt"})
            for n in part:
                index["weight_map"][n] = file
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    P = {n: params[n].double().requires_grad_(True) for n in names}
    x = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=gen, dtype=torch.int64)
    y = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=gen, dtype=torch.int64)
    logits, loss = forward(c, P, x, y)
    loss.backward()
    ref = dict(x=x.to(torch.int32), y=y.to(torch.int32), logits=logits.detach().float(),
               loss=loss.detach().reshape(()))
    for n in names:
        ref["grad." + n] = P[n].grad.float()
    with torch.no_grad():
        ref["eval_loss"] = eval_loss(c, params, text).reshape(())
    write_safetensors(os.path.join(root, c["name"] + "_ref.safetensors"), ref,
                      {"torch_version": torch.__version__, "case": c["name"]})
    print("%s: loss %.6f" % (c["name"], loss.item()))


EVAL_WINDOWS = 4


def eval_text():
    """A fixed text of 30 characters' alphabet, made from a seeded generator."""
    gen = torch.Generator().manual_seed(99)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = []
    for _ in range(700):
        n = int(torch.randint(1, 8, (1,), generator=gen))
        words.append("".join(letters[int(i)] for i in torch.randint(0, 26, (n,), generator=gen)))
        r = int(torch.randint(0, 20, (1,), generator=gen))
        words.append({0: ".\n", 1: ", "}.get(r, " "))
    return "".join(words)


def eval_loss(c, params, text):
    """fleet eval's figure: consecutive windows of the validation split."""
    chars = sorted(set(text))
    ids = [chars.index(ch) for ch in text]
    val = ids[int(0.9 * len(ids)):]
    T = c["max_pos"]
    P = {n: params[n].double() for n in params}
    losses = []
    for w in range(EVAL_WINDOWS):
        x = torch.tensor([val[w * T:(w + 1) * T]])
        y = torch.tensor([val[w * T + 1:(w + 1) * T + 1]])
        losses.append(forward(c, P, x, y)[1])
    return torch.stack(losses).mean()


def main():
    root = os.path.join("testdata", "hf", "models")
    os.makedirs(root, exist_ok=True)
    text = eval_text()
    with open(os.path.join(root, "eval.txt"), "w") as f:
        f.write(text)
    for c in CASES:
        make(c, root, text)


if __name__ == "__main__":
    main()

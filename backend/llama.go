package backend

// LlamaBlocks is a Backend with the kernels of Llama-style blocks
// (model.Config.Arch "llama"): RMSNorm, rotary position embeddings with
// the optional QK-norm before them, SwiGLU, and grouped-query attention
// (a LlamaBlocks backend's Attention, AttentionBackward and AttentionKV
// take KVH, the key/value heads); and ReLU², the activation of an MLP
// variant. A backend without them cannot run such a model; the tensor
// ops say so.
//
// Operands follow Backend's rules: activations and their gradients F32
// or BF16, computed in F32; weights, their gradients and statistics F32.
type LlamaBlocks interface {
	// RMSNorm writes out = x·rstd·w for each row of x [rows, cols], with
	// rstd = 1/sqrt(mean(x²) + eps) computed in F32 and saved [rows].
	RMSNorm(out, rstd, x, w Ref, rows, cols int, eps float32)
	// RMSNormBackward writes dx = rstd·(g·w − x̂·mean(g·w·x̂)), x̂ = x·rstd,
	// plus dres where dres is not Nil, and accumulates Σ g·x̂ over the
	// rows into dw; where drop.Dst is not Nil it also writes dx masked by
	// drop.Mask there (as LayerNormBackward does).
	RMSNormBackward(dx, dres, dw, dout, x, rstd, w Ref, rows, cols int, drop DropoutOut)
	// AddRMSNorm is DropoutAdd(sum, x, y, rows·cols, m) followed by
	// RMSNorm(out, rstd, sum, w, rows, cols, eps), in one pass and with
	// the same bits: a residual add fused with the norm after it.
	AddRMSNorm(sum, out, rstd, x, y, w Ref, rows, cols int, eps float32, m DropoutMask)

	// Rotary applies rotary position embeddings to the q and k heads of a
	// packed qkv (p.Width() wide rows; see Rotary), writing out (same
	// shape; the v heads are copied). Where qw and kw are not Nil (QK-norm),
	// each q head is first RMS-normalised with qw [HD] and each k head with
	// kw [HD], their rstd saved in rstd [rows·(H+KVH)]. The rotation pairs
	// element j of a head with element j+HD/2 (Hugging Face's
	// rotate_half): at position t, with c, s = table's cos and sin of
	// angle (t, j), out[j] = x[j]·c − x[j+HD/2]·s and
	// out[j+HD/2] = x[j+HD/2]·c + x[j]·s.
	Rotary(p Rotary, out, rstd, qkv, qw, kw, table Ref)
	// RotaryBackward writes dqkv from dout (the rotation's transpose, then
	// QK-norm's backward) and accumulates into dqw and dkw where QK-norm
	// is on.
	RotaryBackward(p Rotary, dqkv, dqw, dkw, dout, qkv, rstd, qw, kw, table Ref)

	// SwiGLU writes out[r, j] = silu(gu[r, j])·gu[r, hidden+j] for gu
	// [rows, 2·hidden] (the gate's columns, then the up projection's) and
	// out [rows, hidden], silu(g) = g·σ(g).
	SwiGLU(out, gu Ref, rows, hidden int)
	// SwiGLUBackward writes dgu [rows, 2·hidden] from dout [rows, hidden].
	SwiGLUBackward(dgu, gu, dout Ref, rows, hidden int)

	// ReLU2 writes out[i] = max(x[i], 0)² for n elements (squared ReLU,
	// the activation of modded-nanogpt's MLP).
	ReLU2(out, x Ref, n int)
	// ReLU2Backward writes dx[i] = 2·max(x[i], 0)·dout[i] for n elements.
	ReLU2Backward(dx, x, dout Ref, n int)
}

// Rotary describes a Rotary call over a packed qkv of B·T rows: H query
// heads, then KVH key heads, then KVH value heads, each HD wide; row
// (b, t) is at position Pos+t. Table holds the cos, then the sin, of each
// position's angles: cos(t, j) at t·HD/2 + j and sin(t, j) at
// (MaxPos + t)·HD/2 + j, for t < MaxPos.
type Rotary struct {
	B, T, H, KVH, HD int
	Pos, MaxPos      int
	Eps              float32 // QK-norm's
}

// Width is the packed qkv's row width, (H + 2·KVH)·HD.
func (p Rotary) Width() int { return (p.H + 2*p.KVH) * p.HD }

// KVHeads is an Attention's key/value heads: KVH, or H where KVH is 0
// (GPT-2's multi-head attention).
func (a Attention) KVHeads() int {
	if a.KVH == 0 {
		return a.H
	}
	return a.KVH
}

// Width is the packed qkv's row width: C for the queries (H heads of
// C/H), and C/H·KVHeads for the keys and for the values (3C for GPT-2's
// attention).
func (a Attention) Width() int { return a.C + 2*a.C/a.H*a.KVHeads() }

// Grouped reports whether a groups its keys and values (KVHeads < H).
// Only a LlamaBlocks backend takes such a call.
func (a Attention) Grouped() bool { return a.KVHeads() != a.H }

// KVHeads is AttentionKV's key/value heads, as Attention's.
func (a AttentionKV) KVHeads() int {
	if a.KVH == 0 {
		return a.H
	}
	return a.KVH
}

package nn

import (
	"sync"

	"github.com/fleetml/fleet/tensor"
)

// CausalSelfAttention is causal self-attention: one projection to packed
// q, k, v, fused attention over NHead query heads, and an output
// projection followed by dropout. GPT-2's has as many key/value heads as
// query heads and no rotation; Llama's groups the keys and values into
// NKVHead heads, rotates q and k (Rope) and, in Qwen3's, RMS-normalises
// each head of q and k first (QNorm, KNorm).
type CausalSelfAttention struct {
	CAttn, CProj *Linear
	NHead        int
	NKVHead      int // 0: NHead
	ResidDrop    *Dropout
	// AttnDrop, where not nil, is dropout on the attention probabilities
	// (nanoGPT's attn_dropout), its masks drawn at site AttnSite(Layer)
	// of the forward pass's Masks.
	AttnDrop *Dropout
	Layer    int
	// Rope, where not nil, rotates q and k by their positions (rotary
	// embeddings); QNorm and KNorm, where not nil, normalise each head of
	// q and of k before it.
	Rope         *Rope
	QNorm, KNorm *RMSNorm
}

// KV is one layer's key/value cache for inference: K and V
// [B, MaxT, NKVHead·head width] hold the keys and values of positions
// [0, Pos).
type KV struct {
	K, V *tensor.Tensor
	Pos  int
}

// Forward maps x [B, T, C] to [B, T, C], the output's dropout mask drawn
// from masks. With a cache (inference, not differentiable), x holds
// positions [kv.Pos, kv.Pos+T): their keys and values are written into
// the cache, and each attends to every cached position up to itself.
func (a *CausalSelfAttention) Forward(x *tensor.Tensor, kv *KV, masks *Masks) *tensor.Tensor {
	return a.ResidDrop.Forward(a.project(x, kv, masks), masks)
}

// Residual returns res + Forward(x, kv, masks), the add fused with the
// dropout (Dropout.Residual).
func (a *CausalSelfAttention) Residual(res, x *tensor.Tensor, kv *KV, masks *Masks) *tensor.Tensor {
	return a.ResidDrop.Residual(res, a.project(x, kv, masks), masks)
}

// ResidualLN is Residual fused with the norm n after it
// (Dropout.ResidualLN): res + Forward(x, kv, masks), and n of that.
func (a *CausalSelfAttention) ResidualLN(res, x *tensor.Tensor, kv *KV, masks *Masks, n Norm) (sum, out *tensor.Tensor) {
	return a.ResidDrop.ResidualLN(res, a.project(x, kv, masks), masks, n)
}

// KVHeads is the number of key/value heads.
func (a *CausalSelfAttention) KVHeads() int {
	if a.NKVHead == 0 {
		return a.NHead
	}
	return a.NKVHead
}

// AttnSite is the mask site of layer's attention-probability dropout:
// apart from the sites the other dropouts take in turn (from 0), so that
// adding it moves none of theirs, and fixed by the layer, so that a
// pipeline stage or a recomputation draws its masks alike.
func AttnSite(layer int) uint32 { return 1<<31 | uint32(layer) }

// project is Forward before the dropout.
func (a *CausalSelfAttention) project(x *tensor.Tensor, kv *KV, masks *Masks) *tensor.Tensor {
	qkv := a.CAttn.Forward(x)
	kvh := a.KVHeads()
	if a.Rope != nil {
		pos := 0
		if kv != nil {
			pos = kv.Pos
		}
		var qn, kn *tensor.Tensor
		var eps float32
		if a.QNorm != nil {
			qn, kn, eps = a.QNorm.W.T, a.KNorm.W.T, a.QNorm.Eps
		}
		qkv = tensor.Rotary(qkv, a.Rope.Table(qkv.Device()), qn, kn, a.NHead, kvh, pos, eps)
	}
	var y *tensor.Tensor
	if kv == nil {
		if d := a.AttnDrop; d != nil && masks != nil && d.Training && d.P > 0 {
			r := masks.Stream
			r.Site = AttnSite(a.Layer)
			y = tensor.DroppedAttention(qkv, a.NHead, kvh, d.P, r, masks.Base)
		} else {
			y = tensor.GroupedAttention(qkv, a.NHead, kvh)
		}
	} else {
		y = tensor.GroupedAttentionKV(qkv, kv.K, kv.V, a.NHead, kvh, kv.Pos)
	}
	return a.CProj.Forward(y)
}

// Parameters lists the attention's parameters.
func (a *CausalSelfAttention) Parameters() []*Parameter {
	ps := append(a.CAttn.Parameters(), a.CProj.Parameters()...)
	if a.QNorm != nil {
		ps = append(ps, a.QNorm.W, a.KNorm.W)
	}
	return ps
}

// Rope is a model's rotary position embeddings: the inverse frequencies
// of a head's pairs and the table of their cos and sin at positions
// [0, MaxPos), made once per device that asks for it (the layers of a
// pipeline's stages share it).
type Rope struct {
	InvFreq []float32
	MaxPos  int

	mu     sync.Mutex
	tables map[tensor.Device]*tensor.Tensor
}

// Table is the cos/sin table on dev (tensor.RotaryTable), made the first
// time dev asks.
func (r *Rope) Table(dev tensor.Device) *tensor.Tensor {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.tables[dev]; ok {
		return t
	}
	if r.tables == nil {
		r.tables = map[tensor.Device]*tensor.Tensor{}
	}
	var t *tensor.Tensor
	tensor.ProgramOf(dev).Persist(func() { t = tensor.RotaryTable(dev, r.InvFreq, r.MaxPos) })
	r.tables[dev] = t
	return t
}

// Free releases the tables (the model moved).
func (r *Rope) Free() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for d, t := range r.tables {
		t.Free()
		delete(r.tables, d)
	}
}

// FeedForward is a block's feed-forward network ending in dropout: GPT-2's
// MLP, or a Llama's Projected (SwiGLU, ReLU²). Residual and ResidualLN
// are as CausalSelfAttention's.
type FeedForward interface {
	Forward(x *tensor.Tensor, masks *Masks) *tensor.Tensor
	Residual(res, x *tensor.Tensor, masks *Masks) *tensor.Tensor
	ResidualLN(res, x *tensor.Tensor, masks *Masks, n Norm) (sum, out *tensor.Tensor)
	Parameters() []*Parameter
}

// MLP is GPT-2's feed-forward block: Linear to 4C, tanh-GELU, Linear to C,
// dropout.
type MLP struct {
	CFC, CProj *Linear
	Drop       *Dropout
}

// Forward maps x [..., C] to [..., C], the dropout mask drawn from masks.
func (m *MLP) Forward(x *tensor.Tensor, masks *Masks) *tensor.Tensor {
	return m.Drop.Forward(m.apply(x), masks)
}

// Residual returns res + Forward(x, masks), the add fused with the
// dropout (Dropout.Residual).
func (m *MLP) Residual(res, x *tensor.Tensor, masks *Masks) *tensor.Tensor {
	return m.Drop.Residual(res, m.apply(x), masks)
}

// ResidualLN is Residual fused with the norm n after it
// (Dropout.ResidualLN): res + Forward(x, masks), and n of that.
func (m *MLP) ResidualLN(res, x *tensor.Tensor, masks *Masks, n Norm) (sum, out *tensor.Tensor) {
	return m.Drop.ResidualLN(res, m.apply(x), masks, n)
}

// apply is Forward before the dropout.
func (m *MLP) apply(x *tensor.Tensor) *tensor.Tensor {
	var b1, b2 *tensor.Tensor
	if m.CFC.B != nil {
		b1 = m.CFC.B.T
	}
	if m.CProj.B != nil {
		b2 = m.CProj.B.T
	}
	return tensor.MLP(x, m.CFC.W.T, b1, m.CProj.W.T, b2)
}

// Parameters lists the MLP's parameters.
func (m *MLP) Parameters() []*Parameter { return append(m.CFC.Parameters(), m.CProj.Parameters()...) }

// Projected is a Llama's feed-forward block: Down(Act(In(x))), then
// dropout. SwiGLU's In is the gate and up projections as one Linear to
// 2·hidden (the gate's columns first) and Act tensor.SwiGLU,
// silu(gate)·up; ReLU²'s (modded-nanogpt's, Arcee's) In is the up
// projection and Act tensor.ReLU2, max(x, 0)².
type Projected struct {
	In, Down *Linear
	Act      func(*tensor.Tensor) *tensor.Tensor
	Drop     *Dropout
}

// Forward maps x [..., C] to [..., C], the dropout mask drawn from masks.
func (f *Projected) Forward(x *tensor.Tensor, masks *Masks) *tensor.Tensor {
	return f.Drop.Forward(f.apply(x), masks)
}

// Residual is as MLP's.
func (f *Projected) Residual(res, x *tensor.Tensor, masks *Masks) *tensor.Tensor {
	return f.Drop.Residual(res, f.apply(x), masks)
}

// ResidualLN is as MLP's.
func (f *Projected) ResidualLN(res, x *tensor.Tensor, masks *Masks, n Norm) (sum, out *tensor.Tensor) {
	return f.Drop.ResidualLN(res, f.apply(x), masks, n)
}

func (f *Projected) apply(x *tensor.Tensor) *tensor.Tensor {
	return f.Down.Forward(f.Act(f.In.Forward(x)))
}

// Parameters lists the block's parameters.
func (f *Projected) Parameters() []*Parameter {
	return append(f.In.Parameters(), f.Down.Parameters()...)
}

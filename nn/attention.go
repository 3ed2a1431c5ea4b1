package nn

import "github.com/fleetml/fleet/tensor"

// CausalSelfAttention is GPT-2's attention: one projection to packed
// q, k, v, fused causal attention over NHead heads, and an output
// projection followed by dropout.
type CausalSelfAttention struct {
	CAttn, CProj *Linear
	NHead        int
	ResidDrop    *Dropout
}

// KV is one layer's key/value cache for inference: K and V [B, MaxT, C]
// hold the keys and values of positions [0, Pos).
type KV struct {
	K, V *tensor.Tensor
	Pos  int
}

// Forward maps x [B, T, C] to [B, T, C], the output's dropout mask drawn
// from masks. With a cache (inference, not differentiable), x holds
// positions [kv.Pos, kv.Pos+T): their keys and values are written into
// the cache, and each attends to every cached position up to itself.
func (a *CausalSelfAttention) Forward(x *tensor.Tensor, kv *KV, masks *Masks) *tensor.Tensor {
	return a.ResidDrop.Forward(a.project(x, kv), masks)
}

// Residual returns res + Forward(x, kv, masks), the add fused with the
// dropout (Dropout.Residual).
func (a *CausalSelfAttention) Residual(res, x *tensor.Tensor, kv *KV, masks *Masks) *tensor.Tensor {
	return a.ResidDrop.Residual(res, a.project(x, kv), masks)
}

// ResidualLN is Residual fused with the LayerNorm ln after it
// (Dropout.ResidualLN): res + Forward(x, kv, masks), and ln of that.
func (a *CausalSelfAttention) ResidualLN(res, x *tensor.Tensor, kv *KV, masks *Masks, ln *LayerNorm) (sum, out *tensor.Tensor) {
	return a.ResidDrop.ResidualLN(res, a.project(x, kv), masks, ln)
}

// project is Forward before the dropout.
func (a *CausalSelfAttention) project(x *tensor.Tensor, kv *KV) *tensor.Tensor {
	qkv := a.CAttn.Forward(x)
	var y *tensor.Tensor
	if kv == nil {
		y = tensor.Attention(qkv, a.NHead)
	} else {
		y = tensor.AttentionKV(qkv, kv.K, kv.V, a.NHead, kv.Pos)
	}
	return a.CProj.Forward(y)
}

// Parameters lists the attention's parameters.
func (a *CausalSelfAttention) Parameters() []*Parameter {
	return append(a.CAttn.Parameters(), a.CProj.Parameters()...)
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

// ResidualLN is Residual fused with the LayerNorm ln after it
// (Dropout.ResidualLN): res + Forward(x, masks), and ln of that.
func (m *MLP) ResidualLN(res, x *tensor.Tensor, masks *Masks, ln *LayerNorm) (sum, out *tensor.Tensor) {
	return m.Drop.ResidualLN(res, m.apply(x), masks, ln)
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

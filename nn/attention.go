package nn

import "github.com/fleetml/fleet/tensor"

// CausalSelfAttention is GPT-2's attention: one projection to packed
// q, k, v, fused causal attention over NHead heads, and an output projection.
type CausalSelfAttention struct {
	CAttn, CProj *Linear
	NHead        int
	ResidDrop    *Dropout
}

// Forward maps x [B, T, C] to [B, T, C].
func (a *CausalSelfAttention) Forward(x *tensor.Tensor) *tensor.Tensor {
	y := tensor.Attention(a.CAttn.Forward(x), a.NHead)
	return a.ResidDrop.Forward(a.CProj.Forward(y))
}

// ForwardKV is Forward for inference with a key/value cache: x holds
// positions [pos, pos+T).
func (a *CausalSelfAttention) ForwardKV(x, kc, vc *tensor.Tensor, pos int) *tensor.Tensor {
	y := tensor.AttentionKV(a.CAttn.Forward(x), kc, vc, a.NHead, pos)
	return a.CProj.Forward(y)
}

// Parameters lists the attention's parameters.
func (a *CausalSelfAttention) Parameters() []*Parameter {
	return append(a.CAttn.Parameters(), a.CProj.Parameters()...)
}

// MLP is GPT-2's feed-forward block: Linear to 4C, tanh-GELU, Linear to C.
type MLP struct {
	CFC, CProj *Linear
	Drop       *Dropout
}

// Forward maps x [..., C] to [..., C].
func (m *MLP) Forward(x *tensor.Tensor) *tensor.Tensor {
	return m.Drop.Forward(m.CProj.Forward(tensor.GELU(m.CFC.Forward(x))))
}

// Parameters lists the MLP's parameters.
func (m *MLP) Parameters() []*Parameter { return append(m.CFC.Parameters(), m.CProj.Parameters()...) }

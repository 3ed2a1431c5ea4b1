// Package nn holds the building blocks of neural networks on top of package
// tensor: named parameters, their initialisation, and the modules the
// model families are made of (Linear, Embedding, LayerNorm and RMSNorm,
// causal self-attention with grouped heads and rotary embeddings, the
// GELU MLP and the projected feed-forwards (SwiGLU, ReLU²), the LSTM
// layer, dropout).
package nn

import (
	"fmt"

	"github.com/fleetml/fleet/tensor"
)

// Parameter is a trainable tensor with its checkpoint name. Decay says
// whether AdamW's weight decay applies (2-D weights: yes; biases, norms: no).
type Parameter struct {
	Name  string
	T     *tensor.Tensor
	Decay bool
	// Parts, where not nil, marks a weight matrix inside a block (a
	// Linear's W, stored [in, out]) and lists the widths, along its out
	// axis, of the matrices fused into it (q, k and v; gate and up), or
	// holds its one width. Muon orthogonalises each part on its own;
	// embeddings, heads, norms and biases have none.
	Parts []int
}

// NewParameter wraps t, marking it as requiring a gradient. Tensors of two
// or more dimensions are decayed.
func NewParameter(name string, t *tensor.Tensor) *Parameter {
	t.SetRequiresGrad(true)
	return &Parameter{Name: name, T: t, Decay: len(t.Shape()) >= 2}
}

// To moves the parameter to dev, keeping it a leaf that requires grad.
func (p *Parameter) To(dev tensor.Device) {
	if p.T.Device() == dev {
		return
	}
	var moved *tensor.Tensor
	tensor.ProgramOf(dev).Persist(func() { moved = p.T.To(dev) })
	p.T.Free()
	p.T = moved.SetRequiresGrad(true)
}

// Init holds what parameter initialisation needs.
type Init struct {
	RNG *tensor.RNG
	Dev tensor.Device
}

// Normal draws a new F32 tensor from N(0, std²).
func (in Init) Normal(std float32, shape ...int) *tensor.Tensor {
	return tensor.Randn(in.Dev, in.RNG, std, shape...)
}

// Linear computes x @ W + B with W stored [in, out], the Conv1D layout of
// GPT-2 checkpoints.
type Linear struct {
	W, B *Parameter
}

// NewLinear makes a Linear with weights from N(0, std²) and zero bias (if bias).
func NewLinear(name string, in Init, nIn, nOut int, bias bool, std float32) *Linear {
	l := &Linear{W: NewParameter(name+".weight", in.Normal(std, nIn, nOut))}
	if bias {
		l.B = NewParameter(name+".bias", tensor.Zeros(in.Dev, nOut))
	}
	return l
}

// Forward applies the layer.
func (l *Linear) Forward(x *tensor.Tensor) *tensor.Tensor {
	var b *tensor.Tensor
	if l.B != nil {
		b = l.B.T
	}
	return tensor.Linear(x, l.W.T, b)
}

// Parameters lists the layer's parameters.
func (l *Linear) Parameters() []*Parameter { return nonNil(l.W, l.B) }

// Embedding maps token ids to rows of W [num, dim].
type Embedding struct {
	W *Parameter
}

// NewEmbedding draws the table from N(0, std²).
func NewEmbedding(name string, in Init, num, dim int, std float32) *Embedding {
	return &Embedding{W: NewParameter(name+".weight", in.Normal(std, num, dim))}
}

// Forward looks up ids.
func (e *Embedding) Forward(ids *tensor.Tensor) *tensor.Tensor { return tensor.Embedding(e.W.T, ids) }

// Norm is a normalisation layer over the last axis: LayerNorm (GPT-2's)
// or RMSNorm (Llama's). AddForward is its residual add fused with it:
// sum = x + dropout(y) (x nil: the dropout alone; p 0: a plain add) and
// the norm of sum, in one pass (tensor.AddLayerNorm, tensor.AddRMSNorm).
type Norm interface {
	Forward(x *tensor.Tensor) *tensor.Tensor
	AddForward(x, y *tensor.Tensor, p float32, r *tensor.DropoutStream, base *tensor.Tensor) (sum, out *tensor.Tensor)
	Parameters() []*Parameter
}

// LayerNorm normalises the last axis, with a weight and an optional bias.
type LayerNorm struct {
	W, B *Parameter
	Eps  float32
}

// NewLayerNorm starts with weight 1 and bias 0.
func NewLayerNorm(name string, in Init, dim int, bias bool, eps float32) *LayerNorm {
	ln := &LayerNorm{W: NewParameter(name+".weight", tensor.Ones(in.Dev, dim)), Eps: eps}
	if bias {
		ln.B = NewParameter(name+".bias", tensor.Zeros(in.Dev, dim))
	}
	return ln
}

// Forward applies the norm.
func (ln *LayerNorm) Forward(x *tensor.Tensor) *tensor.Tensor {
	return tensor.LayerNorm(x, ln.W.T, ln.bias(), ln.Eps)
}

// AddForward implements Norm.
func (ln *LayerNorm) AddForward(x, y *tensor.Tensor, p float32, r *tensor.DropoutStream, base *tensor.Tensor) (sum, out *tensor.Tensor) {
	return tensor.AddLayerNorm(x, y, p, r, base, ln.W.T, ln.bias(), ln.Eps)
}

func (ln *LayerNorm) bias() *tensor.Tensor {
	if ln.B == nil {
		return nil
	}
	return ln.B.T
}

// Parameters lists the norm's parameters.
func (ln *LayerNorm) Parameters() []*Parameter { return nonNil(ln.W, ln.B) }

// RMSNorm normalises the last axis by its root mean square, with a
// weight: x·w/sqrt(mean(x²) + Eps).
type RMSNorm struct {
	W   *Parameter
	Eps float32
}

// NewRMSNorm starts with weight 1.
func NewRMSNorm(name string, in Init, dim int, eps float32) *RMSNorm {
	return &RMSNorm{W: NewParameter(name+".weight", tensor.Ones(in.Dev, dim)), Eps: eps}
}

// Forward applies the norm.
func (n *RMSNorm) Forward(x *tensor.Tensor) *tensor.Tensor { return tensor.RMSNorm(x, n.W.T, n.Eps) }

// AddForward implements Norm.
func (n *RMSNorm) AddForward(x, y *tensor.Tensor, p float32, r *tensor.DropoutStream, base *tensor.Tensor) (sum, out *tensor.Tensor) {
	return tensor.AddRMSNorm(x, y, p, r, base, n.W.T, n.Eps)
}

// Parameters lists the norm's weight.
func (n *RMSNorm) Parameters() []*Parameter { return []*Parameter{n.W} }

func nonNil(ps ...*Parameter) []*Parameter {
	var out []*Parameter
	for _, p := range ps {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// CheckUnique returns an error if two parameters share a name.
func CheckUnique(ps []*Parameter) error {
	seen := map[string]bool{}
	for _, p := range ps {
		if seen[p.Name] {
			return fmt.Errorf("duplicate parameter name %q", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// Grad is the accumulated gradient, or nil before the first Backward.
func (p *Parameter) Grad() *tensor.Tensor { return p.T.Grad }

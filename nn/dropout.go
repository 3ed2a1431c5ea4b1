package nn

import (
	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/tensor"
)

// Dropout zeroes activations with probability P while Training, drawing
// its mask from the forward pass's Masks.
type Dropout struct {
	P        float32
	Training bool
}

// Forward applies dropout in training, its mask drawn from masks, and is
// the identity otherwise or when masks is nil (inference).
func (d *Dropout) Forward(x *tensor.Tensor, masks *Masks) *tensor.Tensor {
	if masks == nil || !d.Training || d.P == 0 {
		return x
	}
	y := tensor.DropoutAt(x, d.P, masks.RNG, masks.Base)
	masks.skipRows(x)
	return y
}

// Residual returns x + Forward(y, masks), a residual add of a branch that
// ends in dropout, in one pass (tensor.AddDropout): the same values and
// masks as the dropout followed by the add.
func (d *Dropout) Residual(x, y *tensor.Tensor, masks *Masks) *tensor.Tensor {
	if masks == nil || !d.Training || d.P == 0 {
		return tensor.Add(x, y)
	}
	out := tensor.AddDropoutAt(x, y, d.P, masks.RNG, masks.Base)
	masks.skipRows(y)
	return out
}

// ResidualLN is Residual (x nil: Forward(y)) with the LayerNorm ln that
// reads its result, in one pass (tensor.AddLayerNorm): it returns the sum
// and ln of it, the same values and masks as the ops one after the other.
func (d *Dropout) ResidualLN(x, y *tensor.Tensor, masks *Masks, ln *LayerNorm) (sum, out *tensor.Tensor) {
	var p float32
	var r *tensor.RNG
	var base *tensor.Tensor
	if masks != nil && d.Training && d.P > 0 {
		p, r, base = d.P, masks.RNG, masks.Base
	}
	var b *tensor.Tensor
	if ln.B != nil {
		b = ln.B.T
	}
	sum, out = tensor.AddLayerNorm(x, y, p, r, base, ln.W.T, b, ln.Eps)
	if p > 0 {
		masks.skipRows(y)
	}
	return sum, out
}

// Masks is where the dropout layers of one forward pass draw their masks:
// from RNG, one number per element, layer after layer in the order they
// run. The same RNG state gives the same masks (tensor.CheckpointRNG
// relies on it to recompute a block).
//
// Rows > 0 makes the input a run of consecutive rows (along its first
// axis) of a batch of Rows rows, such as a pipeline micro-batch, that must
// get the masks those rows get when the whole batch runs at once: after
// each layer's mask, the draws of the batch's other rows are skipped. With
// RNG started at the first layer's draws for the input's first row (Seek),
// every layer then draws from the whole batch's place for those rows.
// Rows 0 is the input's own rows.
//
// Base, where not nil, makes RNG's state an offset into a state read on
// the device (tensor.DropoutAt): a step replayed from a graph.
type Masks struct {
	RNG  *tensor.RNG
	Rows int
	Base *tensor.Tensor
}

// Seek points RNG at dropout layer j's draws for row row0 of the batch
// (Rows rows of perRow elements each) whose first layer draws from base:
// the layers before j draw Rows·perRow numbers each, and the rows before
// row0 of layer j perRow each.
func (m *Masks) Seek(base uint64, j, row0, perRow int) {
	m.RNG.State = base
	m.skip((uint64(j)*uint64(m.Rows) + uint64(row0)) * uint64(perRow))
}

// skip moves RNG n draws ahead without drawing: each draw of tensor.RNG
// (a SplitMix64 generator) adds rng.Gamma to its state.
func (m *Masks) skip(n uint64) { m.RNG.State += n * rng.Gamma }

// skipRows moves RNG past the draws of the batch's rows other than x's
// (see Rows), once a layer has drawn x's mask.
func (m *Masks) skipRows(x *tensor.Tensor) {
	if rows := x.Dim(0); m.Rows > rows {
		m.skip(uint64(m.Rows-rows) * uint64(x.Numel()/rows))
	}
}

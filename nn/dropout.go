package nn

import "github.com/fleetml/fleet/tensor"

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
	return tensor.DropoutAt(x, d.P, &masks.Stream, masks.Base)
}

// Residual returns x + Forward(y, masks), a residual add of a branch that
// ends in dropout, in one pass (tensor.AddDropout): the same values and
// masks as the dropout followed by the add.
func (d *Dropout) Residual(x, y *tensor.Tensor, masks *Masks) *tensor.Tensor {
	if masks == nil || !d.Training || d.P == 0 {
		return tensor.Add(x, y)
	}
	return tensor.AddDropoutAt(x, y, d.P, &masks.Stream, masks.Base)
}

// ResidualLN is Residual (x nil: Forward(y)) with the norm n that reads
// its result, in one pass (tensor.AddLayerNorm, tensor.AddRMSNorm): it
// returns the sum and n of it, the same values and masks as the ops one
// after the other.
func (d *Dropout) ResidualLN(x, y *tensor.Tensor, masks *Masks, n Norm) (sum, out *tensor.Tensor) {
	var p float32
	var r *tensor.DropoutStream
	var base *tensor.Tensor
	if masks != nil && d.Training && d.P > 0 {
		p, r, base = d.P, &masks.Stream, masks.Base
	}
	return n.AddForward(x, y, p, r, base)
}

// Masks is where the dropout layers of one forward pass take their masks:
// Stream (tensor.DropoutStream), whose sites the layers take in the order
// they run, and whose Row0 is the input's first row's place in the step's
// global batch, so that a row gets the same masks whichever micro-step,
// rank or pipeline micro-batch it falls to. The same stream gives the
// same masks (tensor.RecomputeRNG relies on it).
//
// Base, where not nil, makes Stream's key an offset into a key read on the
// device (tensor.DropoutAt): a step replayed from a graph.
type Masks struct {
	Stream tensor.DropoutStream
	Base   *tensor.Tensor
}

// Seek points the masks at dropout layer site's masks, under key, for the
// input whose first row is row row0 of the step's global batch.
func (m *Masks) Seek(key uint64, site uint32, row0 int64) {
	m.Stream = tensor.DropoutStream{Key: key, Site: site, Row0: row0}
}

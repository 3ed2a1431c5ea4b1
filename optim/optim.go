// Package optim holds fleet's optimizers and what drives them: AdamW with
// decoupled weight decay, the learning-rate schedule (linear warmup, then
// cosine decay to a floor), and global gradient-norm clipping.
package optim

import (
	"math"
	"slices"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// AdamWConfig holds AdamW's hyperparameters. Weight decay applies only to
// parameters whose Decay is set (2-D weights).
type AdamWConfig struct {
	LR          float32
	Beta1       float32
	Beta2       float32
	Eps         float32
	WeightDecay float32
}

// AdamW is PyTorch's AdamW. Its moments are allocated, zeroed, when it is
// made, outside any step scope.
type AdamW struct {
	Config AdamWConfig
	Params []*nn.Parameter
	M, V   []*tensor.Tensor
	// Steps counts the updates taken; bias correction uses it.
	Steps int
}

// NewAdamW makes an optimizer over params.
func NewAdamW(params []*nn.Parameter, cfg AdamWConfig) *AdamW {
	if cfg.Eps == 0 {
		cfg.Eps = 1e-8
	}
	o := &AdamW{Config: cfg, Params: params}
	for _, p := range params {
		// The moments live with their parameter, outside the steps of the
		// program driving its device (a pipeline stage's, perhaps).
		tensor.ProgramOf(p.T.Device()).Persist(func() {
			o.M = append(o.M, tensor.ZerosLike(p.T))
			o.V = append(o.V, tensor.ZerosLike(p.T))
		})
	}
	return o
}

// SetLR changes the learning rate for the next steps.
func (o *AdamW) SetLR(lr float32) { o.Config.LR = lr }

// Step updates every parameter that has a gradient.
func (o *AdamW) Step() { o.StepScaled(nil) }

// StepScaled is Step with every gradient multiplied by gradScale first, a
// one-element F32 tensor on the parameters' device (ClipCoef's
// coefficient), read there: where it is not finite, the weights and
// moments stay as they are (the step count still advances).
func (o *AdamW) StepScaled(gradScale *tensor.Tensor) {
	o.Steps++
	for i, p := range o.Params {
		if p.T.Grad == nil {
			continue
		}
		hp := backend.AdamW{LR: o.Config.LR, Beta1: o.Config.Beta1, Beta2: o.Config.Beta2, Eps: o.Config.Eps, Step: o.Steps}
		if p.Decay {
			hp.WeightDecay = o.Config.WeightDecay
		}
		tensor.AdamWStep(p.T, o.M[i], o.V[i], hp, gradScale)
	}
}

// ZeroGrad sets every gradient to zero, keeping its storage for the next
// step.
func (o *AdamW) ZeroGrad() {
	for _, p := range o.Params {
		tensor.ZeroGradInPlace(p.T)
	}
}

// Schedule is nanoGPT's learning-rate schedule: linear warmup over
// WarmupIters to LR, cosine decay to MinLR at DecayIters, then MinLR.
type Schedule struct {
	LR, MinLR               float64
	WarmupIters, DecayIters int
}

// At returns the learning rate for step it (counting from 0).
func (s Schedule) At(it int) float64 {
	if it < s.WarmupIters {
		return s.LR * float64(it+1) / float64(s.WarmupIters+1)
	}
	if it > s.DecayIters {
		return s.MinLR
	}
	span := s.DecayIters - s.WarmupIters
	if span <= 0 {
		return s.MinLR
	}
	ratio := float64(it-s.WarmupIters) / float64(span)
	coeff := 0.5 * (1 + math.Cos(math.Pi*ratio))
	return s.MinLR + coeff*(s.LR-s.MinLR)
}

// ClipCoef is ClipGradNorm without reading anything back, for parameters
// on one device: the sum of the gradients' squares goes into acc, and
// tensor.ClipCoef turns it into the norm (kept in stats) and the clip
// coefficient, written into coef, which StepScaled applies. acc, coef and
// stats live on the parameters' device; step is recorded in stats if the
// norm is not finite. With the coefficient applied, the update is
// bitwise the one ClipGradNorm and Step make.
func ClipCoef(params []*nn.Parameter, maxNorm float64, acc, coef, stats *tensor.Tensor, step int) {
	tensor.Fill(acc, 0)
	for _, p := range params {
		if g := p.T.Grad; g != nil {
			tensor.AddSumSquares(acc, g)
		}
	}
	tensor.ClipCoef(coef, stats, acc, maxNorm, step)
}

// ClipGradNorm scales all gradients so their global L2 norm is at most
// maxNorm (if maxNorm > 0), and returns the norm before clipping. The
// parameters may live on several devices (pipeline stages): each device
// sums its gradients' squares, in the order the parameters first appear,
// and the per-device sums are added on the host. The sums are the values
// that cross to the host, one per device.
func ClipGradNorm(params []*nn.Parameter, maxNorm float64) float64 {
	var buf [4]tensor.Device
	devs := buf[:0]
	for _, p := range params {
		if g := p.T.Grad; g != nil && !slices.Contains(devs, g.Device()) {
			devs = append(devs, g.Device())
		}
	}
	var sq float64
	for _, d := range devs {
		tensor.ProgramOf(d).Step(func() {
			acc := tensor.Zeros(d)
			for _, p := range params {
				if g := p.T.Grad; g != nil && g.Device() == d {
					tensor.AddSumSquares(acc, g)
				}
			}
			sq += float64(acc.Item())
		})
	}
	norm := math.Sqrt(sq)
	found := len(devs) > 0
	if found && maxNorm > 0 && norm > maxNorm {
		scale := float32(maxNorm / (norm + 1e-6))
		for _, p := range params {
			if g := p.T.Grad; g != nil {
				tensor.ScaleInPlace(g, scale)
			}
		}
	}
	return norm
}

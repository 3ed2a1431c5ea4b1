// Package optim holds fleet's optimizers and what drives them: the
// Optimizer interface a trainer drives; AdamW with decoupled weight
// decay; Muon (momentum orthogonalised by Newton–Schulz) for the blocks'
// weight matrices with AdamW for the rest; the learning-rate schedule
// (linear warmup, then cosine decay to a floor); and global
// gradient-norm clipping.
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
	// packed holds the flat buffers of a packed optimizer (Pack); nil
	// where each parameter is updated on its own.
	packed *packing
	// halves: an unpacked optimizer's parameters have bf16 copies of
	// their own (KeepHalf).
	halves bool
	// others marks the parameters another rule updates (Muon's
	// matrices): AdamW's step leaves them alone, Pack puts them last,
	// after AdamW's stretch, and their M holds that rule's state.
	others []bool
}

// other reports whether parameter i is another rule's (see others).
func (o *AdamW) other(i int) bool { return o.others != nil && o.others[i] }

// packing is a packed optimizer's flat buffers: parameters, gradients and
// moments, the parameters with weight decay first, and the two stretches
// (decayed, not) that one AdamW launch each updates.
type packing struct {
	params, grads, m, v *tensor.Tensor
	all                 packedSeg
	done                bool // every buffer packed (a failed Pack leaves some nil)
	// order lists the parameters (indices into Params) as packed; half
	// is the flat bf16 copy of params (KeepHalf), nil without one.
	order []int
	half  *tensor.Tensor
	// sharded: the moments m and v hold only flat elements [lo, hi)
	// (Shard), and the update touches only those.
	sharded bool
	lo, hi  int
	decayed int // flat elements with weight decay (they come first)
	// adam is the flat elements AdamW updates (they come first; the
	// parameters another rule updates follow), and sumGrads the view of
	// the gradients whose squares GradSumSquares adds: every parameter's,
	// or a sharded optimizer's shard.
	adam     int
	sumGrads *tensor.Tensor
}

// others is the stretch of the flat buffers that another rule updates
// (Muon's matrices), [lo, hi): all of it after AdamW's, or a sharded
// optimizer's part of it. The moments' elements of flat element x are at
// x - mOff.
func (k *packing) others() (lo, hi, mOff int) {
	if !k.sharded {
		return k.adam, k.params.Numel(), 0
	}
	return max(k.lo, k.adam), max(k.hi, k.adam), k.lo
}

// packedSeg is the flat buffers as the update sees them: a view of the
// parameters whose Grad is the view of their gradients, the moments'
// views, whether any parameter takes weight decay and, where not all of
// them do, where those that do end (decayEnd; they come first).
type packedSeg struct {
	p, m, v  *tensor.Tensor
	decay    bool
	decayEnd int
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

// Pack moves the parameters, their gradients and the moments into flat
// buffers, the parameters with weight decay first (each parameter, its
// gradient and its moments become views: see tensor.Pack), so that a step
// updates them with one AdamW launch (backend.AdamW.DecayEnd), ZeroGrad
// is one fill, and ClipCoef one reduction. It needs every parameter on one
// device, in F32; it reports false, having changed nothing, where they are
// not. Gradients held before are dropped. The update is elementwise, so
// packing does not change it; the gradient norm is summed over the flat
// buffer at once rather than a parameter at a time, which changes its last
// bits.
func (o *AdamW) Pack() bool {
	if o.packed != nil || len(o.Params) == 0 {
		return o.packed != nil && o.packed.done
	}
	dev := o.Params[0].T.Device()
	var order []int
	for pass := range 3 { // AdamW's decayed, AdamW's others, another rule's
		for i, p := range o.Params {
			if p.T.Device() != dev || p.T.DType() != tensor.F32 {
				return false
			}
			switch {
			case o.other(i):
				if pass == 2 {
					order = append(order, i)
				}
			case p.Decay == (pass == 0) && pass < 2:
				order = append(order, i)
			}
		}
	}
	pick := func(ts []*tensor.Tensor) []*tensor.Tensor {
		out := make([]*tensor.Tensor, len(order))
		for k, i := range order {
			out[k] = ts[i]
		}
		return out
	}
	ps := make([]*tensor.Tensor, len(o.Params))
	for i, p := range o.Params {
		ps[i] = p.T
	}
	if o.halves { // the flat copy replaces the parameters' own
		for _, p := range o.Params {
			p.T.Half().Free()
			p.T.SetHalf(nil)
		}
		o.halves = false
		defer o.KeepHalf()
	}
	k := &packing{order: order}
	o.packed = k // so that Free finds what a failure partway leaves
	k.params, k.grads = tensor.Pack(pick(ps), true)
	k.m, _ = tensor.Pack(pick(o.M), false)
	k.v, _ = tensor.Pack(pick(o.V), false)
	decayed, adam, total := 0, 0, k.params.Numel()
	for i, p := range o.Params {
		if o.other(i) {
			continue
		}
		adam += p.T.Numel()
		if p.Decay {
			decayed += p.T.Numel()
		}
	}
	k.decayed, k.adam = decayed, adam
	seg := &k.all
	seg.decay = decayed > 0
	if decayed < adam {
		seg.decayEnd = decayed
	}
	tensor.ProgramOf(dev).Persist(func() {
		seg.p, seg.m, seg.v = k.params.Rows(0, adam), k.m.Rows(0, adam), k.v.Rows(0, adam)
		seg.p.Grad = k.grads.Rows(0, adam)
		k.sumGrads = k.grads.Rows(0, total)
	})
	k.done = true
	return true
}

// Free releases the optimizer's moments (and, packed, the flat buffers,
// the parameters' storage with them).
func (o *AdamW) Free() {
	k := o.packed
	if k == nil {
		k = &packing{}
	}
	if o.halves {
		for _, p := range o.Params {
			p.T.Half().Free()
			p.T.SetHalf(nil)
		}
		o.halves = false
	}
	if k.half != nil {
		for _, p := range o.Params {
			p.T.SetHalf(nil)
		}
		k.all.p.SetHalf(nil)
		k.params.SetHalf(nil)
	}
	for _, t := range []*tensor.Tensor{k.params, k.grads, k.m, k.v, k.half} {
		if t != nil {
			t.Free()
		}
	}
	for i := range o.M { // moments not packed (Free of a view does nothing)
		if k.m == nil {
			o.M[i].Free()
		}
		if k.v == nil {
			o.V[i].Free()
		}
	}
	o.packed = nil
}

// KeepHalf gives every parameter a bf16 copy (tensor.Tensor.SetHalf) and
// writes it: the weights bf16 activations' products read, so that no
// forward pass casts a weight. Each Step then rewrites it in the update's
// own pass (backend.AdamW.Half). On a packed optimizer the copies are
// views of one flat BF16 buffer (one update, one refresh); otherwise each
// parameter's is its own tensor on its device (a pipeline's stages).
// Whoever writes the parameters otherwise (loading weights, a broadcast)
// must call RefreshHalf after. Calling it again only refreshes the copies.
func (o *AdamW) KeepHalf() {
	k := o.packed
	if k == nil || !k.done {
		if !o.halves {
			for _, p := range o.Params {
				tensor.ProgramOf(p.T.Device()).Persist(func() { p.T.SetHalf(tensor.Empty(p.T.Device(), tensor.BF16, p.T.Shape()...)) })
			}
			o.halves = true
		}
		o.RefreshHalf()
		return
	}
	if k.half == nil {
		dev := k.params.Device()
		total := k.params.Numel()
		tensor.ProgramOf(dev).Persist(func() {
			k.half = tensor.Empty(dev, tensor.BF16, total)
			off := 0
			for _, i := range k.order {
				p := o.Params[i].T
				n := p.Numel()
				p.SetHalf(k.half.Rows(off, off+n).Reshape(p.Shape()...))
				off += n
			}
			k.params.SetHalf(k.half)
			lo, hi := 0, k.adam // AdamW's stretch
			if k.sharded {
				lo, hi = k.lo, k.hi
			}
			k.all.p.SetHalf(k.half.Rows(lo, hi))
		})
	}
	o.RefreshHalf()
}

// RefreshHalf rewrites the parameters' bf16 copies (KeepHalf) from the
// parameters (in one pass where packed); it does nothing without them.
func (o *AdamW) RefreshHalf() {
	if k := o.packed; k != nil && k.half != nil {
		k.params.RefreshHalf()
		return
	}
	if o.halves {
		for _, p := range o.Params {
			p.T.RefreshHalf()
		}
	}
}

// Half is the flat bf16 copy of the packed parameters (KeepHalf), or nil.
func (o *AdamW) Half() *tensor.Tensor {
	if o.packed == nil {
		return nil
	}
	return o.packed.half
}

// Shard makes a packed optimizer ZeRO-1's shard of a data-parallel
// group: it keeps the state (AdamW's moments; another rule's, in the
// first) of flat elements [lo, hi) only (the rest of the state it held is
// dropped, so a resumed run's loaded state carries over) and each Step
// updates only those parameters, from their gradients (a
// reduce-scatter's shard); the caller gathers the updated parameters from
// the other shards. GradSumSquares and ClipCoef then cover the shard
// alone: the group's norm is the sum over shards. M and V no longer hold
// per-parameter views (nil). It reports false, doing nothing, where the
// optimizer is not packed or [lo, hi) is not within the flat buffer.
// The shard's part of AdamW's stretch is AdamW's to update; the rest, the
// parameters another rule updates (Muon's matrices, which that rule's
// Shard keeps whole), is that rule's.
func (o *AdamW) Shard(lo, hi int) bool {
	k := o.packed
	if k == nil || !k.done || k.sharded || lo < 0 || hi < lo || hi > k.params.Numel() {
		return false
	}
	dev := k.params.Device()
	var m, v *tensor.Tensor
	tensor.ProgramOf(dev).Persist(func() {
		m, v = tensor.Empty(dev, tensor.F32, max(hi-lo, 1)), tensor.Empty(dev, tensor.F32, max(hi-lo, 1))
		if hi > lo {
			m.Rows(0, hi-lo).CopyFrom(k.m.Rows(lo, hi))
			v.Rows(0, hi-lo).CopyFrom(k.v.Rows(lo, hi))
		}
	})
	k.m.Free()
	k.v.Free()
	k.m, k.v = m, v
	for i := range o.M {
		o.M[i], o.V[i] = nil, nil
	}
	k.sharded, k.lo, k.hi = true, lo, hi
	seg := &k.all
	aend := max(lo, min(hi, k.adam))          // the shard's part of AdamW's stretch ends there
	end := min(max(k.decayed-lo, 0), aend-lo) // the shard's decayed elements come first too
	seg.decay, seg.decayEnd = end > 0, 0
	if end < aend-lo {
		seg.decayEnd = end
	}
	tensor.ProgramOf(dev).Persist(func() {
		seg.p, seg.m, seg.v = k.params.Rows(lo, aend), m.Rows(0, aend-lo), v.Rows(0, aend-lo)
		seg.p.Grad = k.grads.Rows(lo, aend)
		k.sumGrads = k.grads.Rows(lo, hi)
		if k.half != nil {
			seg.p.SetHalf(k.half.Rows(lo, aend))
		}
	})
	return true
}

// ShardBounds cuts the packed flat buffer among world ranks for Shard:
// evenly, since AdamW's update costs the same for every element.
func (o *AdamW) ShardBounds(world int) []int {
	n := 0
	if k := o.packed; k != nil && k.done {
		n = k.params.Numel()
	}
	b := make([]int, world+1)
	for r := range b {
		b[r] = r * n / world
	}
	return b
}

// ShardRange is the flat elements a sharded optimizer updates (Shard),
// and whether it is sharded.
func (o *AdamW) ShardRange() (lo, hi int, ok bool) {
	if k := o.packed; k != nil && k.sharded {
		return k.lo, k.hi, true
	}
	return 0, 0, false
}

// PackedParams is the flat buffer every parameter is a view of, on a
// packed optimizer (Pack); nil otherwise. A sharded group all-gathers its
// shards into it after each step.
func (o *AdamW) PackedParams() *tensor.Tensor {
	if o.packed == nil || !o.packed.done {
		return nil
	}
	return o.packed.params
}

// Moments are a packed optimizer's flat moment buffers: the whole flat
// buffer's, or a sharded one's shard (ShardRange).
func (o *AdamW) Moments() (m, v *tensor.Tensor) {
	if o.packed == nil || !o.packed.done {
		return nil, nil
	}
	return o.packed.m, o.packed.v
}

// FlatOffsets gives, for each parameter (in Params' order), where it
// starts in a packed optimizer's flat buffers; nil where not packed.
func (o *AdamW) FlatOffsets() []int {
	k := o.packed
	if k == nil || !k.done {
		return nil
	}
	offs := make([]int, len(o.Params))
	off := 0
	for _, i := range k.order {
		offs[i] = off
		off += o.Params[i].T.Numel()
	}
	return offs
}

// StateBytes is the memory AdamW's moments take: both of them, the
// whole model's, or a shard's.
func (o *AdamW) StateBytes() int64 {
	if k := o.packed; k != nil && k.done {
		return 8 * int64(k.m.Numel())
	}
	var n int64
	for i := range o.M {
		if o.M[i] != nil {
			n += 8 * int64(o.M[i].Numel())
		}
	}
	return n
}

// SetLR changes the learning rate for the next steps.
func (o *AdamW) SetLR(lr float32) { o.Config.LR = lr }

// Step updates every parameter that has a gradient.
func (o *AdamW) Step() { o.StepScaled(nil) }

// StepScaled is Step with every gradient multiplied by gradScale first, a
// one-element F32 tensor on the parameters' device (ClipCoef's
// coefficient), read there: where it is not finite, the weights and
// moments stay as they are (the step count still advances).
func (o *AdamW) StepScaled(gradScale *tensor.Tensor) { o.StepSched(gradScale, nil) }

// StepSched is StepScaled with the learning rate and the step's
// constants read on the device from sched (see tensor.AdamWStepSched):
// fp16's loss scaler decides there which steps count. Steps counts the
// calls; the scaler's state has the updates taken.
func (o *AdamW) StepSched(gradScale, sched *tensor.Tensor) {
	o.Steps++
	if k := o.packed; k != nil && k.done {
		seg := &k.all
		if seg.p.Numel() == 0 { // a shard of another rule's parameters only
			return
		}
		hp := backend.AdamW{LR: o.Config.LR, Beta1: o.Config.Beta1, Beta2: o.Config.Beta2, Eps: o.Config.Eps, Step: o.Steps, DecayEnd: seg.decayEnd}
		if seg.decay {
			hp.WeightDecay = o.Config.WeightDecay
		}
		tensor.AdamWStepSched(seg.p, seg.m, seg.v, hp, gradScale, sched)
		return
	}
	for i, p := range o.Params {
		if p.T.Grad == nil || o.other(i) {
			continue
		}
		hp := backend.AdamW{LR: o.Config.LR, Beta1: o.Config.Beta1, Beta2: o.Config.Beta2, Eps: o.Config.Eps, Step: o.Steps}
		if p.Decay {
			hp.WeightDecay = o.Config.WeightDecay
		}
		tensor.AdamWStepSched(p.T, o.M[i], o.V[i], hp, gradScale, sched)
	}
}

// PackedGrads is the flat buffer every parameter's Grad is a view of, on
// a packed optimizer (Pack); nil otherwise. Data parallelism all-reduces
// it in place.
func (o *AdamW) PackedGrads() *tensor.Tensor {
	if o.packed == nil || !o.packed.done {
		return nil
	}
	return o.packed.grads
}

// ZeroGrad sets every gradient to zero, keeping its storage for the next
// step.
func (o *AdamW) ZeroGrad() {
	if o.packed != nil && o.packed.done {
		tensor.Fill(o.packed.grads, 0)
		return
	}
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

// ClipCoef is the package's ClipCoef over the optimizer's parameters: on
// a packed optimizer, one reduction over the flat gradients.
func (o *AdamW) ClipCoef(maxNorm float64, acc, coef, stats *tensor.Tensor, step int) {
	o.GradSumSquares(acc)
	tensor.ClipCoef(coef, stats, acc, maxNorm, step)
}

// GradSumSquares writes the sum of the squares of every gradient into
// acc, on the device: on a packed optimizer, one reduction over the flat
// gradients.
func (o *AdamW) GradSumSquares(acc *tensor.Tensor) {
	if o.packed != nil && o.packed.done {
		tensor.SetSumSquares(acc, o.packed.sumGrads) // the whole flat buffer, or a shard
		return
	}
	tensor.Fill(acc, 0)
	for _, p := range o.Params {
		if g := p.T.Grad; g != nil {
			tensor.AddSumSquares(acc, g)
		}
	}
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

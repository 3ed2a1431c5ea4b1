package optim

import (
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// Optimizer is what a trainer drives. AdamW is one, and holds, for every
// optimizer, the parameters' buffers: the flat buffers a packed optimizer
// keeps (Pack), the bf16 copies (KeepHalf), the two state tensors of
// each parameter (State, which checkpoints save) and the step count.
// Muon is another: AdamW for some parameters, its own rule for the
// blocks' matrices, whose state is their first state tensor.
type Optimizer interface {
	// Parameters are the parameters updated, in the optimizer's order;
	// State is parameter i's two state tensors (AdamW's moments; for a
	// Muon matrix, its momentum and a second that stays zero), nil on a
	// sharded optimizer (Shard).
	Parameters() []*nn.Parameter
	State(i int) (m, v *tensor.Tensor)
	// StepCount is the updates taken (AdamW's bias correction counts
	// them); a resumed run sets it.
	StepCount() int
	SetStepCount(n int)
	// Betas are AdamW's, which the device-side schedules (StepClock,
	// ScalerCoef) need for its bias corrections.
	Betas() (beta1, beta2 float32)

	// SetLR sets the next steps' learning rate: AdamW's; other rules
	// scale theirs with it (the schedule's factor).
	SetLR(lr float32)
	// StepSched updates every parameter that has a gradient, the
	// gradients multiplied by gradScale first where it is not nil (a
	// device scalar: the clip coefficient), with the learning rate read
	// on the device from sched where it is not nil (see AdamW.StepSched).
	StepSched(gradScale, sched *tensor.Tensor)
	ZeroGrad()
	// GradSumSquares writes the sum of the squares of every gradient
	// (a shard's, sharded) into acc, on the device.
	GradSumSquares(acc *tensor.Tensor)

	// Pack, KeepHalf, RefreshHalf, PackedParams, PackedGrads, Moments
	// and FlatOffsets are AdamW's (see there).
	Pack() bool
	KeepHalf()
	RefreshHalf()
	// ShardBounds cuts the packed flat buffer among world ranks for
	// ZeRO-1 (world+1 bounds, as dist.Bounds), where each rank's update
	// costs about the same; Shard keeps rank's shard [lo, hi) of them
	// (see AdamW.Shard, Muon.Shard).
	ShardBounds(world int) []int
	Shard(lo, hi int) bool
	PackedParams() *tensor.Tensor
	PackedGrads() *tensor.Tensor
	Moments() (m, v *tensor.Tensor)
	FlatOffsets() []int

	// StateBytes is the memory the optimizer's state takes; Free
	// releases it.
	StateBytes() int64
	Free()
}

var (
	_ Optimizer = (*AdamW)(nil)
	_ Optimizer = (*Muon)(nil)
)

// Parameters implements Optimizer.
func (o *AdamW) Parameters() []*nn.Parameter { return o.Params }

// State implements Optimizer.
func (o *AdamW) State(i int) (m, v *tensor.Tensor) { return o.M[i], o.V[i] }

// StepCount implements Optimizer.
func (o *AdamW) StepCount() int { return o.Steps }

// SetStepCount implements Optimizer.
func (o *AdamW) SetStepCount(n int) { o.Steps = n }

// Betas implements Optimizer.
func (o *AdamW) Betas() (beta1, beta2 float32) { return o.Config.Beta1, o.Config.Beta2 }

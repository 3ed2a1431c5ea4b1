package train

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// updater finishes an optimizer step once its gradients are complete:
// fp16's unscaling and skip decision, clipping, and the optimizer step.
// Where that runs is the whole difference between its implementations,
// and the run picks one when its first step opens (newUpdater):
//
//   - deviceUpdate: one device computes the loss; the gradient norm, the
//     clip coefficient and AdamW all run there and nothing is read back,
//     so the step can also be captured in a graph (--cuda-graphs);
//   - scaledUpdate: the same with fp16's loss scaler on the device too
//     (its scale, its decision to skip a step, and the learning-rate
//     schedule that skipped steps hold back);
//   - hostUpdate: the norm is read on the host each step and clipped there
//     (a pipeline, whose stages' gradients lie on several devices), with
//     fp16's scaler on the host beside it.
//
// The host's record of the scaler (run.scaler, for the log and the
// checkpoints) is the updater's copy as of the last read point.
type updater interface {
	// lossScale is the factor, besides accumulation's 1/GradAccum, that a
	// micro-step's loss is multiplied by before its backward pass: fp16's
	// loss scale, or 1. seed, where not nil, is a device scalar holding
	// both, which the backward pass starts from instead.
	lossScale() float32
	seed() *tensor.Tensor
	// apply updates the weights after step (from 0; negative in a captured
	// step, which takes its number and rate from the step clock) at rate
	// lr. Where reduce is given (ZeRO-1), it first makes the clip's sum of
	// squares (clipAcc) the group's; its error is returned, having stepped
	// nothing.
	apply(step int, lr float64, reduce func() error) error
	clipAcc() *tensor.Tensor
	// clock is what a captured step's StepClock writes the step's rate and
	// AdamW constants into (sched) from the schedule (lrs); both nil where
	// the updater schedules the step itself. setRate sets the one rate of
	// a run without a schedule (a Stepper), outside the graph.
	clock() (sched, lrs *tensor.Tensor)
	setRate(lr float64)
	// read takes the update's state at a read point, after done steps,
	// from the step statistics v (read from the device just now), which
	// it may amend with what it keeps on the host.
	read(done int, v []float32)
	// gradNorm is the last gradient norm read, before clipping.
	gradNorm() float64
	// rate is the learning rate step took, as the log reports it, where
	// the host scheduled lr.
	rate(step int, lr float64) float64
	free()
}

// newUpdater picks the run's updater: on the host where the loss is
// computed on several devices (a pipeline), else on the device.
func (r *run) newUpdater() updater {
	if r.micros().pipelined() {
		return &hostUpdate{r: r}
	}
	d := deviceUpdate{r: r, acc: tensor.Zeros(r.dev), coef: tensor.Zeros(r.dev)}
	if r.scaler != nil {
		return newScaledUpdate(d)
	}
	return &d
}

// deviceUpdate clips on the device: the gradients' sum of squares, the
// coefficient that clips their norm (kept in the step statistics with
// the first step whose gradients were not finite), and AdamW scaled by
// it, all launched, nothing read.
type deviceUpdate struct {
	r         *run
	acc, coef *tensor.Tensor
	// sched (a captured step's rate and AdamW constants) and lrs (the
	// schedule, a rate per step) are made for a graph (clock); lrFill:
	// lrs is one rate, set each step, where there is no schedule.
	sched, lrs *tensor.Tensor
	lrFill     bool
	norm       float64
}

func (u *deviceUpdate) lossScale() float32      { return 1 }
func (u *deviceUpdate) seed() *tensor.Tensor    { return nil }
func (u *deviceUpdate) clipAcc() *tensor.Tensor { return u.acc }
func (u *deviceUpdate) gradNorm() float64       { return u.norm }
func (u *deviceUpdate) rate(_ int, lr float64) float64 {
	return lr
}

func (u *deviceUpdate) apply(step int, lr float64, reduce func() error) error {
	r := u.r
	r.opt.GradSumSquares(u.acc)
	if reduce != nil {
		if err := reduce(); err != nil {
			return err
		}
	}
	if step < 0 {
		tensor.ClipCoef(u.coef, r.stats.buf, u.acc, r.cfg.GradClip, -1)
		r.opt.StepSched(u.coef, u.sched)
	} else {
		tensor.ClipCoef(u.coef, r.stats.buf, u.acc, r.cfg.GradClip, step+1)
		r.opt.SetLR(float32(lr))
		r.opt.StepSched(u.coef, nil)
	}
	r.opt.ZeroGrad()
	return nil
}

func (u *deviceUpdate) clock() (sched, lrs *tensor.Tensor) {
	if u.sched == nil {
		u.sched = tensor.Zeros(u.r.dev, 3)
	}
	u.openLRs()
	return u.sched, u.lrs
}

// openLRs puts the learning-rate schedule on the device, a rate per step
// of the run (lrFill: one, set each step, where there is no schedule).
func (u *deviceUpdate) openLRs() {
	r := u.r
	if u.lrs != nil {
		return
	}
	if r.sched == (optim.Schedule{}) {
		u.lrs, u.lrFill = tensor.Zeros(r.dev, 1), true
		return
	}
	lrs := make([]float32, max(r.cfg.MaxIters, 1))
	for i := range lrs {
		lrs[i] = float32(r.sched.At(i))
	}
	u.lrs = tensor.FromFloat32s(r.dev, lrs, len(lrs))
}

func (u *deviceUpdate) setRate(lr float64) {
	if u.lrFill {
		tensor.Fill(u.lrs, float32(lr))
	}
}

// read takes the norm ClipCoef kept, and AdamW's step count: every step
// calls AdamW (a step whose gradients were not finite moves nothing, and
// the run stops at this read point), replays of a captured step too,
// which the host does not count.
func (u *deviceUpdate) read(done int, v []float32) {
	u.norm = float64(v[2])
	u.r.opt.SetStepCount(done)
}

func (u *deviceUpdate) free() { freeAll(u.acc, u.coef, u.sched, u.lrs) }

// scaledUpdate is deviceUpdate with fp16's loss scaler on the device:
// state (backend.ScalerStateLen elements) holds the scale, its tracker and
// the skipped steps, the backward pass's seed (the scale over
// GradAccum), and the step's rate and AdamW constants (sched16), which
// ScalerCoef takes from the schedule at the position skipped steps hold
// back. Whether a step moved the weights is known on the device only.
type scaledUpdate struct {
	deviceUpdate
	state, seedT, sched16 *tensor.Tensor
}

// newScaledUpdate puts the host's scaler (a resumed one's) on the device.
func newScaledUpdate(d deviceUpdate) *scaledUpdate {
	r := d.r
	s := r.scaler
	st := make([]float32, backend.ScalerStateLen)
	st[backend.ScalerScale], st[backend.ScalerTracker], st[backend.ScalerSkipped] = s.Scale, float32(s.Tracker), float32(s.Skipped)
	st[backend.ScalerSeed] = s.Scale / float32(r.cfg.GradAccum)
	u := &scaledUpdate{deviceUpdate: d, state: tensor.FromFloat32s(r.dev, st, len(st))}
	u.seedT = u.state.Rows(backend.ScalerSeed, backend.ScalerSeed+1).Reshape()
	u.sched16 = u.state.Rows(backend.ScalerLR, backend.ScalerLR+3)
	u.openLRs()
	return u
}

func (u *scaledUpdate) lossScale() float32 { return u.r.scaler.Scale }
func (u *scaledUpdate) seed() *tensor.Tensor {
	return u.seedT
}

// clock is nil: ScalerCoef writes the step's constants itself.
func (u *scaledUpdate) clock() (sched, lrs *tensor.Tensor) { return nil, nil }

func (u *scaledUpdate) apply(step int, lr float64, reduce func() error) error {
	r := u.r
	r.opt.GradSumSquares(u.acc)
	if reduce != nil {
		if err := reduce(); err != nil {
			return err
		}
	}
	if step >= 0 { // (a captured step's rate is set outside its graph)
		u.setRate(lr)
	}
	b1, b2 := r.opt.Betas()
	tensor.ScalerCoef(u.coef, r.stats.buf, u.acc, u.state, u.lrs, r.cfg.GradClip, step,
		r.scaler.GrowthInterval, 1/float32(r.cfg.GradAccum), b1, b2)
	r.opt.StepSched(u.coef, u.sched16)
	r.opt.ZeroGrad()
	return nil
}

// read copies the device's scaler into the host's, and AdamW's updates
// taken (the steps not skipped) into the optimizer.
func (u *scaledUpdate) read(done int, v []float32) {
	u.norm = float64(v[2])
	var st [backend.ScalerStateLen]float32
	u.state.ReadFloat32s(st[:])
	s := u.r.scaler
	s.Scale, s.Tracker, s.Skipped = st[backend.ScalerScale], int(st[backend.ScalerTracker]), int(st[backend.ScalerSkipped])
	u.r.opt.SetStepCount(done - s.Skipped)
}

// rate is the rate the device took: the schedule's position counts the
// skipped steps read at the last read point.
func (u *scaledUpdate) rate(step int, _ float64) float64 {
	return u.r.sched.At(u.r.scheduleStep(step))
}

func (u *scaledUpdate) free() {
	u.deviceUpdate.free()
	freeAll(u.state)
}

// hostUpdate clips on the host: it reads the gradient norm every step
// (over every device the parameters are on), unscales fp16's gradients
// and lets the host's scaler decide, skipping a step whose gradients are
// not finite. Without a scaler such a step is not applied either, and
// the run stops at its next read point (see diverged).
type hostUpdate struct {
	r    *run
	norm float64
	// badGrads is the first step whose gradients were not finite; 0: none.
	badGrads int
}

func (u *hostUpdate) lossScale() float32 {
	if u.r.scaler == nil {
		return 1
	}
	return u.r.scaler.Scale
}

func (u *hostUpdate) seed() *tensor.Tensor               { return nil }
func (u *hostUpdate) clipAcc() *tensor.Tensor            { return nil }
func (u *hostUpdate) gradNorm() float64                  { return u.norm }
func (u *hostUpdate) rate(_ int, lr float64) float64     { return lr }
func (u *hostUpdate) setRate(float64)                    {}
func (u *hostUpdate) free()                              {}
func (u *hostUpdate) clock() (sched, lrs *tensor.Tensor) { panic(errHostCapture) }

var errHostCapture = &tensor.Error{Op: "cuda_graphs", Msg: "a step whose gradient norm is read on the host cannot be captured"}

func (u *hostUpdate) apply(step int, lr float64, reduce func() error) error {
	r := u.r
	if reduce != nil {
		return fmt.Errorf("ZeRO-1 needs the gradient norm on the device, and this run reads it on the host")
	}
	s := r.scaler
	if s != nil {
		inv := 1 / s.Scale
		for _, p := range r.opt.Parameters() {
			if g := p.T.Grad; g != nil {
				tensor.ScaleInPlace(g, inv)
			}
		}
	}
	norm := optim.ClipGradNorm(r.opt.Parameters(), r.cfg.GradClip)
	u.norm = norm
	ok := finite(norm)
	if s == nil && !ok && u.badGrads == 0 {
		u.badGrads = step + 1
	}
	if (s == nil && !ok) || (s != nil && !s.Update(ok)) {
		r.opt.ZeroGrad()
		return nil
	}
	r.opt.SetLR(float32(lr))
	r.opt.StepSched(nil, nil)
	r.opt.ZeroGrad()
	return nil
}

// read puts the first step whose gradients were not finite into the
// statistics' slot for it, where it came before the device's.
func (u *hostUpdate) read(_ int, v []float32) {
	if b := float32(u.badGrads); u.badGrads > 0 && (v[3] <= 0 || b < v[3]) {
		v[3] = b
	}
}

// freeAll frees the tensors that are not nil.
func freeAll(ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.Free()
		}
	}
}

package train

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// step runs one optimizer step: GradAccum micro-steps of forward and
// backward, each loss scaled by 1/GradAccum so the gradients add up to
// those of the whole batch, then (data parallelism) the gradients'
// all-reduce, clipping and AdamW. With a loss scaler, the losses are also
// multiplied by its scale and the gradients divided by it before clipping;
// a step with inf or NaN gradients is skipped. It returns the mean
// micro-batch loss. One device, a data-parallel group and a pipeline all
// take this step; only a micro-step's forward and backward differ (the
// model's, or the pipeline schedule's over its stages).
func (r *run) step(step int, lr float64) error { return r.stepWithHook(step, lr, nil) }

// stepWithHook is step with a hook run after the gradients are complete
// and before clipping (tests inspect them there).
func (r *run) stepWithHook(step int, lr float64, hook func()) error {
	if !r.feed.opened {
		// The batch plan, resolved (Run has done it; a Stepper or a test
		// may not have).
		plan, err := r.cfg.PlanBatch()
		if err != nil {
			return err
		}
		r.cfg.GradAccum = plan.Accum
		if err := r.feed.staged.open(r.dev, r.cfg.BatchSize, r.cfg.BlockSize); err != nil {
			return fmt.Errorf("staging batches: %w", err)
		}
		r.feed.opened = true
		if err := r.openFill(step); err != nil {
			return err
		}
		r.openStepState(step)
		if err := r.group().Start(); err != nil {
			return err
		}
	}
	cfg := r.cfg
	ms := r.micros()
	grp := r.group()
	if cfg.CUDAGraphs && !ms.pipelined() && grp.Hook() == nil && hook == nil {
		if r.g.warm >= graphWarmSteps {
			return r.stepGraph(step, lr)
		}
		r.g.warm++
	}
	ms.begin()
	tel := r.tel
	for micro := 0; micro < cfg.GradAccum; micro++ {
		tel.to(phH2D)
		w0 := r.feed.wait
		x, y, err := r.feed.staged.get(step, micro, nextMicro(step, micro, cfg.GradAccum), r.feed.fill)
		if err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		tel.move(phH2D, phData, r.feed.wait-w0)
		ms.forwardBackward(step, micro, x, y)
	}
	tel.to(phOptimizer)
	ms.end()
	if err := grp.Sync(ms.pipelined(), tel); err != nil {
		return fmt.Errorf("step %d: %w", step+1, err)
	}
	tel.to(phOptimizer)
	r.upd.step, r.upd.lr, r.upd.hook = step, lr, hook
	if err := grp.Finish(stepUpdate{r}); err != nil {
		return fmt.Errorf("step %d: %w", step+1, err)
	}
	return nil
}

// openStepState readies what a step keeps on the device: the step
// statistics on the device that computes the loss (the last stage of a
// pipeline), and, where the gradients are clipped on the device, its
// buffers. On one device it packs the
// optimizer (optim.AdamW.Pack): AdamW, zeroing and the gradient norm then
// take a launch or two each, not one per parameter; in bf16 it gives the
// weights their bf16 copies (optim.AdamW.KeepHalf).
func (r *run) openStepState(step int) {
	ms := r.micros()
	if !ms.pipelined() {
		r.opt.Pack()
	}
	if r.cfg.ProductDType() == tensor.BF16 {
		// bf16 activations' products read the weights' bf16 copies,
		// which AdamW rewrites in its own pass: written here once, after
		// anything that set the weights (a resume, the broadcast).
		r.opt.KeepHalf()
	}
	r.stats.buf = tensor.NewStats(ms.lossDevice())
	r.stats.lossSum = r.stats.buf.Rows(0, 1)
	r.stats.at = step
	if !ms.pipelined() && !(r.scaler != nil && r.upd.hostScaler) {
		r.upd.clipAcc, r.upd.clipCoef = tensor.Zeros(r.dev), tensor.Zeros(r.dev)
		if r.scaler != nil {
			r.openScaler()
		}
	}
}

// openScaler puts fp16's loss scaler on the device: its state from the
// host's scaler (a resumed one's), and the learning-rate schedule as a
// table of the run's steps, so that a skipped step, decided there, holds
// the schedule back there.
func (r *run) openScaler() {
	s := r.scaler
	st := make([]float32, backend.ScalerStateLen)
	st[backend.ScalerScale], st[backend.ScalerTracker], st[backend.ScalerSkipped] = s.Scale, float32(s.Tracker), float32(s.Skipped)
	st[backend.ScalerSeed] = s.Scale / float32(r.cfg.GradAccum)
	r.upd.scalerState = tensor.FromFloat32s(r.dev, st, len(st))
	r.upd.seed = r.upd.scalerState.Rows(backend.ScalerSeed, backend.ScalerSeed+1).Reshape()
	r.upd.sched16 = r.upd.scalerState.Rows(backend.ScalerLR, backend.ScalerLR+3)
	r.openLRs()
}

// openLRs puts the learning-rate schedule on the device, a rate per step
// of the run (lrFill: one, set each step, where there is no schedule).
func (r *run) openLRs() {
	if r.upd.lrs != nil {
		return
	}
	if r.sched == (optim.Schedule{}) {
		r.upd.lrs, r.upd.lrFill = tensor.Zeros(r.dev, 1), true
		return
	}
	lrs := make([]float32, max(r.cfg.MaxIters, 1))
	for i := range lrs {
		lrs[i] = float32(r.sched.At(i))
	}
	r.upd.lrs = tensor.FromFloat32s(r.dev, lrs, len(lrs))
}

// readScaler copies the device's scaler state into the host's scaler, and
// AdamW's step count (the updates taken) into the optimizer, after done
// steps: at read points, for the log, telemetry and checkpoints.
func (r *run) readScaler(done int) {
	var st [backend.ScalerStateLen]float32
	r.upd.scalerState.ReadFloat32s(st[:])
	s := r.scaler
	s.Scale, s.Tracker, s.Skipped = st[backend.ScalerScale], int(st[backend.ScalerTracker]), int(st[backend.ScalerSkipped])
	r.opt.Steps = done - s.Skipped
}

// readStats reads the step statistics (a host wait, at read points
// only) and restarts the loss sum: the mean loss of the steps since the
// last read, and the first steps whose loss and whose gradients were not
// finite (0: none).
func (r *run) readStats(done int) (meanLoss float64, steps, badLoss, badGrads int) {
	v := r.stats.host[:]
	r.stats.buf.ReadFloat32s(v)
	tensor.Fill(r.stats.lossSum, 0)
	if steps = done - r.stats.at; steps > 0 {
		meanLoss = float64(v[0]) / float64(steps)
	}
	r.stats.at = done
	if v[1] >= 0 {
		badLoss = int(v[1])
	}
	if v[3] >= 0 {
		badGrads = int(v[3])
	}
	if r.upd.clipCoef != nil {
		r.upd.gradNorm = float64(v[2])
	}
	if r.upd.scalerState != nil {
		r.readScaler(done)
	} else if r.g.exec != nil {
		r.opt.Steps = done // the replays' updates, which the host does not count
	}
	if r.upd.hostBadGrads > 0 && (badGrads == 0 || r.upd.hostBadGrads < badGrads) {
		badGrads = r.upd.hostBadGrads
	}
	return meanLoss, steps, badLoss, badGrads
}

// microStep is one micro-step's forward and backward on one device: the
// loss of micro-batch x, y, scaled for accumulation (and fp16's loss
// scale), differentiated into the parameters' gradients. On the last
// micro-step of a data-parallel step the backward pass hands each finished
// gradient to the all-reduce (the others accumulate locally, as no_sync
// does). The unscaled loss goes into the step statistics, on the device.
func (r *run) microStep(step, micro int, x, y *tensor.Tensor) {
	cfg, tel := r.cfg, r.tel
	tel.to(phForward)
	if step < 0 { // captured: the step's key is hashed on the device each step
		r.model.SetDropout(0, r.dropoutRow0(micro))
		if r.g.dropKey != nil {
			r.model.SetDropoutBase(r.g.dropKey)
		}
	} else {
		r.model.SetDropout(r.dropoutKey(step), r.dropoutRow0(micro))
	}
	tensor.Step(func() {
		var loss *tensor.Tensor
		tensor.Autocast(cfg.ProductDType(), func() { loss = r.model.Loss(x, y) })
		tensor.TrackLoss(r.stats.buf, loss, 1/float32(cfg.GradAccum), step+1)
		var seed *tensor.Tensor
		switch {
		case r.upd.seed != nil: // fp16's scale/accumulation, on the device
			seed = r.upd.seed
		case r.scaler != nil:
			loss = tensor.Scale(loss, r.scaler.Scale/float32(cfg.GradAccum))
		case cfg.GradAccum > 1:
			loss = tensor.Scale(loss, 1/float32(cfg.GradAccum))
		}
		tel.to(phBackward)
		if h := r.group().Hook(); h != nil && micro == cfg.GradAccum-1 {
			prev := tensor.SetGradReadyHook(h)
			defer tensor.SetGradReadyHook(prev)
		}
		if seed != nil {
			loss.BackwardWith(seed)
		} else {
			loss.Backward()
		}
	})
}

// update finishes an optimizer step once the gradients are complete: the
// hook (tests inspect the gradients there), fp16's unscaling, clipping
// (over every device the parameters are on), and AdamW, unless the loss scaler finds inf or NaN gradients,
// when the step is skipped and the weights and AdamW state are untouched.
// It reports whether the weights moved.
func (r *run) update(step int, lr float64, hook func()) bool {
	if hook != nil {
		hook()
	}
	if r.upd.scalerState != nil || r.upd.clipCoef != nil {
		r.stepOnDevice(step, lr, nil) // with nothing to reduce, it cannot fail
		return true
	}
	if r.scaler != nil {
		inv := 1 / r.scaler.Scale
		for _, p := range r.opt.Params {
			if g := p.T.Grad; g != nil {
				tensor.ScaleInPlace(g, inv)
			}
		}
	}
	norm := optim.ClipGradNorm(r.opt.Params, r.cfg.GradClip)
	r.upd.gradNorm = norm
	if r.scaler == nil && !finite(norm) {
		// Without a loss scaler, whose business such steps are, gradients
		// that are not finite would make AdamW's every weight NaN: the
		// update is not applied, and the run stops (see diverged).
		if r.upd.hostBadGrads == 0 {
			r.upd.hostBadGrads = step + 1
		}
		r.opt.ZeroGrad()
		return false
	}
	if r.scaler != nil && !r.scaler.Update(!math.IsInf(norm, 0) && !math.IsNaN(norm)) {
		r.opt.ZeroGrad()
		return false
	}
	r.opt.SetLR(float32(lr))
	r.opt.Step()
	r.opt.ZeroGrad()
	return true
}

// stepOnDevice is update's step where the clip (and fp16's loss scaler)
// run on the device, read by nothing: the gradients' sum of squares, then,
// where reduce is given, its sum over the group's shards (ZeRO-1), then
// the clip coefficient (or the scaler's unscaling, clip, decision and the
// step's learning rate and AdamW constants, which the schedule's position,
// held back by skipped steps, gives: whether the weights moved is known
// there only), AdamW and the zeroing. A step captured in a graph (step
// < 0) takes its rate and constants from the step clock. It returns
// reduce's error, having stepped nothing.
func (r *run) stepOnDevice(step int, lr float64, reduce func() error) error {
	r.opt.GradSumSquares(r.upd.clipAcc)
	if reduce != nil {
		if err := reduce(); err != nil {
			return err
		}
	}
	switch {
	case r.upd.scalerState != nil:
		if r.upd.lrFill && step >= 0 { // (a captured step's is set outside its graph)
			tensor.Fill(r.upd.lrs, float32(lr))
		}
		tensor.ScalerCoef(r.upd.clipCoef, r.stats.buf, r.upd.clipAcc, r.upd.scalerState, r.upd.lrs, r.cfg.GradClip, step,
			r.scaler.GrowthInterval, 1/float32(r.cfg.GradAccum), r.opt.Config.Beta1, r.opt.Config.Beta2)
		r.opt.StepSched(r.upd.clipCoef, r.upd.sched16)
	case step < 0:
		tensor.ClipCoef(r.upd.clipCoef, r.stats.buf, r.upd.clipAcc, r.cfg.GradClip, -1)
		r.opt.StepSched(r.upd.clipCoef, r.g.sched)
	default:
		tensor.ClipCoef(r.upd.clipCoef, r.stats.buf, r.upd.clipAcc, r.cfg.GradClip, step+1)
		r.opt.SetLR(float32(lr))
		r.opt.StepScaled(r.upd.clipCoef)
	}
	r.opt.ZeroGrad()
	return nil
}

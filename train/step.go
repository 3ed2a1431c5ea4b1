package train

import (
	"fmt"

	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
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
	r.fin = stepUpdate{r, step, lr, hook}
	if err := grp.Finish(&r.fin); err != nil {
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
	if r.prec == config.BF16 {
		// bf16 activations' products read the weights' bf16 copies,
		// which AdamW rewrites in its own pass: written here once, after
		// anything that set the weights (a resume, the broadcast).
		r.opt.KeepHalf()
	}
	r.stats.buf = tensor.NewStats(ms.lossDevice())
	r.stats.lossSum = r.stats.buf.Rows(0, 1)
	r.stats.at = step
	if r.upd == nil { // (a test may have chosen one)
		r.upd = r.newUpdater()
	}
}

// readStats reads the step statistics (a host wait, at read points
// only) and restarts the loss sum: the mean loss of the steps since the
// last read, and the first steps whose loss and whose gradients were not
// finite (0: none).
func (r *run) readStats(done int) (meanLoss float64, steps, badLoss, badGrads int) {
	v := r.stats.host[:]
	r.stats.buf.ReadFloat32s(v)
	r.upd.read(done, v)
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
		// The loss's gradient, known before the forward pass, so that the
		// classifier forms the logits' gradient in the pass that forms the
		// loss (tensor.SetLossGrad).
		seed := r.upd.seed() // fp16's scale and accumulation's, on the device
		if seed == nil {
			seed = tensor.Full(x.Device(), r.upd.lossScale()/float32(cfg.GradAccum))
		}
		var loss *tensor.Tensor
		prev := tensor.SetLossGrad(seed)
		tensor.Autocast(r.prec.DType(), func() { loss = r.model.Loss(x, y) })
		tensor.SetLossGrad(prev)
		tensor.TrackLoss(r.stats.buf, loss, 1/float32(cfg.GradAccum), step+1)
		tel.to(phBackward)
		if h := r.group().Hook(); h != nil && micro == cfg.GradAccum-1 {
			prev := tensor.SetGradReadyHook(h)
			defer tensor.SetGradReadyHook(prev)
		}
		loss.BackwardWith(seed)
	})
}

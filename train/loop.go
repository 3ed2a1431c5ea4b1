package train

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/stats"
)

// loop runs the optimizer steps with evaluations, filling sum: each step,
// then the group's agreement on it, its statistics and log line, and its
// checkpoint.
func (r *run) loop(sum *Summary, first int) (err error) {
	cfg := r.cfg
	start := time.Now()
	var st stepStats
	defer func() {
		// Let a write in flight finish (a panic included) and report it.
		if werr := r.ckpt.wait(r.log); err == nil {
			err = werr
		}
	}()
	for step := first; ; step++ {
		r.at = step
		if step%cfg.EvalInterval == 0 || step == cfg.MaxIters { // every rank evaluates its share
			if err := r.evaluate(step, sum); err != nil {
				return err
			}
		}
		if step == cfg.MaxIters {
			break
		}
		lr := r.sched.At(r.scheduleStep(step))
		measured := step-first >= 5
		t0, w0 := time.Now(), r.feed.wait
		r.tel.begin(phH2D)
		if err := r.step(step, lr); err != nil {
			return err
		}
		r.tel.end(measured)
		if cfg.AfterStep != nil {
			cfg.AfterStep(step + 1)
		}
		dt := time.Since(t0).Seconds()
		tl := time.Now()
		done := step + 1
		sum.Steps++
		st.add(dt*1000, (r.feed.wait-w0).Seconds()*1000, float64(r.tokensPerStep())/dt, measured)
		if measured {
			r.perf.measured++
		}
		// A read point reads the step statistics and agrees on them
		// with the other ranks: where the log, an evaluation or a
		// checkpoint needs them, and where this process was asked to
		// stop (a group agrees on stopping at its next read point).
		stop := r.group().StopEarly(r.cfg.Stop)
		if stop || r.readPoint(done) {
			var err error
			if stop, err = r.agree(done, stop, &st); err != nil {
				return err
			}
			lr = r.upd.rate(step, lr) // (fp16's scaler on the device decides it there)
		}
		if done%cfg.LogInterval == 0 || done == cfg.MaxIters {
			if err := r.logWindow(done, lr, &st); err != nil {
				return err
			}
		}
		if err := r.checkpointAfter(done, stop, sum.BestValLoss); err != nil {
			return err
		}
		r.out.status.update(done, cfg.MaxIters, r.lossText(r.stats.lastLoss), float64(r.tokensPerStep())/dt, dt*1000)
		r.tel.addHost(phCkptLog, time.Since(tl), measured)
	}
	st.summarize(sum)
	sum.ElapsedSec = time.Since(start).Seconds()
	r.summarizeTelemetry(sum)
	return nil
}

// stepStats gathers the steps' losses and times: a window since the last
// log line, and the measured steps (after 5 warm-up steps) for the
// summary's medians. The losses come in at read points, as sums over
// the steps since the one before.
type stepStats struct {
	lossAcc, windowMs, windowWait float64
	n                             int // steps in the window
	lossSteps                     int // steps lossAcc covers
	rates, stepMs, waitMs         []float64
	totalStep, totalWait          float64
}

// addLoss records the mean loss of steps steps.
func (s *stepStats) addLoss(mean float64, steps int) {
	s.lossAcc += mean * float64(steps)
	s.lossSteps += steps
}

// add records a step's time and data wait (ms) and rate (tokens/s).
func (s *stepStats) add(ms, waitMs, rate float64, measured bool) {
	s.n++
	s.windowMs += ms
	s.windowWait += waitMs
	if measured {
		s.rates = append(s.rates, rate)
		s.stepMs = append(s.stepMs, ms)
		s.waitMs = append(s.waitMs, waitMs)
		s.totalStep += ms
		s.totalWait += waitMs
	}
}

// summarize puts the medians of the measured steps in sum.
func (s *stepStats) summarize(sum *Summary) {
	sum.TokensPerSec = stats.Median(s.rates)
	sum.MsPerStep = stats.Median(s.stepMs)
	sum.DataWaitMs = stats.Median(s.waitMs)
	if s.totalStep > 0 {
		sum.DataWaitShare = s.totalWait / s.totalStep
	}
}

// readPoint reports whether the loop reads the step statistics after
// step done: where a log line, an evaluation (before the next step) or a
// checkpoint needs them, and at the end. Steps between read nothing back.
func (r *run) readPoint(done int) bool {
	cfg := r.cfg
	return done%cfg.LogInterval == 0 || done == cfg.MaxIters || done%cfg.EvalInterval == 0 ||
		(cfg.CkptInterval > 0 && done%cfg.CkptInterval == 0)
}

// agree ends a read point for the group: it reads the step statistics,
// and every rank learns whether any was asked to stop (a signal) and
// whether any loss or gradients were not finite, so the ranks stop after
// the same step, and a diverged run stops, naming the first bad step,
// before anything of it is saved.
func (r *run) agree(done int, stop bool, st *stepStats) (bool, error) {
	mean, steps, badLoss, badGrads := r.readStats(done)
	st.addLoss(mean, steps)
	r.stats.lastLoss = mean
	bad := (badLoss > 0 || badGrads > 0) && !r.simulated
	stop, nBad, err := r.group().Agree(stop, r.cfg.Stop, bad)
	if err != nil {
		return false, fmt.Errorf("step %d: %w", done, err)
	}
	if nBad > 0 {
		return false, r.diverged(done, badLoss, badGrads, nBad)
	}
	return stop, nil
}

// logWindow prints the log line of the steps since the last one (the
// group's means in a data-parallel run) and appends their metric, then
// empties the window.
func (r *run) logWindow(done int, lr float64, st *stepStats) error {
	cfg := r.cfg
	avg, ms, wms := st.lossAcc/float64(max(st.lossSteps, 1)), st.windowMs/float64(st.n), st.windowWait/float64(st.n)
	vals := [...]float64{avg, ms, wms} // the means over the ranks
	if err := r.group().Average(vals[:]); err != nil {
		return fmt.Errorf("step %d: averaging the logged loss: %w", done, err)
	}
	avg, ms, wms = vals[0], vals[1], vals[2]
	r.stats.loggedLoss = avg // the summary's final train loss
	tps := float64(r.tokensPerStep()) / (ms / 1000)
	m := Metric{Step: done, TrainLoss: &avg, LR: &lr, MsPerStep: &ms, TokensPerSec: &tps, DataWaitMs: &wms}
	fmt.Fprintf(r.log, "step %d/%d | loss %s | lr %.3e | %.1f ms/step | %.0f tok/s",
		done, cfg.MaxIters, r.lossText(avg), lr, ms, tps)
	if r.simulated {
		m.TrainLoss = nil
	}
	if w := max(cfg.WorldSize, 1); w > 1 { // tps and MFU are per process
		fmt.Fprintf(r.log, " per rank, %.0f in all", tps*float64(w))
	}
	if r.perf.peakFLOPs > 0 {
		mfu := tps * r.perf.flopsPerToken / r.perf.peakFLOPs
		m.MFU = &mfu
		fmt.Fprintf(r.log, " | MFU %.1f%%", 100*mfu)
	}
	fmt.Fprintf(r.log, " | data wait %.3f ms (%.2f%%)", wms, 100*wms/ms)
	if r.scaler != nil {
		fmt.Fprintf(r.log, " | loss scale %g, %d steps skipped", r.scaler.Scale, r.scaler.Skipped)
		sc := float64(r.scaler.Scale)
		m.LossScale = &sc
	}
	fmt.Fprintln(r.log)
	gn := r.upd.gradNorm()
	m.GradNorm = &gn
	r.fillMetric(&m, st.n)
	st.lossAcc, st.lossSteps, st.n, st.windowMs, st.windowWait = 0, 0, 0, 0, 0
	return r.addMetric(m)
}

// checkpointAfter saves what step done asks for: a checkpoint every
// CkptInterval steps and at the end, and one before stopping when the
// group was asked to stop (then it returns ErrInterrupted).
func (r *run) checkpointAfter(done int, stop bool, best float64) error {
	cfg := r.cfg
	if r.simulated {
		if stop {
			return fmt.Errorf("%w after step %d (a run on a simulated GPU saves nothing)", ErrInterrupted, done)
		}
		return nil
	}
	if err := r.ckpt.poll(r.log); err != nil {
		return err
	}
	if stop {
		if err := r.ckpt.save(r, done, best, true); err != nil {
			return err
		}
		if cfg.Rank != 0 {
			return setting.Errorf("%w after step %d; rank 0 saved the group's checkpoint; continue with {Resume}", ErrInterrupted, done)
		}
		fmt.Fprintf(r.log, "stopped after step %d: checkpoint in %s; continue with --resume\n", done, r.ckpt.last)
		return setting.Errorf("%w after step %d; checkpoint %s; continue with {Resume}", ErrInterrupted, done, r.ckpt.last)
	}
	if cfg.CkptInterval > 0 && (done%cfg.CkptInterval == 0 || done == cfg.MaxIters) {
		return r.ckpt.save(r, done, best, false)
	}
	return nil
}

// diverged is the error of a run whose loss or gradients were not finite
// (on nBad ranks of a group), found at the read point after step done:
// it names the first such step of this rank (badLoss, badGrads: 0 for
// none), and nothing after the step before it was saved.
func (r *run) diverged(done, badLoss, badGrads, nBad int) error {
	var what string
	step, at := done, "at or before this step (another rank's first bad step)"
	switch {
	case badLoss > 0 && (badGrads == 0 || badLoss <= badGrads):
		step, what, at = badLoss, "the training loss is not finite", "at this step, the first whose loss or gradients are not finite"
	case badGrads > 0:
		step, what, at = badGrads, "the gradients are not finite though the loss is; the update was not applied",
			"at this step, the first whose loss or gradients are not finite"
	default:
		what = "this rank's losses and gradients are finite"
	}
	if w := max(r.cfg.WorldSize, 1); w > 1 {
		what = fmt.Sprintf("%d of the %d ranks' losses or gradients are not finite (%s)", nBad, w, what)
	}
	advice, args := r.divergedAdvice(step - 1) // the weights after step-1 gave them
	return setting.Errorf("step %d: %s: the run diverged "+at+"; "+advice,
		append([]any{step, what}, args...)...)
}

// divergedAdvice says what of a diverged run was saved, and how to train
// on: a setting.Errorf format, naming settings by field, and its
// arguments. The weights after step bad gave a loss or gradients that are
// not finite: a checkpoint of that step holds them, and Resume would take
// it; earlier ones hold weights that gave finite values.
func (r *run) divergedAdvice(bad int) (format string, args []any) {
	cfg := r.cfg
	if r.ckpt != nil {
		r.ckpt.wait(io.Discard) // the newest checkpoint, not one still being written
	}
	format = "the run has no checkpoint to go back to"
	switch {
	case r.ckpt == nil || r.ckpt.lastStep < 0:
	case r.ckpt.lastStep < bad:
		format = "the newest checkpoint, %s (step %d), holds weights from before it: {Resume} {AllowChanges} with the changes below continues from there"
		args = append(args, r.ckpt.last, r.ckpt.lastStep)
	default:
		format = "the newest checkpoint, %s (step %d), holds the weights that gave it, and {Resume} takes the newest: " +
			"move it out of %s to resume from an earlier one with the changes below ({Resume} {AllowChanges})"
		args = append(args, r.ckpt.last, r.ckpt.lastStep, filepath.Dir(r.ckpt.last))
	}
	format += ". To train on, lower {LR} (now %g), lengthen {WarmupIters} (now %d), or clip harder with a smaller {GradClip}"
	args = append(args, cfg.LR, cfg.WarmupIters)
	if cfg.GradClip > 0 {
		format += fmt.Sprintf(" (now %g)", cfg.GradClip)
	} else {
		format += " (now 0: off; 1 is usual)"
	}
	if r.scaler != nil { // fp16
		format += "; or train in {Precision} bf16, whose range is fp32's: fp16's overflows"
	}
	return format, args
}

package train

import (
	"errors"
	"fmt"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/tensor"
)

// graphWarmSteps is how many plain steps run before a step is captured:
// the first makes the gradients and fills the memory pool, the second
// runs as every later one will.
const graphWarmSteps = 2

// stepGraph is a step under --cuda-graphs: the micro-batches are copied
// into the buffers the graph reads and the graph is launched. The first
// time, the step is captured: the step clock (in the step statistics)
// starts at this step, and the micro-steps and the update are recorded
// with every per-step value taken on the device: the step's number from
// the clock, the learning rate and AdamW's constants from the schedule
// (StepClock, or fp16's scaler). The host's work per step is then the
// copies and one launch.
func (r *run) stepGraph(step int, lr float64) error {
	cfg, tel := r.cfg, r.tel
	tel.to(phH2D)
	if r.g.in == nil {
		if err := tensor.Catch(func() { r.openGraph(step) }); err != nil {
			return fmt.Errorf("--cuda-graphs: %w", err)
		}
	}
	for micro := 0; micro < cfg.GradAccum; micro++ {
		w0 := r.feed.wait
		x, y, err := r.feed.staged.get(step, micro, nextMicro(step, micro, cfg.GradAccum), r.feed.fill)
		if err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		tel.move(phH2D, phData, r.feed.wait-w0)
		if err := tensor.Catch(func() {
			r.g.in[micro][0].CopyFrom(x)
			r.g.in[micro][1].CopyFrom(y)
		}); err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
	}
	// No schedule (a Stepper): the rate given, outside the graph.
	if err := tensor.Catch(func() { r.upd.setRate(lr) }); err != nil {
		return err
	}
	tel.to(phForward) // the graph's phases are not told apart
	if r.g.exec == nil {
		if err := r.captureStep(step); err != nil {
			return fmt.Errorf("--cuda-graphs: capturing step %d: %w", step+1, err)
		}
	}
	if err := r.g.exec.Launch(); err != nil {
		return fmt.Errorf("step %d: launching its graph: %w", step+1, err)
	}
	tel.to(phOptimizer)
	return nil
}

// openGraph readies what the graph reads: the batch buffers, the
// updater's schedule (its clock), and the step clock, set to step.
func (r *run) openGraph(step int) {
	if _, ok := backendOf(r.dev).(backend.Grapher); !ok {
		panic(&tensor.Error{Op: "cuda_graphs", Msg: fmt.Sprintf("%v cannot capture graphs (a CUDA device can)", r.dev)})
	}
	tensor.Persist(func() {
		for range r.cfg.GradAccum {
			r.g.in = append(r.g.in, [2]*tensor.Tensor{
				tensor.Empty(r.dev, tensor.I32, r.cfg.BatchSize, r.cfg.BlockSize),
				tensor.Empty(r.dev, tensor.I32, r.cfg.BatchSize, r.cfg.BlockSize)})
		}
		r.upd.clock()
		if r.cfg.Dropout > 0 {
			r.g.dropKey = tensor.Empty(r.dev, tensor.I32, 2)
		}
	})
	tensor.Fill(r.stats.buf.Rows(4, 5), float32(step))
}

// backendOf is dev's backend (nil where it has none).
func backendOf(dev tensor.Device) backend.Backend {
	b, _ := backend.Get(dev)
	return b
}

// captureStep records one step's micro-steps and update into r.g.exec.
func (r *run) captureStep(step int) error {
	gr := backendOf(r.dev).(backend.Grapher)
	if err := gr.BeginCapture(); err != nil {
		return err
	}
	tel := r.tel
	r.tel = nil // no device marks inside a graph
	err := tensor.Catch(func() {
		sched, lrs := r.upd.clock() // nil: the updater schedules the step itself
		b1, b2 := r.opt.Betas()
		tensor.StepClock(r.stats.buf, sched, lrs, b1, b2)
		if r.g.dropKey != nil {
			tensor.StepDropoutKey(r.g.dropKey, r.stats.buf, r.cfg.Seed)
		}
		defer r.model.SetDropoutBase(nil)
		for micro := 0; micro < r.cfg.GradAccum; micro++ {
			r.microStep(-2, micro, r.g.in[micro][0], r.g.in[micro][1]) // -2: the step's number from the clock
		}
		if err := r.upd.apply(-2, 0, nil); err != nil {
			panic(err)
		}
	})
	r.tel = tel
	g, endErr := gr.EndCapture()
	if err != nil || endErr != nil {
		if g != nil {
			g.Free()
		}
		return errors.Join(err, endErr)
	}
	r.g.exec = g
	return nil
}

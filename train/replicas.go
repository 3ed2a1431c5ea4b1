package train

import (
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// replicaRun is --replicas: data parallelism in one process, as the
// lecture's DataParallel is. The run's model lives on the first device;
// each other device holds a replica. Every step it
//
//   - broadcasts the parameters from the first device to the replicas
//     (begin),
//   - scatters each micro-batch's rows over the devices, which run their
//     forward and backward passes at the same time, each on a goroutine
//     with a tensor program of its own (forwardBackward),
//   - gathers the losses onto the first device, and
//   - sums the replicas' gradients into the first device's (end),
//
// and the optimizer steps there, on the first device alone. Everything
// goes through the first device, which does the update while the others
// wait: the cost DDP's one process per device and all-reduce overlapped
// with backward avoid. A row's dropout masks are keyed by its place in the
// step's global batch, so the replicas draw a one-device run's masks.
type replicaRun struct {
	r      *run
	devs   []tensor.Device   // devs[0] is the run's
	models []*model.GPT      // models[0] is the run's
	params [][]*nn.Parameter // each model's, listed once (packing replaces their tensors, not them)
	progs  programs          // each device's program
	owned  []*tensor.Program
	scopes []tensor.Scope // each replica's micro-step tensors
	losses []*tensor.Tensor
	// moved counts the bytes through the first device in steps steps:
	// parameters out, micro-batch rows out, losses and gradients in.
	moved int64
	steps int
	// The step's timeline, in host wall time from its begin: each
	// device's broadcast, forward and backward passes and gradient sum,
	// and the first device's update (from the sum's end to the next
	// step's begin). kept are whole steps' timelines after the warm-up,
	// up to keptSteps of them, for the report's median step.
	t0, reduced time.Time
	tl          []TimelineSlot
	kept        [][]TimelineSlot
	mu          sync.Mutex
}

// keptSteps is how many steps' timelines a run keeps (after 5 warm-up
// steps, as the summary's medians skip them): the report shows the one
// of median length.
const keptSteps = 64

// span adds a slot of device i from start to now to the step's timeline.
func (p *replicaRun) span(i int, kind string, micro int, start time.Time) {
	ms := func(t time.Time) float64 { return float64(t.Sub(p.t0).Microseconds()) / 1e3 }
	p.mu.Lock()
	p.tl = append(p.tl, TimelineSlot{Stage: i, Kind: kind, Micro: micro, StartMs: ms(start), EndMs: ms(time.Now())})
	p.mu.Unlock()
}

// ReplicasFile is where a --replicas run writes its ReplicaReport.
const ReplicasFile = config.ReplicasFile

// ReplicaReport is replicas.json: what went through the first device,
// and where the last step's time went on each device.
type ReplicaReport struct {
	Devices []string `json:"devices"`
	Steps   int      `json:"steps"`
	// BytesPerStep is the bytes through the first device per step:
	// parameters out, micro-batch rows out, losses and gradients in.
	BytesPerStep float64 `json:"bytes_per_step"`
	// Timeline is a step of median length: per device (Stage is its index), its
	// broadcast (the parameters copied to it), fwd+bwd (its rows forward
	// and backward), sum (its gradients added into the first device's)
	// and, on the first device, update (the optimizer and the step's
	// bookkeeping, until the next step begins); ms from the step's begin.
	Timeline []TimelineSlot `json:"timeline"`
	Note     string         `json:"note"`
}

// newReplicaRun makes the replicas of r's model on devs[1:] (devs[0] is
// r.dev), each device with a program of its own.
func newReplicaRun(r *run, devs []tensor.Device) (*replicaRun, error) {
	p := &replicaRun{r: r, devs: devs, models: []*model.GPT{r.model}, progs: programs{tensor.ProgramOf(devs[0])}}
	for _, d := range devs[1:] {
		prog, err := tensor.NewProgram(d)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("--replicas: %w", err)
		}
		p.owned = append(p.owned, prog)
		p.progs = append(p.progs, prog)
		m, err := model.New(r.model.Config, d, r.cfg.Seed)
		if err != nil {
			p.close()
			return nil, err
		}
		m.SetRecompute(r.model.Recompute())
		// The replica's gradients start zeroed, so that every backward
		// pass adds into them the one way (a resumed run's first step as
		// every other): ops that write a gradient afresh and ops that add
		// into one differ in the last bit.
		prog.Persist(func() {
			for _, q := range m.Parameters() {
				q.T.Grad = tensor.ZerosLike(q.T)
			}
		})
		p.models = append(p.models, m)
	}
	for _, m := range p.models {
		p.params = append(p.params, m.Parameters())
	}
	p.scopes = make([]tensor.Scope, len(devs))
	p.losses = make([]*tensor.Tensor, len(devs))
	fmt.Fprintf(r.log, "replicas: %d devices (%v), one process: the parameters broadcast from %v each step, every micro-batch's rows scattered, the gradients summed back onto %v, the optimizer there\n",
		len(devs), devs, devs[0], devs[0])
	return p, nil
}

// rows is replica i's rows [lo, hi) of a micro-batch of b rows: as even a
// split as b allows, the first replicas taking one more.
func (p *replicaRun) rows(i, b int) (lo, hi int) {
	n := len(p.devs)
	per, extra := b/n, b%n
	lo = i*per + min(i, extra)
	hi = lo + per
	if i < extra {
		hi++
	}
	return lo, hi
}

// begin broadcasts the first device's parameters to the replicas.
func (p *replicaRun) begin() {
	now := time.Now()
	if p.steps > 5 && len(p.kept) < keptSteps { // the previous step's update ran until now
		p.span(0, "update", 0, p.reduced)
		p.kept = append(p.kept, append([]TimelineSlot(nil), p.tl...))
	}
	p.t0, p.tl = now, p.tl[:0]
	p.steps++
	master := p.params[0]
	for i, ps := range p.params[1:] {
		prog := p.progs[i+1]
		t := time.Now()
		prog.Step(func() {
			for k, q := range ps {
				q.T.CopyFrom(master[k].T.To(q.T.Device()))
				p.moved += int64(q.T.Numel()) * 4
			}
		})
		p.span(i+1, "broadcast", 0, t)
	}
}

// forwardBackward scatters micro-batch x, y over the devices and runs
// their passes at the same time; each replica's loss is its rows' share
// of the micro-batch's mean, scaled for accumulation. As a pipeline's
// runner does, every device's program opens its step here, on the
// calling goroutine, where the rows are moved and the losses gathered;
// each replica's goroutine runs in a detached scope of its program.
func (p *replicaRun) forwardBackward(step, micro int, x, y *tensor.Tensor) {
	r := p.r
	cfg := r.cfg
	B := x.Dim(0)
	share := func(i int) float32 {
		lo, hi := p.rows(i, B)
		return float32(hi-lo) / float32(B) / float32(cfg.GradAccum)
	}
	p.progs.step(func() {
		xs, ys := make([]*tensor.Tensor, len(p.devs)), make([]*tensor.Tensor, len(p.devs))
		for i, d := range p.devs {
			lo, hi := p.rows(i, B)
			xs[i], ys[i] = x.Rows(lo, hi).To(d), y.Rows(lo, hi).To(d)
			if i > 0 {
				p.moved += int64(2*(hi-lo)*x.Dim(1)) * 4
			}
		}
		r.tel.to(phForward)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failure any
		wg.Add(len(p.devs))
		for i := range p.devs {
			go func() {
				defer wg.Done()
				defer p.span(i, "fwd+bwd", micro, time.Now())
				defer func() {
					if e := recover(); e != nil {
						mu.Lock()
						failure = e
						mu.Unlock()
					}
				}()
				lo, _ := p.rows(i, B)
				m, prog := p.models[i], p.progs[i]
				prog.In(&p.scopes[i], func() {
					m.SetDropout(r.dropoutKey(step), r.dropoutRow0(micro)+int64(lo))
					var loss *tensor.Tensor
					prog.Autocast(r.prec.DType(), func() { loss = m.Loss(xs[i], ys[i]) })
					p.losses[i] = loss
					tensor.Scale(loss, share(i)).Backward()
				})
			}()
		}
		wg.Wait()
		r.tel.to(phBackward)
		defer p.freeScopes()
		if failure != nil {
			panic(failure)
		}
		for i, l := range p.losses { // the losses gathered onto the first device
			tensor.TrackLoss(r.stats.buf, l.To(p.devs[0]), share(i), step+1)
		}
		p.moved += int64(len(p.devs)-1) * 4
	})
}

func (p *replicaRun) freeScopes() {
	for i := range p.scopes {
		p.scopes[i].Free()
		p.losses[i] = nil
	}
}

// end sums the replicas' gradients into the first device's, in device
// order, and zeroes theirs.
func (p *replicaRun) end() { tensor.Step(p.gather) }

func (p *replicaRun) gather() {
	master := p.params[0]
	for i, ps := range p.params[1:] {
		t := time.Now()
		for k, q := range ps {
			g := q.T.Grad
			if g == nil {
				continue
			}
			w := master[k].T
			if w.Grad == nil {
				tensor.Persist(func() { w.Grad = tensor.ZerosLike(w) })
			}
			tensor.AddInPlace(w.Grad, g.To(w.Device()), 1)
			p.moved += int64(g.Numel()) * 4
			tensor.ZeroGradInPlace(q.T)
		}
		p.span(i+1, "sum", 0, t)
	}
	p.reduced = time.Now()
}

// The loss is computed, the statistics kept and the optimizer stepped on
// the first device, which holds the whole model: to the step it is one
// device (its parameters one flat buffer, clipped there).
func (p *replicaRun) lossDevice() tensor.Device { return p.devs[0] }
func (p *replicaRun) pipelined() bool           { return false }

// Evaluations run on the first device alone.
func (p *replicaRun) evaluator() (func(x, y *tensor.Tensor) *tensor.Tensor, programs) {
	return p.models[0].Loss, programs{tensor.ProgramOf(p.devs[0])}
}
func (p *replicaRun) evaluate(fn func()) { fn() }

func (p *replicaRun) peakMem(d tensor.Device) int64 { return tensor.MemStats(d).Peak }

// finish logs the bytes moved through the first device per step, and
// writes replicas.json.
func (p *replicaRun) finish() error {
	if p.steps == 0 {
		return nil
	}
	rep := ReplicaReport{Steps: p.steps, BytesPerStep: float64(p.moved) / float64(p.steps), Timeline: medianStep(p.kept),
		Note: fmt.Sprintf("host wall times of the step of median length among %d after 5 warm-up steps; each device's work ran on its own goroutine with its own tensor program", len(p.kept))}
	for _, d := range p.devs {
		rep.Devices = append(rep.Devices, d.String())
	}
	fmt.Fprintf(p.r.log, "replicas: %.0f bytes per step through %v (parameters out, rows out, losses and gradients in)\n", rep.BytesPerStep, p.devs[0])
	return writeJSON(filepath.Join(p.r.cfg.Out, ReplicasFile), rep)
}

// medianStep is the timeline, of those given, whose last slot ends at
// the median time (nil if none).
func medianStep(steps [][]TimelineSlot) []TimelineSlot {
	if len(steps) == 0 {
		return nil
	}
	end := func(tl []TimelineSlot) float64 {
		e := 0.0
		for _, s := range tl {
			e = max(e, s.EndMs)
		}
		return e
	}
	sorted := append([][]TimelineSlot(nil), steps...)
	sort.SliceStable(sorted, func(i, j int) bool { return end(sorted[i]) < end(sorted[j]) })
	return sorted[len(sorted)/2]
}

// close frees the replicas and gives their devices back to the default
// program.
func (p *replicaRun) close() {
	for _, m := range p.models[min(len(p.models), 1):] {
		for _, q := range m.Parameters() {
			freeParam(q)
		}
	}
	p.models, p.params = p.models[:min(len(p.models), 1)], nil
	for _, prog := range p.owned {
		prog.Close()
	}
	p.owned = nil
}

// freeParam frees a parameter and its gradient.
func freeParam(q *nn.Parameter) {
	if q.T.Grad != nil {
		q.T.Grad.Free()
		q.T.Grad = nil
	}
	q.T.Free()
}

package train

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/pipeline"
	"github.com/fleetml/fleet/tensor"
)

// pipeRun is a run's pipeline parallelism (--pipeline): the model's
// blocks on several devices, each batch cut into micro-batches that a
// schedule runs through the stages, one optimizer step per batch.
type pipeRun struct {
	r     *run
	devs  []tensor.Device
	progs programs // [stage]: the tensor program driving its device
	owned []*tensor.Program
	// threads restores the thread budgets the stages' host devices had;
	// each is the budget each has while the stages run at once.
	threads map[backend.ThreadBudget]int
	each    int
	st      *model.Staged
	run     *pipeline.Runner
	micros  int
	rows    int // rows per micro-batch
	x, y    *tensor.Tensor
	xs, ys  []*tensor.Tensor // the micro-batches' inputs on the first stage, targets on the last
	step    int              // the optimizer step the micro-step belongs to
	scale   float32          // what each micro-batch's loss is multiplied by before backward
	dt      tensor.DType

	meas pipeMeasure // over the measured steps
}

// pipeMeasure is what a pipeline measures over its steps, for its report
// (pipeline.json) and the run's telemetry.
type pipeMeasure struct {
	seen     int       // step calls
	steps    int       // measured schedule runs
	busy     []float64 // seconds per stage
	makespan float64   // wall seconds, first slot's start to last slot's end
	serial   float64
	timeline []TimelineSlot // the last measured step's slots
	// The stages' peak memory: schedPeak during the measured schedule
	// runs (each run restarts its devices' peaks), runPeak before each
	// restart, so the run's own peak is not lost.
	schedPeak, runPeak []int64
	stepRuns           int     // schedule runs in this step so far
	stepEnd            float64 // seconds: where the step's timeline ends so far
	headCopies         int64   // tied-weight copies: the weight to the last stage, its gradient back
	headBytes          int64
	actCopies0         int64
	gradCopies0        int64
}

// stageCounts splits the model's blocks over the stages: --pipeline-split,
// or by parameter count (the first stage also holds the embeddings, the
// last the final LayerNorm and the copy of the tied head).
func stageCounts(cfg Config, m *model.GPT, stages int) ([]int, error) {
	if cfg.PipelineSplit != "" {
		counts, err := pipeline.ParseSplit(cfg.PipelineSplit, stages, len(m.Blocks))
		if err != nil {
			return nil, setting.Errorf("{PipelineSplit} over the {Pipeline} devices: %w", err)
		}
		return counts, nil
	}
	count := func(ps []*nn.Parameter) float64 {
		n := 0
		for _, p := range ps {
			n += p.T.Numel()
		}
		return float64(n)
	}
	layers := make([]float64, len(m.Blocks))
	for i, b := range m.Blocks {
		layers[i] = count(b.Parameters())
	}
	first := count(m.EmbedParams())
	last := count(m.HeadParams())
	if stages > 1 && m.Tied() { // the head's copy of the embedding
		last += float64(m.WTE.W.T.Numel())
	}
	return pipeline.Balance(layers, stages, first, last), nil
}

// newPipeRun places r's model on its stages' devices, devs. It runs
// before the optimizer is made, so its moments live with their
// parameters.
func newPipeRun(r *run, devs []tensor.Device) (*pipeRun, error) {
	cfg := r.cfg
	counts, err := stageCounts(cfg, r.model, len(devs))
	if err != nil {
		return nil, err
	}
	p := &pipeRun{r: r, devs: devs, micros: max(cfg.MicroBatches, 1), dt: r.prec.DType(),
		meas: pipeMeasure{busy: make([]float64, len(devs)), schedPeak: make([]int64, len(devs)), runPeak: make([]int64, len(devs))}}
	p.rows = cfg.BatchSize / p.micros
	sch, err := pipeline.New(cfg.PipelineSchedule, len(devs), p.micros)
	if err != nil {
		return nil, err
	}
	if p.st, err = r.model.Place(devs, counts); err != nil {
		return nil, err
	}
	// Each stage's device gets a tensor program of its own, so the stages
	// run at the same time on their goroutines; the run's own device keeps
	// the default program, which the trainer drives between steps.
	for _, d := range devs {
		prog := tensor.ProgramOf(d)
		if d != r.dev {
			if prog, err = tensor.NewProgram(d); err != nil {
				p.close()
				return nil, setting.Errorf("{Pipeline}: %w", err)
			}
			p.owned = append(p.owned, prog)
		}
		p.progs = append(p.progs, prog)
	}
	p.shareCores()
	p.xs, p.ys = make([]*tensor.Tensor, p.micros), make([]*tensor.Tensor, p.micros)
	p.run = &pipeline.Runner{Schedule: sch, Devices: devs, Programs: p.progs,
		Input: p.input, Forward: p.forward, Loss: p.lossOf, Prepare: p.prepare}
	last := devs[len(devs)-1]
	T := cfg.BlockSize
	fmt.Fprintf(r.log, "pipeline: %d stages, %s schedule, %d micro-batches of %d; its own bubble (S-1)/(M+S-1) = %.3f\n",
		len(devs), sch.Name, p.micros, p.rows, sch.Bubble())
	for st, rg := range p.st.Ranges {
		var what []string
		if st == 0 {
			what = append(what, "embeddings")
		}
		what = append(what, fmt.Sprintf("blocks [%d, %d)", rg[0], rg[1]))
		if st == len(devs)-1 {
			what = append(what, "final norm and head")
		}
		n := 0
		for _, q := range p.st.StageParams(st) {
			n += q.T.Numel()
		}
		fmt.Fprintf(r.log, "pipeline: stage %d on %v: %s, %.2fM parameters, holds up to %d micro-batches' activations\n",
			st, devs[st], strings.Join(what, ", "), float64(n)/1e6, sch.MaxInFlight(st))
	}
	if p.st.HeadCopyBytes() > 0 {
		fmt.Fprintf(r.log, "pipeline: the tied embedding is copied to %v for the head each step; its gradient is added back before the optimizer step\n", last)
	}
	fmt.Fprintf(r.log, "pipeline: each boundary moves %d bytes of activations per micro-batch forward and as many of gradients back\n",
		p.rows*T*cfg.NEmbd*4)
	return p, nil
}

// peakMem is device d's peak memory over the run: its pool's peak, or a
// peak from before the schedule runs restarted it.
// lossDevice is the last stage's device, which computes the loss.
func (p *pipeRun) lossDevice() tensor.Device { return p.devs[len(p.devs)-1] }

// pipelined: a pipeline's parameters are spread over its stages.
func (p *pipeRun) pipelined() bool { return true }

// evaluator is the pipeline's loss, its head's tied weight synchronised
// first, in the stages' programs.
func (p *pipeRun) evaluator() (func(x, y *tensor.Tensor) *tensor.Tensor, programs) {
	p.st.SyncHead()
	return p.evalLoss, p.progs
}

// evaluate runs an evaluation with the stages taking turns: each may use
// every core.
func (p *pipeRun) evaluate(fn func()) { p.allCores(fn) }

func (p *pipeRun) peakMem(d tensor.Device) int64 {
	peak := tensor.MemStats(d).Peak
	for st, sd := range p.devs {
		if sd == d {
			peak = max(peak, p.meas.runPeak[st])
		}
	}
	return peak
}

// shareCores splits the machine's cores between the stages whose kernels
// run on host threads (logical CPU devices), so that stages running at
// the same time do not oversubscribe them: each gets an equal thread
// budget. The results do not depend on it (backend.ThreadBudget).
func (p *pipeRun) shareCores() {
	var host []backend.ThreadBudget
	for _, d := range p.devs {
		if tb, ok := tensor.BackendOf(d).(backend.ThreadBudget); ok {
			host = append(host, tb)
		}
	}
	if len(host) < 2 {
		return
	}
	each := max(runtime.GOMAXPROCS(0)/len(host), 1)
	p.threads, p.each = map[backend.ThreadBudget]int{}, each
	for _, tb := range host {
		p.threads[tb] = tb.Threads()
		tb.SetThreads(each)
	}
	unit := "threads"
	if each == 1 {
		unit = "thread"
	}
	fmt.Fprintf(p.r.log, "pipeline: %d stages on host threads share %d cores: %d %s each\n", len(host), runtime.GOMAXPROCS(0), each, unit)
}

// allCores runs fn, which drives the stages one after another
// (evaluation), with each host stage on all the cores it had.
func (p *pipeRun) allCores(fn func()) {
	for tb, n := range p.threads {
		tb.SetThreads(n)
	}
	defer func() {
		for tb := range p.threads {
			tb.SetThreads(p.each)
		}
	}()
	fn()
}

// close gives the stages' devices back to the default program and their
// thread budgets back.
func (p *pipeRun) close() {
	for _, prog := range p.owned {
		prog.Close()
	}
	p.owned = nil
	for tb, n := range p.threads {
		tb.SetThreads(n)
	}
	p.threads = nil
}

// prepare cuts the micro-step's batch into the micro-batches' inputs, on
// the first stage's device, and targets, on the last's, before the stages
// start (they may not drive the batch's program while they run).
func (p *pipeRun) prepare() {
	first, last := p.devs[0], p.devs[len(p.devs)-1]
	for m := range p.micros {
		p.xs[m] = p.x.Rows(m*p.rows, (m+1)*p.rows).To(first)
		p.ys[m] = p.y.Rows(m*p.rows, (m+1)*p.rows).To(last)
	}
}

func (p *pipeRun) input(m int) *tensor.Tensor { return p.xs[m] }

func (p *pipeRun) forward(st, m int, x *tensor.Tensor) (out *tensor.Tensor) {
	p.progs[st].Autocast(p.dt, func() { out = p.st.Forward(st, x, m*p.rows) })
	return out
}

func (p *pipeRun) lossOf(m int, logits *tensor.Tensor) (loss *tensor.Tensor) {
	p.progs[len(p.progs)-1].Autocast(p.dt, func() { loss = tensor.CrossEntropy(logits, p.ys[m]) })
	tensor.TrackLoss(p.r.stats.buf, loss, 1/float32(p.micros*p.r.cfg.GradAccum), p.step+1)
	return tensor.Scale(loss, p.scale)
}

// begin prepares an optimizer step: the head's copy of the tied
// embedding takes the weights the last step left.
func (p *pipeRun) begin() {
	p.st.SyncHead()
	p.meas.seen++
}

// forwardBackward is one micro-batch of a step for a pipelined model: the schedule runs the
// micro-step's batch x, y through the stages in p.micros micro-batches,
// each micro-batch's loss scaled by 1/(M × GradAccum) (and fp16's loss
// scale), so the gradients are those of the whole batch. The losses go
// into the step statistics, on the last stage's device.
func (p *pipeRun) forwardBackward(step, micro int, x, y *tensor.Tensor) {
	r := p.r
	cfg := r.cfg
	p.x, p.y = x, y
	p.scale = 1 / float32(p.micros*cfg.GradAccum) * r.upd.lossScale()
	p.st.SetDropout(r.dropoutKey(step), r.dropoutRow0(micro), cfg.BatchSize)
	p.step = step
	r.tel.to(phForward)
	measured := p.meas.seen > 5
	if measured {
		for st, d := range p.devs {
			p.meas.runPeak[st] = max(p.meas.runPeak[st], tensor.MemStats(d).Peak)
			tensor.ResetPeakMemory(d)
		}
	}
	t0 := time.Now()
	tensor.Step(p.run.Run) // the batch's own views, where no stage is on its device
	// The stages' forward and backward passes overlap: the run's time is
	// split between the phases in proportion to their slot times.
	var fwd, all float64
	for sl, t := range p.run.SlotTime {
		all += t
		if sl.Kind == pipeline.Forward {
			fwd += t
		}
	}
	if all > 0 {
		r.tel.move(phForward, phBackward, time.Duration(float64(time.Since(t0))*(1-fwd/all)))
	}
	if measured {
		for st, d := range p.devs {
			p.meas.schedPeak[st] = max(p.meas.schedPeak[st], tensor.MemStats(d).Peak)
		}
	}
	p.record(measured, micro)
	p.x, p.y = nil, nil
	clear(p.xs)
	clear(p.ys)
}

// end adds the tied head's gradient into the embedding's, so that
// clipping and AdamW see the gradients one device would have.
func (p *pipeRun) end() {
	p.st.ReduceHeadGrad()
	if b := p.st.HeadCopyBytes(); b > 0 && p.meas.seen > 5 {
		p.meas.headCopies += 2
		p.meas.headBytes += 2 * int64(b)
	}
}

// record adds a schedule run's measured times to the totals (after 5
// warm-up steps, like the step telemetry), and keeps the step's timeline:
// micro-step micro's runs follow one another on it.
func (p *pipeRun) record(measured bool, micro int) {
	if micro == 0 {
		p.meas.stepRuns, p.meas.stepEnd = 0, 0
		if measured {
			p.meas.timeline = p.meas.timeline[:0]
		}
	}
	if !measured {
		p.meas.actCopies0, p.meas.gradCopies0 = p.run.ActCopies, p.run.GradCopies
		return
	}
	spans := p.run.Spans
	var lo, hi float64
	for i, sp := range spans {
		if i == 0 || sp.Start < lo {
			lo = sp.Start
		}
		hi = max(hi, sp.End)
		p.meas.busy[sp.Slot.Stage] += sp.End - sp.Start
		p.meas.serial += sp.End - sp.Start
	}
	p.meas.makespan += hi - lo
	p.meas.steps++
	// On the step's timeline a run starts where the previous one ended.
	off := p.meas.stepEnd
	p.meas.stepEnd += hi - lo
	for _, sp := range spans {
		kind := "fwd"
		if sp.Slot.Kind == pipeline.Backward {
			kind = "bwd"
		}
		p.meas.timeline = append(p.meas.timeline, TimelineSlot{Stage: sp.Slot.Stage, Kind: kind, Micro: p.meas.stepRuns*p.micros + sp.Slot.Micro,
			StartMs: 1000 * (off + sp.Start - lo), EndMs: 1000 * (off + sp.End - lo)})
	}
	p.meas.stepRuns++
}

// evalLoss is the model's loss through the stages, for evaluation: each
// batch whole (no micro-batches), stage after stage on this goroutine, in
// each stage's program. x and y are on the first stage's device; the
// head's copy of the embedding must be in sync (SyncHead). It runs inside
// steps of every stage's program, with gradients off (see estimateLoss).
func (p *pipeRun) evalLoss(x, y *tensor.Tensor) (loss *tensor.Tensor) {
	h := x
	for st, d := range p.devs {
		p.progs[st].Autocast(p.dt, func() { h = p.st.Forward(st, h.To(d), 0) })
	}
	p.progs[len(p.progs)-1].Autocast(p.dt, func() { loss = tensor.CrossEntropy(h, y.To(h.Device())) })
	return loss
}

// programs are the tensor programs a run drives: the default program on
// one device, one per stage with a pipeline. Their methods nest a
// program-level scope over all of them, on the calling goroutine.
type programs []*tensor.Program

// nest runs fn inside in(p, ...) for every program p, one inside the other.
func (ps programs) nest(in func(p *tensor.Program, fn func()), fn func()) {
	if len(ps) == 0 {
		fn()
		return
	}
	in(ps[0], func() { ps[1:].nest(in, fn) })
}

// step runs fn in a step of every program.
func (ps programs) step(fn func()) { ps.nest((*tensor.Program).Step, fn) }

// noGrad runs fn with gradient recording off in every program.
func (ps programs) noGrad(fn func()) { ps.nest((*tensor.Program).NoGrad, fn) }

// autocast runs fn under Autocast(dt) in every program.
func (ps programs) autocast(dt tensor.DType, fn func()) {
	ps.nest(func(p *tensor.Program, fn func()) { p.Autocast(dt, fn) }, fn)
}

// PipelineReport is pipeline.json: the schedule, and the stage times
// measured over the run's steps (after 5 warm-up steps).
type PipelineReport struct {
	Devices  []string `json:"devices"`
	Blocks   [][2]int `json:"blocks"` // [lo, hi) per stage
	Schedule string   `json:"schedule"`
	Micro    int      `json:"micro_batches"`
	Rows     int      `json:"micro_batch_rows"`
	// ScheduleBubble is the schedule's own bubble: idle slots over all
	// slots when every forward and backward pass takes one unit,
	// (S-1)/(M+S-1) for GPipe and 1F1B.
	ScheduleBubble float64 `json:"schedule_bubble"`
	// The stages run at the same time, each on its own goroutine.
	// StageBusyMs is each stage's forward and backward time per schedule
	// run (one per micro-step); MakespanMs a run's wall time, from its
	// first slot's start to its last slot's end; SerialMs the sum of every
	// slot's time (what one goroutine would have taken). MeasuredBubble
	// is 1 - Σ busy / (S × makespan), the stages' mean idle share, and
	// Utilisation each stage's busy / makespan.
	StageBusyMs    []float64 `json:"stage_busy_ms"`
	MakespanMs     float64   `json:"makespan_ms"`
	SerialMs       float64   `json:"serial_ms"`
	MeasuredBubble float64   `json:"measured_bubble"`
	Utilisation    []float64 `json:"utilisation"`
	// AllBusyShare is the share of the last measured step's wall time in
	// which every stage was busy at once (from Timeline).
	AllBusyShare float64 `json:"all_busy_share"`
	// Copies between devices per optimizer step: activations forward,
	// their gradients back, and the tied weight and its gradient.
	ActCopiesPerStep  float64 `json:"activation_copies_per_step"`
	ActBytesPerStep   float64 `json:"activation_bytes_per_step"`
	GradCopiesPerStep float64 `json:"gradient_copies_per_step"`
	GradBytesPerStep  float64 `json:"gradient_bytes_per_step"`
	HeadCopiesPerStep float64 `json:"tied_weight_copies_per_step"`
	HeadBytesPerStep  float64 `json:"tied_weight_bytes_per_step"`
	// PeakMemBytes is each stage device's peak memory over the run;
	// SchedulePeakMemBytes its peak during the measured schedule runs
	// (weights, gradients, optimizer state and the micro-batches in
	// flight: where 1F1B, holding at most S, saves against GPipe's M).
	PeakMemBytes         []int64 `json:"peak_mem_bytes"`
	SchedulePeakMemBytes []int64 `json:"schedule_peak_mem_bytes"`
	Runs                 int     `json:"measured_runs"`
	Note                 string  `json:"note"`
	// Timeline is the last measured optimizer step, slot by slot, on one
	// clock (ms from the step's first slot): a micro-step's schedule run
	// follows the previous one's, and micro counts across them.
	Timeline []TimelineSlot `json:"timeline"`
}

// TimelineSlot is one stage's forward or backward pass of one
// micro-batch on the step's timeline.
type TimelineSlot struct {
	Stage   int     `json:"stage"`
	Kind    string  `json:"kind"` // fwd or bwd
	Micro   int     `json:"micro"`
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
}

// AllBusy returns the share of the timeline's span (first start to last
// end) in which all of stages stages are busy at once.
func AllBusy(tl []TimelineSlot, stages int) float64 {
	if len(tl) == 0 || stages <= 0 {
		return 0
	}
	type edge struct {
		t     float64
		stage int
		delta int
	}
	var edges []edge
	lo, hi := tl[0].StartMs, tl[0].EndMs
	for _, e := range tl {
		edges = append(edges, edge{e.StartMs, e.Stage, 1}, edge{e.EndMs, e.Stage, -1})
		lo, hi = min(lo, e.StartMs), max(hi, e.EndMs)
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta < edges[j].delta // an end before a start at the same instant
	})
	active := make([]int, stages)
	busy, all := 0, 0.0
	for i, e := range edges {
		if i > 0 && busy == stages {
			all += e.t - edges[i-1].t
		}
		if active[e.stage] == 0 && e.delta > 0 {
			busy++
		}
		active[e.stage] += e.delta
		if active[e.stage] == 0 && e.delta < 0 {
			busy--
		}
	}
	if hi <= lo {
		return 0
	}
	return all / (hi - lo)
}

// report summarises the measured steps.
func (p *pipeRun) report() PipelineReport {
	sch := p.run.Schedule
	S := len(p.devs)
	rep := PipelineReport{Schedule: sch.Name, Micro: p.micros, Rows: p.rows, ScheduleBubble: sch.Bubble(),
		Blocks: p.st.Ranges, Runs: p.meas.steps, StageBusyMs: make([]float64, S), Utilisation: make([]float64, S),
		Timeline: p.meas.timeline, AllBusyShare: AllBusy(p.meas.timeline, S)}
	for _, d := range p.devs {
		rep.Devices = append(rep.Devices, d.String())
		rep.PeakMemBytes = append(rep.PeakMemBytes, p.peakMem(d))
	}
	rep.SchedulePeakMemBytes = p.meas.schedPeak
	rep.Note = "each stage ran on its own goroutine, with its own tensor program, at the same time as the others; the busy times and the timeline are host wall times"
	if p.meas.steps == 0 {
		return rep
	}
	n := float64(p.meas.steps)
	for i, b := range p.meas.busy {
		rep.StageBusyMs[i] = 1000 * b / n
		rep.Utilisation[i] = b / p.meas.makespan
		rep.MeasuredBubble += b
	}
	rep.MeasuredBubble = 1 - rep.MeasuredBubble/(float64(S)*p.meas.makespan)
	rep.MakespanMs = 1000 * p.meas.makespan / n
	rep.SerialMs = 1000 * p.meas.serial / n
	steps := n / float64(p.r.cfg.GradAccum)
	act := float64(p.run.ActCopies - p.meas.actCopies0)
	grad := float64(p.run.GradCopies - p.meas.gradCopies0)
	per := float64(p.rows * p.r.cfg.BlockSize * p.r.cfg.NEmbd * 4)
	rep.ActCopiesPerStep, rep.ActBytesPerStep = act/steps, act*per/steps
	rep.GradCopiesPerStep, rep.GradBytesPerStep = grad/steps, grad*per/steps
	rep.HeadCopiesPerStep, rep.HeadBytesPerStep = float64(p.meas.headCopies)/steps, float64(p.meas.headBytes)/steps
	return rep
}

// finish prints and writes the pipeline report and gathers the model on
// the CPU, where a result's model is used (sampling) without the stages.
func (p *pipeRun) finish() error {
	rep := p.report()
	fmt.Fprintf(p.r.log, "pipeline: %s, %d stages, %d micro-batches: schedule bubble %.3f, measured bubble %.3f (%d runs); all stages busy at once %.0f%% of the last step\n",
		rep.Schedule, len(rep.Devices), rep.Micro, rep.ScheduleBubble, rep.MeasuredBubble, rep.Runs, 100*rep.AllBusyShare)
	for i, d := range rep.Devices {
		fmt.Fprintf(p.r.log, "pipeline: stage %d (%s): busy %.2f ms per run, utilisation %.1f%%\n", i, d, rep.StageBusyMs[i], 100*rep.Utilisation[i])
	}
	fmt.Fprintf(p.r.log, "pipeline: per step %.0f activation copies (%.0f bytes), %.0f gradient copies (%.0f bytes), %.0f tied-weight copies (%.0f bytes)\n",
		rep.ActCopiesPerStep, rep.ActBytesPerStep, rep.GradCopiesPerStep, rep.GradBytesPerStep, rep.HeadCopiesPerStep, rep.HeadBytesPerStep)
	fmt.Fprintf(p.r.log, "pipeline: note: %s\n", rep.Note)
	if p.r.cfg.Rank == 0 { // rank 0 writes the group's files
		if err := writeJSON(filepath.Join(p.r.cfg.Out, PipelineFile), rep); err != nil {
			return err
		}
	}
	err := tensor.Catch(func() { p.st.Gather(tensor.CPU) })
	p.close()
	return err
}

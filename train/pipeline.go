package train

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/pipeline"
	"github.com/fleetml/fleet/tensor"
)

// PipelineFile is where a pipelined run writes its pipeline report.
const PipelineFile = "pipeline.json"

// pipeRun is a run's pipeline parallelism (--pipeline): the model's
// blocks on several devices, each batch cut into micro-batches that a
// schedule runs through the stages, one optimizer step per batch.
type pipeRun struct {
	r      *run
	devs   []tensor.Device
	st     *model.Staged
	run    *pipeline.Runner
	micros int
	rows   int // rows per micro-batch
	x, y   *tensor.Tensor
	loss   float64 // this micro-step's loss, the mean of its micro-batches'
	scale  float32 // what each micro-batch's loss is multiplied by before backward
	dt     tensor.DType

	// over the measured steps
	seen        int       // step calls
	steps       int       // measured schedule runs
	busy        []float64 // seconds per stage
	makespan    float64
	serial      float64
	slotSum     map[pipeline.Slot]float64
	headCopies  int64 // tied-weight copies: the weight to the last stage, its gradient back
	headBytes   int64
	actCopies0  int64
	gradCopies0 int64
}

// validatePipeline checks the pipeline settings that need no data.
func (c Config) validatePipeline() error {
	if c.Pipeline == "" {
		if c.MicroBatches > 1 || c.PipelineSplit != "" || c.PipelineSchedule != "" {
			return fmt.Errorf("--micro-batches, --pipeline-split and --pipeline-schedule need --pipeline")
		}
		return nil
	}
	devs, err := parsePipeline(c.Pipeline)
	if err != nil {
		return err
	}
	m := max(c.MicroBatches, 1)
	switch {
	case c.MicroBatches < 0:
		return fmt.Errorf("--micro-batches must be positive, got %d", c.MicroBatches)
	case c.BatchAuto:
		return fmt.Errorf("--batch-size auto cannot be combined with --pipeline yet; give a batch size")
	case c.BatchSize%m != 0:
		return fmt.Errorf("--batch-size %d is not a multiple of --micro-batches %d", c.BatchSize, m)
	case c.TensorBoard != "":
		return fmt.Errorf("--pipeline with --tensorboard is not supported yet (its samples run the model on one device)")
	}
	if _, err := pipeline.New(c.PipelineSchedule, len(devs), m); err != nil {
		return err
	}
	if c.PipelineSplit != "" {
		if _, err := pipeline.ParseSplit(c.PipelineSplit, len(devs), c.NLayer); err != nil {
			return err
		}
	}
	return nil
}

// parsePipeline reads --pipeline: devices separated by commas.
func parsePipeline(s string) ([]tensor.Device, error) {
	var devs []tensor.Device
	seen := map[tensor.Device]bool{}
	for _, name := range strings.Split(s, ",") {
		d, err := backend.ParseDevice(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("--pipeline %s: %w", s, err)
		}
		if seen[d] {
			return nil, fmt.Errorf("--pipeline %s names %v twice", s, d)
		}
		seen[d] = true
		devs = append(devs, d)
	}
	return devs, nil
}

// stageCounts splits the model's blocks over the stages: --pipeline-split,
// or by parameter count (the first stage also holds the embeddings, the
// last the final LayerNorm and the copy of the tied head).
func stageCounts(cfg Config, m *model.GPT, stages int) ([]int, error) {
	if cfg.PipelineSplit != "" {
		return pipeline.ParseSplit(cfg.PipelineSplit, stages, len(m.Blocks))
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
		layers[i] = count(b.LN1.Parameters()) + count(b.Attn.Parameters()) + count(b.LN2.Parameters()) + count(b.MLP.Parameters())
	}
	first := count([]*nn.Parameter{m.WTE.W, m.WPE.W})
	last := count(m.LNF.Parameters())
	if stages > 1 {
		last += float64(m.WTE.W.T.Numel())
	}
	return pipeline.Balance(layers, stages, first, last), nil
}

// newPipeRun places r's model on the --pipeline devices. It runs before
// the optimizer is made, so its moments live with their parameters.
func newPipeRun(r *run) (*pipeRun, error) {
	cfg := r.cfg
	devs, err := parsePipeline(cfg.Pipeline)
	if err != nil {
		return nil, err
	}
	for _, d := range devs {
		if _, err := backend.Get(d); err != nil {
			return nil, fmt.Errorf("--pipeline: %w", err)
		}
	}
	counts, err := stageCounts(cfg, r.model, len(devs))
	if err != nil {
		return nil, err
	}
	p := &pipeRun{r: r, devs: devs, micros: max(cfg.MicroBatches, 1), dt: cfg.ProductDType(),
		busy: make([]float64, len(devs)), slotSum: map[pipeline.Slot]float64{}}
	p.rows = cfg.BatchSize / p.micros
	sch, err := pipeline.New(cfg.PipelineSchedule, len(devs), p.micros)
	if err != nil {
		return nil, err
	}
	if p.st, err = r.model.Place(devs, counts); err != nil {
		return nil, err
	}
	p.run = &pipeline.Runner{Schedule: sch, Devices: devs, Input: p.input, Forward: p.forward, Loss: p.lossOf, Before: p.before}
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

func (p *pipeRun) input(m int) *tensor.Tensor {
	return p.x.Rows(m*p.rows, (m+1)*p.rows).To(p.devs[0])
}

func (p *pipeRun) forward(st, m int, x *tensor.Tensor) (out *tensor.Tensor) {
	tensor.Autocast(p.dt, func() { out = p.st.Forward(st, x, m*p.rows) })
	return out
}

func (p *pipeRun) lossOf(m int, logits *tensor.Tensor) (loss *tensor.Tensor) {
	y := p.y.Rows(m*p.rows, (m+1)*p.rows).To(logits.Device())
	tensor.Autocast(p.dt, func() { loss = tensor.CrossEntropy(logits, y) })
	p.loss += float64(loss.Item()) / float64(p.micros)
	return tensor.Scale(loss, p.scale)
}

func (p *pipeRun) before(sl pipeline.Slot) {
	if sl.Kind == pipeline.Forward {
		p.r.tel.to(phForward)
	} else {
		p.r.tel.to(phBackward)
	}
}

// beginStep prepares an optimizer step: the head's copy of the tied
// embedding takes the weights the last step left.
func (p *pipeRun) beginStep() {
	p.st.SyncHead()
	p.seen++
}

// microStep is run.microStep for a pipelined model: the schedule runs the
// micro-step's batch x, y through the stages in p.micros micro-batches,
// each micro-batch's loss scaled by 1/(M × GradAccum) (and fp16's loss
// scale), so the gradients are those of the whole batch. It returns the
// mean of the micro-batches' losses.
func (p *pipeRun) microStep(step, micro int, x, y *tensor.Tensor) float64 {
	r := p.r
	cfg := r.cfg
	p.x, p.y = x, y
	p.scale = 1 / float32(p.micros*cfg.GradAccum)
	if r.scaler != nil {
		p.scale *= r.scaler.Scale
	}
	p.st.SetDropout(r.dropoutSeed(step, micro), cfg.BatchSize)
	p.loss = 0
	tensor.Step(p.run.Run)
	p.record(p.seen > 5)
	p.x, p.y = nil, nil
	return p.loss
}

// endStep adds the tied head's gradient into the embedding's, so that
// clipping and AdamW see the gradients one device would have.
func (p *pipeRun) endStep() {
	p.st.ReduceHeadGrad()
	if b := p.st.HeadCopyBytes(); b > 0 && p.seen > 5 {
		p.headCopies += 2
		p.headBytes += 2 * int64(b)
	}
}

// record adds a schedule run's slot times to the totals (after 5 warm-up
// steps, like the step telemetry).
func (p *pipeRun) record(measured bool) {
	if !measured {
		p.actCopies0, p.gradCopies0 = p.run.ActCopies, p.run.GradCopies
		return
	}
	s := p.run.Stats()
	p.steps++
	for i, b := range s.Busy {
		p.busy[i] += b
	}
	p.makespan += s.Makespan
	p.serial += s.Serial
	for sl, t := range p.run.SlotTime {
		p.slotSum[sl] += t
	}
}

// evalLoss is the model's loss through the stages, for evaluation: each
// batch whole (no micro-batches). x and y are on the first stage's device;
// the head's copy of the embedding must be in sync (SyncHead).
func (p *pipeRun) evalLoss(x, y *tensor.Tensor) *tensor.Tensor {
	h := x
	for st, d := range p.devs {
		h = p.st.Forward(st, h.To(d), 0)
	}
	return tensor.CrossEntropy(h, y.To(h.Device()))
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
	// StageBusyMs is each stage's forward and backward time per schedule
	// run (one per micro-step); MakespanMs the length of a run laid on
	// the schedule's timeline with those slot times, as if the stages ran
	// concurrently; SerialMs the time the slots took one after another,
	// as they ran here. MeasuredBubble is 1 - Σ busy / (S × makespan) and
	// Utilisation each stage's busy / makespan.
	StageBusyMs    []float64 `json:"stage_busy_ms"`
	MakespanMs     float64   `json:"makespan_ms"`
	SerialMs       float64   `json:"serial_ms"`
	MeasuredBubble float64   `json:"measured_bubble"`
	Utilisation    []float64 `json:"utilisation"`
	// Copies between devices per optimizer step: activations forward,
	// their gradients back, and the tied weight and its gradient.
	ActCopiesPerStep  float64 `json:"activation_copies_per_step"`
	ActBytesPerStep   float64 `json:"activation_bytes_per_step"`
	GradCopiesPerStep float64 `json:"gradient_copies_per_step"`
	GradBytesPerStep  float64 `json:"gradient_bytes_per_step"`
	HeadCopiesPerStep float64 `json:"tied_weight_copies_per_step"`
	HeadBytesPerStep  float64 `json:"tied_weight_bytes_per_step"`
	Runs              int     `json:"measured_runs"`
	Note              string  `json:"note"`
}

// report summarises the measured steps.
func (p *pipeRun) report() PipelineReport {
	sch := p.run.Schedule
	rep := PipelineReport{Schedule: sch.Name, Micro: p.micros, Rows: p.rows, ScheduleBubble: sch.Bubble(),
		Blocks: p.st.Ranges, Runs: p.steps, StageBusyMs: make([]float64, len(p.devs)), Utilisation: make([]float64, len(p.devs))}
	for _, d := range p.devs {
		rep.Devices = append(rep.Devices, d.String())
	}
	cpus := 0
	for _, d := range p.devs {
		if d.Kind == "cpu" {
			cpus++
		}
	}
	rep.Note = "the stages ran one slot at a time on one goroutine (the tensor package's state is process-wide); each slot was timed and the timeline of concurrent stages was laid out from those times"
	if cpus > 1 {
		rep.Note += fmt.Sprintf("; %d logical CPU devices share this machine's cores, so the busy times and utilisation are approximate", cpus)
	}
	if p.steps == 0 {
		return rep
	}
	n := float64(p.steps)
	for i, b := range p.busy {
		rep.StageBusyMs[i] = 1000 * b / n
		rep.Utilisation[i] = b / p.makespan
	}
	rep.MakespanMs = 1000 * p.makespan / n
	rep.SerialMs = 1000 * p.serial / n
	tl := sch.Simulate(func(sl pipeline.Slot) float64 { return p.slotSum[sl] })
	rep.MeasuredBubble = tl.BubbleFraction()
	steps := n / float64(p.r.cfg.GradAccum)
	act := float64(p.run.ActCopies - p.actCopies0)
	grad := float64(p.run.GradCopies - p.gradCopies0)
	per := float64(p.rows * p.r.cfg.BlockSize * p.r.cfg.NEmbd * 4)
	rep.ActCopiesPerStep, rep.ActBytesPerStep = act/steps, act*per/steps
	rep.GradCopiesPerStep, rep.GradBytesPerStep = grad/steps, grad*per/steps
	rep.HeadCopiesPerStep, rep.HeadBytesPerStep = float64(p.headCopies)/steps, float64(p.headBytes)/steps
	return rep
}

// finish prints and writes the pipeline report and gathers the model on
// the CPU, where a result's model is used (sampling) without the stages.
func (p *pipeRun) finish() error {
	rep := p.report()
	fmt.Fprintf(p.r.log, "pipeline: %s, %d stages, %d micro-batches: schedule bubble %.3f, measured bubble %.3f (%d runs)\n",
		rep.Schedule, len(rep.Devices), rep.Micro, rep.ScheduleBubble, rep.MeasuredBubble, rep.Runs)
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
	return tensor.Catch(func() { p.st.Gather(tensor.CPU) })
}

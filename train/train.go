package train

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/gpu/cuda"   // registers cuda:N and sim:NAME
	_ "github.com/fleetml/fleet/backend/gpu/opencl" // registers opencl:N
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/monitor/sysstat"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// run holds one training run's state, in parts: the data it feeds the
// step (feed), the update's clipping and loss scaling (upd), the step
// statistics on the device (stats), the captured step (g), the
// throughput figures (perf) and what the run writes as it goes (out).
type run struct {
	// simulated: the device executes nothing (a simulated GPU): losses
	// are n/a, nothing is checked for being finite, and no weights are
	// written.
	simulated  bool
	cfg        Config
	prec       config.Precision // cfg.Precision, typed once (newRun)
	log        io.Writer
	dev        tensor.Device
	model      *model.GPT
	opt        optim.Optimizer
	sched      optim.Schedule
	train      *data.Sampler
	feed       feed
	eval       struct{ train, val *data.Sampler } // the evaluations' windows of each split
	ckpt       *checkpointer
	scaler     *optim.GradScaler // loss scaling, for fp16 products; nil otherwise
	upd        updater           // clipping, fp16 loss scaling and the optimizer step; nil until the first step
	fin        stepUpdate        // the step being finished, as the group is handed it
	stats      deviceStats
	g          graphStep
	tel        *telemetry // step phase timing; nil: off
	perf       perf
	out        outputs
	grp        group      // data parallelism; nil: this process alone
	multi      microSteps // --pipeline's stages or --replicas; nil: the model's one device
	at         int        // the step the loop is at
	evaluating bool       // the loop is evaluating
}

// feed is how a run's micro-batches reach the device.
type feed struct {
	// batch fills x and y with micro-batch micro of a step; it defaults to
	// the loader's, which deals out the train sampler's windows (tests
	// replay fixed batches). It is also asked for the micro-batch after
	// the one being trained (a prefetch), which may lie past the last step.
	batch    func(step, micro int, x, y []int32)
	loader   *data.Loader
	vocab    int     // ids must be below it
	checkIDs bool    // the loader checks the ids (they come from files)
	staged   batches // micro-batches on the device, the next one prefetched
	opened   bool
	fill     filler        // batch, or the loader's, timed
	wait     time.Duration // time spent in fill, in all
}

// deviceStats are the step statistics on the device that computes the
// loss (tensor.NewStats): the loss summed since the last check and the
// first steps whose loss or gradients were not finite. The loop reads
// them only at read points (log lines, evaluations, checkpoints, a stop),
// so that a step reads nothing back.
type deviceStats struct {
	buf *tensor.Tensor
	// lossSum is buf's first element (a view), host where reads of buf
	// land.
	lossSum *tensor.Tensor
	host    [tensor.StatsLen]float32
	// at is the step count at the last check, lastLoss the mean loss it
	// read (this rank's); loggedLoss is the loss the last log line showed
	// (the group's mean over its steps).
	at                   int
	lastLoss, loggedLoss float64
}

// graphStep is the captured step (--cuda-graphs).
type graphStep struct {
	// exec is launched for every step after warm plain ones; in the
	// batch buffers it reads, one pair per micro-step; sched AdamW's
	// constants the step clock writes (the updater's clock).
	exec backend.Graph
	in   [][2]*tensor.Tensor
	warm int
	// dropKey is the captured step's dropout key, two I32 hashed on the
	// device every step (tensor.StepDropoutKey), which every micro-step
	// reads.
	dropKey *tensor.Tensor
}

// perf are the run's throughput figures for its summary.
type perf struct {
	measured int // steps counted in the telemetry totals
	// peakFLOPs is the device's peak for the run's products (0: unknown);
	// flopsPerToken the model's training FLOPs per token.
	peakFLOPs, flopsPerToken float64
	meanStepMs               float64 // over the steps telemetry measured, all phases
	commOverlappedMs         float64 // data parallelism: all-reduce time hidden behind backward, per step
}

// outputs are what a run writes as it goes besides its files.
type outputs struct {
	metrics bytes.Buffer     // metrics.jsonl's lines
	status  *statusLine      // the live line on a terminal; nil: none
	sampler *sysstat.Sampler // device utilisation in the background; nil: none
	sinks   *sinks           // TensorBoard and Prometheus; nil: neither
}

// newRun is a run of cfg on dev that logs to log: its precision typed
// once, and fp16's loss scaler where the precision scales the loss. The
// rest (model, optimizer, data) its maker fills in.
func newRun(cfg Config, dev tensor.Device, log io.Writer) *run {
	prec, _ := config.ParsePrecision(cfg.Precision) // (Validate refuses the others)
	r := &run{cfg: cfg, prec: prec, dev: dev, log: log}
	if prec.LossScaled() {
		r.scaler = optim.NewGradScaler()
	}
	return r
}

// close releases the staging slots, stops the loader, closes the
// TensorBoard and Prometheus sinks and gives the pipeline stages' devices
// back to the default program.
func (r *run) close() {
	r.tel.drop() // marks of steps a failed run never read
	if err := r.out.sinks.close(r.log); err != nil {
		fmt.Fprintf(r.log, "warning: %v\n", err)
	}
	r.out.sinks = nil
	r.stopSampler(nil)
	r.group().Close()
	r.grp = nil
	r.feed.staged.close()
	if r.feed.loader != nil {
		r.feed.loader.Close()
		r.feed.loader = nil
	}
	r.micros().close()
	if r.g.exec != nil {
		if err := r.g.exec.Free(); err != nil && r.log != nil {
			fmt.Fprintf(r.log, "warning: freeing the step's graph: %v\n", err)
		}
		r.g.exec = nil
	}
}

// Run trains a model as cfg says, printing progress to log: it settles
// the run (its plan, its job, its folder, the checkpoint it resumes, its
// data), builds it (model, stages, optimizer), restores the checkpoint,
// joins the data-parallel group, trains, and writes the final files.
func Run(cfg Config, log io.Writer) (res *Result, err error) {
	s := &setup{log: log}
	defer func() { s.release(err) }()
	if err := s.settle(cfg); err != nil {
		return nil, err
	}
	r, err := s.build()
	defer r.out.status.done()
	defer r.close()
	if err != nil {
		return nil, err
	}
	sum := r.summary(s.ds)
	start, err := s.resume(r, &sum)
	if err != nil {
		return nil, err
	}
	if err := r.openSinks(s.tok); err != nil {
		return nil, err
	}
	if err := s.joinGroup(r); err != nil {
		return nil, err
	}
	r.startSampler()
	if err := r.trainFrom(&sum, start); err != nil {
		return nil, err
	}
	if err := r.jobSummary(&sum); err != nil {
		return nil, err
	}
	if err := r.finish(sum); err != nil {
		return nil, err
	}
	return &Result{Dir: r.cfg.Out, Model: r.model, Tokenizer: s.tok, Summary: sum}, nil
}

// trainFrom runs the loop from step start, saying when a failed op (out of
// memory, a lost device) failed.
func (r *run) trainFrom(sum *Summary, start int) (err error) {
	if cerr := tensor.Catch(func() { err = r.loop(sum, start) }); cerr != nil {
		what := fmt.Sprintf("step %d", r.at+1)
		if r.evaluating {
			what = fmt.Sprintf("the evaluation at step %d", r.at)
		}
		return fmt.Errorf("%s: %w", what, cerr)
	}
	if err != nil {
		return err
	}
	return r.micros().finish()
}

// finish writes the run's final files, rank 0's: the weights (none on a
// simulated GPU), summary.json and the diagnosis.
func (r *run) finish(sum Summary) error {
	if r.cfg.Rank != 0 {
		return nil
	}
	if !r.simulated {
		if err := r.model.SaveWeights(filepath.Join(r.cfg.Out, ModelFile), nil); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(r.cfg.Out, SummaryFile), sum); err != nil {
		return err
	}
	return r.diagnose(sum)
}

// scheduleStep is the learning-rate schedule's position at a step: the
// steps taken, not counting those the loss scaler skipped.
func (r *run) scheduleStep(step int) int { return step - r.scaler.SkippedSteps() }

func (r *run) tokensPerStep() int {
	p, _ := r.cfg.PlanBatch() // the tokens of this process's step, as the resolved batch plans them
	return p.ProcessTokens()
}

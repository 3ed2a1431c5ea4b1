package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/cuda" // registers cuda:N
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/monitor/sysstat"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
	"github.com/fleetml/fleet/train/ddp"
)

// run holds one training run's state, in parts: the data it feeds the
// step (feed), the update's clipping and loss scaling (upd), the step
// statistics on the device (stats), the captured step (g), the
// throughput figures (perf) and what the run writes as it goes (out).
type run struct {
	// simulated: the device executes nothing (a simulated GPU): losses
	// are n/a, nothing is checked for being finite, and no weights are
	// written.
	simulated bool
	cfg       Config
	log       io.Writer
	dev       tensor.Device
	model     *model.GPT
	opt       *optim.AdamW
	sched     optim.Schedule
	train     *data.Sampler
	feed      feed
	// evalTr and evalVal draw the evaluations' windows of each split.
	evalTr, evalVal *data.Sampler
	ckpt            *checkpointer
	scaler          *optim.GradScaler // loss scaling, for fp16 products; nil otherwise
	upd             updateState
	stats           deviceStats
	g               graphStep
	tel             *telemetry // step phase timing; nil: off
	perf            perf
	out             outputs
	grp             group           // data parallelism; nil: this process alone
	pipe            *pipeRun        // --pipeline: the model's stages; nil: one device
	stages          []tensor.Device // --pipeline: the stages' devices
	at              int             // the step the loop is at
	evaluating      bool            // the loop is evaluating
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

// updateState is the update's clipping and fp16 loss scaling: on the
// device where one device computes the loss, else on the host.
type updateState struct {
	// clipAcc and clipCoef clip the gradients on the device (one device):
	// the sum of squares and the coefficient AdamW applies. nil where the
	// host clips.
	clipAcc, clipCoef *tensor.Tensor
	// With fp16 on one device the loss scaler lives on the device too:
	// scalerState (backend.ScalerStateLen elements; the host's scaler is
	// its copy as of the last read point), seed the backward pass's seed
	// (a view of it), lrs the learning-rate schedule it indexes; lrFill
	// when there is no schedule (a Stepper), whose one entry each step
	// sets to the rate it is given.
	// sched16 is the state's learning rate and AdamW constants (a view).
	scalerState, seed, sched16, lrs *tensor.Tensor
	lrFill                          bool
	// hostScaler keeps fp16's scaler on the host (as pipelines have it),
	// reading the gradient norm every step: tests hold the device's
	// scaler to it.
	hostScaler bool
	gradNorm   float64 // the last gradient norm read, before clipping
	// hostBadGrads is the first step whose gradients were not finite
	// where clipping reads the norm on the host (a loss scaler, several
	// devices); 0: none. The device path keeps it in stats.
	hostBadGrads int
	// step, lr and hook are the step being updated, its learning rate
	// and the hook to run before the update (stepUpdate's).
	step int
	lr   float64
	hook func()
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
	// read.
	at       int
	lastLoss float64
}

// graphStep is the captured step (--cuda-graphs).
type graphStep struct {
	// exec is launched for every step after warm plain ones; in the
	// batch buffers it reads, one pair per micro-step; sched AdamW's
	// constants the step clock writes (fp16's scaler writes its own).
	exec  backend.Graph
	in    [][2]*tensor.Tensor
	sched *tensor.Tensor
	warm  int
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

// Run trains a model as cfg says, printing progress to log.
func Run(cfg Config, log io.Writer) (res *Result, err error) {
	var initFile *checkpoint.File
	if cfg.InitFrom != "" {
		if initFile, err = initFrom(&cfg); err != nil {
			return nil, err
		}
	}
	plan, err := config.Resolve(cfg)
	if err != nil {
		return nil, err
	}
	cfg, place := plan.Config, plan.Place
	dev := place.Device
	if cfg.Resume && simulated(dev) {
		return nil, setting.Errorf("{Resume}: a run on a simulated GPU (%v) saves no checkpoints to resume", dev)
	}
	// The ranks of a job join their store first: rank 0 decides the run's
	// folder, and every rank compares its settings with rank 0's, before
	// any rank writes.
	var store *dist.Store
	agreed := false
	if cfg.WorldSize > 1 {
		if store, err = ddp.Join(cfg, log); err != nil {
			return nil, err
		}
		defer func() {
			if store == nil {
				return // the ddp owns it
			}
			if err != nil && !agreed {
				postFailure(store, cfg.Rank, err)
			}
			store.Close()
		}()
	}
	cpuBF16 := plan.Precision == config.BF16 && plan.OnCPU()
	out, err := shareOut(store, cfg, cpuBF16)
	if err != nil {
		return nil, err
	}
	if cfg.Out == "" { // a folder rank 0 chose; a given --out stays this rank's own
		cfg.Out = out.Dir
	}
	if out.Note != "" && cfg.Rank == 0 {
		fmt.Fprintln(log, out.Note)
	}
	ckRoot := filepath.Join(cfg.Out, CheckpointDir)
	var resumeDir string
	var resumeMan *checkpoint.Manifest
	if cfg.Resume {
		d, m, skipped, err := config.NewestCheckpoint(ckRoot)
		if err != nil {
			return nil, err
		}
		for _, e := range skipped {
			fmt.Fprintf(log, "skipping an incomplete or damaged checkpoint: %v\n", e)
		}
		if d == "" {
			fmt.Fprintf(log, "resume: no complete checkpoint in %s; starting at step 0\n", ckRoot)
		}
		resumeDir, resumeMan = d, m
	}
	var was *config.RunConfig // the checkpoint's run, read once
	if resumeMan != nil {
		was = new(config.RunConfig)
		if err := json.Unmarshal(resumeMan.Config, was); err != nil {
			return nil, fmt.Errorf("resume from %s: its config: %w", resumeDir, err)
		}
	}
	if cfg.Elastic && was != nil {
		if err := config.KeepGlobalBatch(&cfg, *was, log); err != nil {
			return nil, err
		}
	}
	ds, err := openData(cfg)
	if err != nil {
		return nil, err
	}
	defer ds.close()
	if cfg.BatchAuto {
		if err := autoBatch(&cfg, ds.vocab, dev, resumeMan, log); err != nil {
			return nil, err
		}
	}
	tok, err := ds.tokenizer()
	if err != nil {
		return nil, err
	}
	if cpuBF16 {
		if err := config.SettleCPUBF16(&cfg, out, resumeDir, was, setBF16Product, log); err != nil {
			return nil, err
		}
	} else {
		cfg.CPUBF16 = "" // no bf16 product runs on the CPU: none is recorded
	}
	rc := config.RunConfig{Train: cfg, Model: cfg.ModelConfig(ds.vocab), DataID: ds.id,
		TokenizerID: config.TokenizerIdentity(tok, ds.tokenizerDesc())}
	if was != nil {
		if err := checkResume(&rc, *was, resumeDir, resumeMan.Step, log); err != nil {
			return nil, err
		}
	}
	if store != nil {
		err := agreeSettings(store, cfg.Rank, rc.Settings())
		agreed = true
		if err != nil {
			return nil, err
		}
	}
	if cfg.Rank == 0 { // the other ranks of a data-parallel job write nothing
		dir, created, merr := config.MakeOut(out)
		if merr == nil && dir != cfg.Out { // another run took the number meanwhile
			fmt.Fprintf(log, "run folder: %s (another run took %s meanwhile)\n", dir, cfg.Out)
			cfg.Out, rc.Train.Out = dir, dir
		}
		if created {
			defer func() {
				if err != nil {
					os.Remove(cfg.Out) // only if still empty: a run that wrote nothing leaves no folder
				}
			}()
		}
		if merr != nil {
			return nil, merr
		}
	}
	r := &run{cfg: cfg, log: log, dev: dev, stages: place.Stages, feed: feed{checkIDs: ds.checkIDs}, simulated: simulated(dev)}
	if r.simulated && cfg.Rank == 0 {
		fmt.Fprintf(log, "simulated GPU: %v executes nothing; losses are n/a, times are the host's, and no weights are written\n", dev)
	}
	if cfg.Rank == 0 {
		r.out.status = newStatusLine(log) // one live line for the group
	}
	if r.out.status != nil {
		r.log, log = r.out.status, r.out.status
		defer r.out.status.done()
	}
	if r.train, err = data.NewTokenSampler(ds.train, cfg.BlockSize, cfg.Seed, data.StreamTrain); err != nil {
		return nil, fmt.Errorf("train split: %w", err)
	}
	if r.evalVal, err = data.NewTokenSampler(ds.val, cfg.BlockSize, cfg.Seed, data.StreamEvalVal); err != nil {
		return nil, fmt.Errorf("validation split: %w", err)
	}
	r.evalTr, _ = data.NewTokenSampler(ds.train, cfg.BlockSize, cfg.Seed, data.StreamEvalTrain)
	r.feed.vocab = ds.vocab

	mc := cfg.ModelConfig(ds.vocab)
	if r.model, err = model.New(mc, dev, cfg.Seed); err != nil {
		return nil, err
	}
	r.model.SetRecompute(cfg.Recompute)
	if initFile != nil {
		if err := r.model.SetWeights(initFile); err != nil {
			return nil, setting.Errorf("{InitFrom} %s: %w", cfg.InitFrom, err)
		}
		fmt.Fprintf(log, "init: weights from %s\n", cfg.InitFrom)
	}
	if len(r.stages) > 0 { // before the optimizer: its moments live with their parameters
		if r.pipe, err = newPipeRun(r); err != nil {
			return nil, err
		}
		defer r.pipe.close()
	}
	if cfg.Rank == 0 { // the other ranks of a data-parallel job write nothing
		if err := writeJSON(filepath.Join(cfg.Out, ConfigFile), rc); err != nil {
			return nil, err
		}
		if err := ds.saveTokenizer(cfg.Out); err != nil {
			return nil, err
		}
	}
	if err := tensor.Catch(func() { // its moments are the run's largest allocation
		r.opt = optim.NewAdamW(r.model.Parameters(), optim.AdamWConfig{
			LR: float32(cfg.LR), Beta1: float32(cfg.Beta1), Beta2: float32(cfg.Beta2), WeightDecay: float32(cfg.WeightDecay)})
	}); err != nil {
		return nil, fmt.Errorf("optimizer state: %w", err)
	}
	r.sched = optim.Schedule{LR: cfg.LR, MinLR: cfg.MinLR, WarmupIters: cfg.WarmupIters, DecayIters: cfg.DecayIters()}
	r.scaler = lossScaler(cfg)
	r.tel = newTelemetry(dev)
	r.perf.flopsPerToken = r.model.FLOPsPerToken(cfg.BlockSize)
	var peakSrc string
	r.perf.peakFLOPs, peakSrc = peakFLOPs(dev, cfg.ProductDType())

	fmt.Fprintf(log, "data: %s\n", ds.desc)
	fmt.Fprintf(log, "tokens: %d train, %d val, vocabulary %d (%s)\n", ds.train.Len(), ds.val.Len(), ds.vocab, ds.tokenizerDesc())
	fmt.Fprintf(log, "model: %d layers, %d heads, %d embd, block %d, %.2fM parameters, on %v\n",
		mc.NLayer, mc.NHead, mc.NEmbd, mc.BlockSize, float64(r.model.NumParams())/1e6, dev)
	fmt.Fprintf(log, "batch: micro-batch %d × %d tokens, %d accumulation steps, world %d: %d tokens per step\n",
		cfg.BatchSize, cfg.BlockSize, cfg.GradAccum, max(cfg.WorldSize, 1), r.tokensPerStep()*max(cfg.WorldSize, 1))
	if cfg.Recompute {
		fmt.Fprintf(log, "recompute: on: each block is recomputed in the backward pass (less memory, more time)\n")
	}
	if r.scaler != nil {
		fmt.Fprintf(log, "precision: fp16 products with dynamic loss scaling (initial scale %g, ×%d after %d clean steps, ×%g on inf or NaN gradients, whose steps are skipped)\n",
			r.scaler.Scale, optim.ScalerGrowth, r.scaler.GrowthInterval, optim.ScalerBackoff)
		if onHost(dev) {
			fmt.Fprintf(log, "precision: the CPU has no fp16 products; they are emulated (f16 operands widened to f32) and slower than fp32\n")
		}
	}

	sum := Summary{Config: cfg, Model: mc, Device: dev.String(), NumParams: r.model.NumParams(), Data: ds.desc,
		TrainTokens: ds.train.Len(), ValTokens: ds.val.Len(), BestValLoss: math.Inf(1),
		FLOPsPerToken: r.perf.flopsPerToken, PeakFLOPs: r.perf.peakFLOPs, PeakSource: peakSrc, Simulated: r.simulated}
	if r.simulated {
		sum.BestValLoss = 0 // no loss: see Summary.Simulated
	}
	if r.ckpt, err = newCheckpointer(r, rc); err != nil {
		return nil, err
	}
	start := 0
	if resumeDir != "" {
		if cerr := tensor.Catch(func() { start, sum.BestValLoss, err = r.restore(resumeDir, resumeMan) }); cerr != nil {
			return nil, fmt.Errorf("resume: %w", cerr)
		}
		if err != nil {
			return nil, err
		}
		if start > cfg.MaxIters {
			return nil, setting.Errorf("resume: checkpoint %s is at step %d, past {MaxIters} %d", resumeDir, start, cfg.MaxIters)
		}
		r.keepMetrics(start)
		r.ckpt.last, r.ckpt.lastStep = resumeDir, start
		sum.Steps = start
		if start == cfg.MaxIters {
			fmt.Fprintf(log, "resume: %s is the end of the run (step %d); rewriting the final files\n", resumeDir, start)
		} else {
			fmt.Fprintf(log, "resume: continuing from %s at step %d\n", resumeDir, start)
		}
	}
	if err := r.openSinks(tok); err != nil {
		return nil, err
	}
	defer r.close()
	if store != nil {
		s := store
		store = nil // the ddp owns it from here
		if cerr := tensor.Catch(func() { err = r.openDDP(s) }); cerr != nil {
			return nil, cerr
		}
		if err != nil {
			return nil, err
		}
	}
	if cfg.Rank != 0 { // rank 0 logs for the group
		fmt.Fprintf(log, "rank %d: training quietly; rank 0 logs and saves for the group\n", cfg.Rank)
		r.log = io.Discard
	}
	r.startSampler()
	if cerr := tensor.Catch(func() { err = r.loop(&sum, start) }); cerr != nil {
		// A failed op (out of memory, a lost device): say when.
		what := fmt.Sprintf("step %d", r.at+1)
		if r.evaluating {
			what = fmt.Sprintf("the evaluation at step %d", r.at)
		}
		return nil, fmt.Errorf("%s: %w", what, cerr)
	}
	if err != nil {
		return nil, err
	}
	if err := r.micros().finish(); err != nil {
		return nil, err
	}
	if cfg.Rank != 0 {
		return &Result{Dir: cfg.Out, Model: r.model, Tokenizer: tok, Summary: sum}, nil
	}
	if !r.simulated {
		if err := r.model.SaveWeights(filepath.Join(cfg.Out, ModelFile), nil); err != nil {
			return nil, err
		}
	}
	if err := writeJSON(filepath.Join(cfg.Out, SummaryFile), sum); err != nil {
		return nil, err
	}
	if err := r.diagnose(sum); err != nil {
		return nil, err
	}
	return &Result{Dir: cfg.Out, Model: r.model, Tokenizer: tok, Summary: sum}, nil
}

// scheduleStep is the learning-rate schedule's position at a step: the
// steps taken, not counting those the loss scaler skipped.
func (r *run) scheduleStep(step int) int { return step - r.scaler.SkippedSteps() }

func (r *run) tokensPerStep() int {
	p, _ := r.cfg.PlanBatch() // the tokens of this process's step, as the resolved batch plans them
	return p.ProcessTokens()
}

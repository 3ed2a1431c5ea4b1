package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/gpu/cuda"   // registers cuda:N and sim:NAME
	_ "github.com/fleetml/fleet/backend/gpu/opencl" // registers opencl:N
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/stats"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/monitor/sysstat"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// Files a run writes in its output folder.
const (
	ConfigFile    = "config.json"
	TokenizerFile = "tokenizer.json"
	MetricsFile   = "metrics.jsonl"
	SummaryFile   = "summary.json"
	ModelFile     = "model.safetensors"
	BestFile      = "best.safetensors"
)

// RunConfig is what config.json holds: the run's settings and the model
// they built.
type RunConfig struct {
	Train Config       `json:"train"`
	Model model.Config `json:"model"`
	// DataID and TokenizerID name the run's data and tokenizer by
	// content, for --resume and the ranks of a job to compare.
	DataID      Identity `json:"data_identity"`
	TokenizerID Identity `json:"tokenizer_identity"`
	// History lists the resumes that changed settings (--allow-changes),
	// oldest first.
	History []Resumption `json:"history,omitempty"`
}

// Summary is summary.json.
type Summary struct {
	// Simulated says the run was on a simulated GPU (--device sim:NAME):
	// its times are the host's, its losses mean nothing (0 here), and it
	// wrote no weights.
	Simulated      bool    `json:"simulated,omitempty"`
	BestValLoss    float64 `json:"best_val_loss"`
	FinalValLoss   float64 `json:"final_val_loss"`
	FinalTrainLoss float64 `json:"final_train_loss"`
	ValPerplexity  float64 `json:"val_perplexity"`
	// TokensPerSec is the median over optimizer steps (skipping the first
	// 5) of each step's tokens / its time, evaluation excluded.
	TokensPerSec float64 `json:"tokens_per_sec"`
	MsPerStep    float64 `json:"ms_per_step"`
	// DataWaitMs is the median over the same steps of the time each step
	// waited for data; DataWaitShare is the total wait over the total
	// step time.
	DataWaitMs    float64 `json:"data_wait_ms"`
	DataWaitShare float64 `json:"data_wait_share"`
	// MFU is model FLOPs utilisation at the median rate: FLOPsPerToken ×
	// TokensPerSec ÷ PeakFLOPs (the device's peak for the run's products:
	// a data-sheet figure for GPUs, measured on the CPU; 0 if unknown).
	MFU           float64 `json:"mfu"`
	FLOPsPerToken float64 `json:"flops_per_token"`
	PeakFLOPs     float64 `json:"peak_flops"`
	PeakSource    string  `json:"peak_source,omitempty"`
	// PhaseMs is the mean ms per step of each phase (PhaseNames) over the
	// measured steps; HostReadsPerStep the host's reads of device values
	// per step; CopiedBytesPerStep the host<->device bytes per step.
	PhaseMs            map[string]float64 `json:"phase_ms,omitempty"`
	HostReadsPerStep   float64            `json:"host_reads_per_step"`
	CopiedBytesPerStep float64            `json:"copied_bytes_per_step"`
	PeakMemBytes       int64              `json:"peak_mem_bytes"`
	// UtilMeanPct and UtilPeakPct are the device's utilisation sampled in
	// the background (the process's CPU use over its cores on the CPU).
	UtilMeanPct float64 `json:"util_mean_pct"`
	UtilPeakPct float64 `json:"util_peak_pct"`
	// HostBusyPct is, on the CPU, how busy all the machine's cores were
	// (every process's use).
	HostBusyPct float64 `json:"host_busy_pct,omitempty"`
	// TelemetryOverheadPct is what the step telemetry costs per step, in
	// percent of the median step, measured at the end of the run.
	TelemetryOverheadPct float64 `json:"telemetry_overhead_pct"`
	MemTotalBytes        int64   `json:"mem_total_bytes,omitempty"`
	Steps                int     `json:"steps"`
	Device               string  `json:"device"`
	NumParams            int     `json:"num_params"`
	Data                 string  `json:"data"`
	TrainTokens          int     `json:"train_tokens"`
	ValTokens            int     `json:"val_tokens"`
	ElapsedSec           float64 `json:"elapsed_sec"`
	Config               Config  `json:"config"`
	Model                model.Config
}

// Metric is one line of metrics.jsonl. Fields that are unknown at an event
// are left out.
type Metric struct {
	Step         int      `json:"step"`
	TrainLoss    *float64 `json:"train_loss,omitempty"`
	ValLoss      *float64 `json:"val_loss,omitempty"`
	Perplexity   *float64 `json:"val_perplexity,omitempty"`
	LR           *float64 `json:"lr,omitempty"`
	MsPerStep    *float64 `json:"ms_per_step,omitempty"`
	TokensPerSec *float64 `json:"tokens_per_sec,omitempty"`
	// DataWaitMs is the mean time per step the trainer waited for its
	// batches (drawing them from the loader's queue into the staging
	// memory) over the log interval.
	DataWaitMs *float64 `json:"data_wait_ms,omitempty"`
	// MFU is model FLOPs utilisation: the model's training FLOPs per token
	// × tokens/s ÷ the device's peak.
	MFU       *float64 `json:"mfu,omitempty"`
	GradNorm  *float64 `json:"grad_norm,omitempty"`  // before clipping, last step
	LossScale *float64 `json:"loss_scale,omitempty"` // fp16's loss scale
	// Mean ms per step of each phase over the log interval (PhaseNames).
	H2DMs       *float64 `json:"h2d_ms,omitempty"`
	ForwardMs   *float64 `json:"forward_ms,omitempty"`
	BackwardMs  *float64 `json:"backward_ms,omitempty"`
	CommMs      *float64 `json:"comm_ms,omitempty"`
	OptimizerMs *float64 `json:"optimizer_ms,omitempty"`
	CkptLogMs   *float64 `json:"ckpt_log_ms,omitempty"`
	// Util is the device's utilisation in percent, sampled in the
	// background over the interval; MemBytes the device memory in use and
	// MemPeakBytes the run's peak so far.
	Util         *float64 `json:"util,omitempty"`
	MemBytes     *float64 `json:"mem_bytes,omitempty"`
	MemPeakBytes *float64 `json:"mem_peak_bytes,omitempty"`
}

// fillMetric adds the telemetry of the last n steps to m.
func (r *run) fillMetric(m *Metric, n int) {
	if r.tel == nil || n == 0 {
		return
	}
	w := r.tel.takeWindow()
	for p, dst := range [nPhases]**float64{phH2D: &m.H2DMs, phForward: &m.ForwardMs, phBackward: &m.BackwardMs,
		phComm: &m.CommMs, phOptimizer: &m.OptimizerMs, phCkptLog: &m.CkptLogMs} {
		if dst != nil {
			v := w[p] / float64(n)
			*dst = &v
		}
	}
	st := tensor.MemStats(r.dev)
	mem, peak := float64(st.Allocated), float64(r.peakMem())
	m.MemBytes, m.MemPeakBytes = &mem, &peak
	if u, ok := r.utilisation(); ok {
		m.Util = &u
	}
}

// Result is a finished run.
type Result struct {
	Dir       string // the run's folder
	Model     *model.GPT
	Tokenizer Tokenizer
	Summary   Summary
}

// run holds one training run's state.
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
	dataWait time.Duration // time spent in fill, in all
	evalTr   *data.Sampler
	evalVal  *data.Sampler
	metrics  bytes.Buffer
	ckpt     *checkpointer
	scaler   *optim.GradScaler // loss scaling, for fp16 products; nil otherwise
	tel      *telemetry        // step phase timing; nil: off
	measured int               // steps counted in the telemetry totals
	// peakFLOPs is the device's peak for the run's products (0: unknown);
	// flopsPerToken the model's training FLOPs per token.
	peakFLOPs, flopsPerToken float64
	meanStepMs               float64 // over the steps telemetry measured, all phases
	commOverlappedMs         float64 // data parallelism: all-reduce time hidden behind backward, per step
	gradNorm                 float64 // the last gradient norm read, before clipping
	// hostBadGrads is the first step whose gradients were not finite
	// where clipping reads the norm on the host (a loss scaler, several
	// devices); 0: none. The device path keeps it in stats.
	hostBadGrads int
	// stats are the step statistics on the device that computes the loss
	// (tensor.NewStats): the loss summed since the last check and the
	// first steps whose loss or gradients were not finite. The loop
	// reads them only at read points (log lines, evaluations,
	// checkpoints, a stop), so that a step reads nothing back.
	stats *tensor.Tensor
	// lossSum is stats' first element (a view), statsHost where reads of
	// stats land.
	lossSum   *tensor.Tensor
	statsHost [tensor.StatsLen]float32
	// statsAt is the step count at the last check, lastLoss the mean
	// loss it read.
	statsAt  int
	lastLoss float64
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
	// graph is the captured step (--cuda-graphs), launched for every step
	// after graphWarm plain ones; graphIn the batch buffers it reads, one
	// pair per micro-step; graphSched AdamW's constants the step clock
	// writes (fp16's scaler writes its own).
	graph      backend.Graph
	graphIn    [][2]*tensor.Tensor
	graphSched *tensor.Tensor
	graphWarm  int
	// dropKey is the captured step's dropout key, two I32 hashed on the
	// device every step (tensor.StepDropoutKey), which every micro-step
	// reads.
	dropKey *tensor.Tensor
	// hostScaler keeps fp16's scaler on the host (as pipelines have it),
	// reading the gradient norm every step: tests hold the device's
	// scaler to it.
	hostScaler bool
	status     *statusLine      // the live line on a terminal; nil: none
	sampler    *sysstat.Sampler // device utilisation in the background; nil: none
	ddp        *ddp             // data parallelism; nil in a world of one
	sinks      *sinks           // TensorBoard and Prometheus; nil: neither
	pipe       *pipeRun         // --pipeline: the model's stages; nil: one device
	stages     []tensor.Device  // --pipeline: the stages' devices
	at         int              // the step the loop is at
	evaluating bool             // the loop is evaluating
}

// close releases the staging slots, stops the loader, closes the
// TensorBoard and Prometheus sinks and gives the pipeline stages' devices
// back to the default program.
func (r *run) close() {
	r.tel.drop() // marks of steps a failed run never read
	if err := r.sinks.close(r.log); err != nil {
		fmt.Fprintf(r.log, "warning: %v\n", err)
	}
	r.sinks = nil
	r.stopSampler(nil)
	r.ddp.close()
	r.ddp = nil
	r.staged.close()
	if r.loader != nil {
		r.loader.Close()
		r.loader = nil
	}
	if r.pipe != nil {
		r.pipe.close()
	}
	if r.graph != nil {
		if err := r.graph.Free(); err != nil && r.log != nil {
			fmt.Fprintf(r.log, "warning: freeing the step's graph: %v\n", err)
		}
		r.graph = nil
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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.BatchAuto {
		cfg, _ = cfg.withBatch(cfg.BatchSize) // checked by Validate
	}
	var place Placement
	if cfg.Placement != nil {
		place = *cfg.Placement
	} else if place, err = cfg.Place(); err != nil {
		return nil, err
	}
	if err := place.Open(); err != nil {
		return nil, err
	}
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
		if store, err = joinStore(cfg, log); err != nil {
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
	cpuBF16 := cfg.Precision == "bf16" && place.onHost()
	plan, err := shareOut(store, cfg, cpuBF16)
	if err != nil {
		return nil, err
	}
	if cfg.Out == "" { // a folder rank 0 chose; a given --out stays this rank's own
		cfg.Out = plan.Dir
	}
	if plan.Note != "" && cfg.Rank == 0 {
		fmt.Fprintln(log, plan.Note)
	}
	ckRoot := filepath.Join(cfg.Out, CheckpointDir)
	var resumeDir string
	var resumeMan *checkpoint.Manifest
	if cfg.Resume {
		d, m, skipped, err := newestCheckpoint(ckRoot)
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
	var was *RunConfig // the checkpoint's run, read once
	if resumeMan != nil {
		was = new(RunConfig)
		if err := json.Unmarshal(resumeMan.Config, was); err != nil {
			return nil, fmt.Errorf("resume from %s: its config: %w", resumeDir, err)
		}
	}
	if cfg.Elastic && was != nil {
		if err := keepGlobalBatch(&cfg, *was, log); err != nil {
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
		if err := settleCPUBF16(&cfg, plan, resumeDir, was, log); err != nil {
			return nil, err
		}
	} else {
		cfg.CPUBF16 = "" // no bf16 product runs on the CPU: none is recorded
	}
	rc := RunConfig{Train: cfg, Model: cfg.ModelConfig(ds.vocab), DataID: ds.id,
		TokenizerID: tokenizerIdentity(tok, ds.tokenizerDesc())}
	if was != nil {
		if err := checkResume(&rc, *was, resumeDir, resumeMan.Step, log); err != nil {
			return nil, err
		}
	}
	if store != nil {
		err := agreeSettings(store, cfg.Rank, settingsOf(rc))
		agreed = true
		if err != nil {
			return nil, err
		}
	}
	if cfg.Rank == 0 { // the other ranks of a data-parallel job write nothing
		dir, created, merr := makeOut(plan)
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
	r := &run{cfg: cfg, log: log, dev: dev, stages: place.Stages, checkIDs: ds.checkIDs, simulated: simulated(dev)}
	if r.simulated && cfg.Rank == 0 {
		fmt.Fprintf(log, "simulated GPU: %v executes nothing; losses are n/a, times are the host's, and no weights are written\n", dev)
	}
	if cfg.Rank == 0 {
		r.status = newStatusLine(log) // one live line for the group
	}
	if r.status != nil {
		r.log, log = r.status, r.status
		defer r.status.done()
	}
	if r.train, err = data.NewTokenSampler(ds.train, cfg.BlockSize, cfg.Seed, data.StreamTrain); err != nil {
		return nil, fmt.Errorf("train split: %w", err)
	}
	if r.evalVal, err = data.NewTokenSampler(ds.val, cfg.BlockSize, cfg.Seed, data.StreamEvalVal); err != nil {
		return nil, fmt.Errorf("validation split: %w", err)
	}
	r.evalTr, _ = data.NewTokenSampler(ds.train, cfg.BlockSize, cfg.Seed, data.StreamEvalTrain)
	r.vocab = ds.vocab

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
	r.sched = optim.Schedule{LR: cfg.LR, MinLR: cfg.MinLR, WarmupIters: cfg.WarmupIters, DecayIters: cfg.decayIters()}
	if cfg.Precision == "fp16" {
		r.scaler = optim.NewGradScaler()
	}
	r.tel = newTelemetry(dev)
	r.flopsPerToken = r.model.FLOPsPerToken(cfg.BlockSize)
	var peakSrc string
	r.peakFLOPs, peakSrc = peakFLOPs(dev, cfg.ProductDType())

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
		FLOPsPerToken: r.flopsPerToken, PeakFLOPs: r.peakFLOPs, PeakSource: peakSrc, Simulated: r.simulated}
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
	if r.pipe != nil {
		if err := r.pipe.finish(); err != nil {
			return nil, err
		}
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

func (r *run) tokensPerStep() int { return r.cfg.BatchSize * r.cfg.GradAccum * r.cfg.BlockSize }

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
		t0, w0 := time.Now(), r.dataWait
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
		st.add(dt*1000, (r.dataWait-w0).Seconds()*1000, float64(r.tokensPerStep())/dt, measured)
		if measured {
			r.measured++
		}
		// A read point reads the step statistics and agrees on them
		// with the other ranks: where the log, an evaluation or a
		// checkpoint needs them, and where this process was asked to
		// stop (a group agrees on stopping at its next read point).
		stop := false
		if r.ddp == nil {
			select {
			case <-r.cfg.Stop:
				stop = true
			default:
			}
		}
		if stop || r.readPoint(done) {
			var err error
			if stop, err = r.agree(done, stop, &st); err != nil {
				return err
			}
			sum.FinalTrainLoss = r.lastLoss
			if r.scalerState != nil {
				// The rate the device took: the schedule's position
				// counts the skipped steps read just now.
				lr = r.sched.At(r.scheduleStep(step))
			}
		}
		if done%cfg.LogInterval == 0 || done == cfg.MaxIters {
			if err := r.logWindow(done, lr, &st); err != nil {
				return err
			}
		}
		if err := r.checkpointAfter(done, stop, sum.BestValLoss); err != nil {
			return err
		}
		r.status.update(done, cfg.MaxIters, r.lossText(r.lastLoss), float64(r.tokensPerStep())/dt, dt*1000)
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
	r.lastLoss = mean
	if r.ddp != nil {
		select {
		case <-r.cfg.Stop:
			stop = true
		default:
		}
	}
	bad := (badLoss > 0 || badGrads > 0) && !r.simulated
	nBad := 0
	if bad {
		nBad = 1
	}
	if r.ddp != nil {
		var err error
		if stop, nBad, err = r.ddp.agreeStep(stop, bad); err != nil {
			return false, fmt.Errorf("step %d: %w", done, err)
		}
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
	if r.ddp != nil { // the loss and step time averaged over the ranks
		vals := [...]float32{float32(avg), float32(ms), float32(wms)}
		if err := r.ddp.average(vals[:]); err != nil {
			r.ddp.err = err
			return fmt.Errorf("step %d: averaging the logged loss: %w", done, err)
		}
		avg, ms, wms = float64(vals[0]), float64(vals[1]), float64(vals[2])
	}
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
	if r.peakFLOPs > 0 {
		mfu := tps * r.flopsPerToken / r.peakFLOPs
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
	gn := r.gradNorm
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
	if cfg.Precision == "fp16" {
		format += "; or train in {Precision} bf16, whose range is fp32's: fp16's overflows"
	}
	return format, args
}

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
	if !r.opened {
		// The batch plan, resolved (Run has done it; a Stepper or a test
		// may not have).
		plan, err := r.cfg.PlanBatch()
		if err != nil {
			return err
		}
		r.cfg.GradAccum = plan.Accum
		if err := r.staged.open(r.dev, r.cfg.BatchSize, r.cfg.BlockSize); err != nil {
			return fmt.Errorf("staging batches: %w", err)
		}
		r.opened = true
		if err := r.openFill(step); err != nil {
			return err
		}
		r.openStepState(step)
		if r.ddp != nil && r.cfg.Zero == 1 {
			if err := r.openZero(); err != nil {
				return err
			}
		}
	}
	cfg := r.cfg
	if cfg.CUDAGraphs && r.pipe == nil && r.ddp == nil && hook == nil {
		if r.graphWarm >= graphWarmSteps {
			return r.stepGraph(step, lr)
		}
		r.graphWarm++
	}
	if r.pipe != nil {
		r.pipe.beginStep()
	}
	tel := r.tel
	for micro := 0; micro < cfg.GradAccum; micro++ {
		tel.to(phH2D)
		w0 := r.dataWait
		x, y, err := r.staged.get(step, micro, nextMicro(step, micro, cfg.GradAccum), r.fill)
		if err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		tel.move(phH2D, phData, r.dataWait-w0)
		if r.pipe != nil {
			r.pipe.microStep(step, micro, x, y)
		} else {
			r.microStep(step, micro, x, y)
		}
	}
	if r.pipe != nil {
		tel.to(phOptimizer)
		r.pipe.endStep()
	}
	if r.ddp != nil {
		tel.to(phComm)
		sync := r.ddp.sync
		if r.pipe != nil { // its backward passes ran without the hook
			sync = r.ddp.syncAll
		}
		if err := sync(); err != nil {
			r.ddp.err = err
			return fmt.Errorf("step %d: %w", step+1, err)
		}
	}
	tel.to(phOptimizer)
	if r.ddp != nil && r.ddp.zero != nil {
		return r.zeroUpdate(step, lr, hook)
	}
	r.update(step, lr, hook)
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
	dev := r.dev
	if r.pipe != nil {
		dev = r.pipe.devs[len(r.pipe.devs)-1]
	} else {
		r.opt.Pack()
	}
	if r.cfg.ProductDType() == tensor.BF16 {
		// bf16 activations' products read the weights' bf16 copies,
		// which AdamW rewrites in its own pass: written here once, after
		// anything that set the weights (a resume, the broadcast).
		r.opt.KeepHalf()
	}
	r.stats = tensor.NewStats(dev)
	r.lossSum = r.stats.Rows(0, 1)
	r.statsAt = step
	if r.pipe == nil && !(r.scaler != nil && r.hostScaler) {
		r.clipAcc, r.clipCoef = tensor.Zeros(r.dev), tensor.Zeros(r.dev)
		if r.scaler != nil {
			r.openScaler()
		}
	}
}

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
	if r.graphIn == nil {
		if err := tensor.Catch(func() { r.openGraph(step) }); err != nil {
			return fmt.Errorf("--cuda-graphs: %w", err)
		}
	}
	for micro := 0; micro < cfg.GradAccum; micro++ {
		w0 := r.dataWait
		x, y, err := r.staged.get(step, micro, nextMicro(step, micro, cfg.GradAccum), r.fill)
		if err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		tel.move(phH2D, phData, r.dataWait-w0)
		if err := tensor.Catch(func() {
			r.graphIn[micro][0].CopyFrom(x)
			r.graphIn[micro][1].CopyFrom(y)
		}); err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
	}
	if r.lrFill { // no schedule (a Stepper): the rate given, outside the graph
		if err := tensor.Catch(func() { tensor.Fill(r.lrs, float32(lr)) }); err != nil {
			return err
		}
	}
	tel.to(phForward) // the graph's phases are not told apart
	if r.graph == nil {
		if err := r.captureStep(step); err != nil {
			return fmt.Errorf("--cuda-graphs: capturing step %d: %w", step+1, err)
		}
	}
	if err := r.graph.Launch(); err != nil {
		return fmt.Errorf("step %d: launching its graph: %w", step+1, err)
	}
	tel.to(phOptimizer)
	return nil
}

// openGraph readies what the graph reads: the batch buffers, the
// learning-rate schedule and AdamW's constants (fp16's scaler has its
// own), and the step clock, set to step.
func (r *run) openGraph(step int) {
	if _, ok := backendOf(r.dev).(backend.Grapher); !ok {
		panic(&tensor.Error{Op: "cuda_graphs", Msg: fmt.Sprintf("%v cannot capture graphs (a CUDA device can)", r.dev)})
	}
	tensor.Persist(func() {
		for range r.cfg.GradAccum {
			r.graphIn = append(r.graphIn, [2]*tensor.Tensor{
				tensor.Empty(r.dev, tensor.I32, r.cfg.BatchSize, r.cfg.BlockSize),
				tensor.Empty(r.dev, tensor.I32, r.cfg.BatchSize, r.cfg.BlockSize)})
		}
		if r.scalerState == nil {
			r.graphSched = tensor.Zeros(r.dev, 3)
			r.openLRs()
		}
		if r.cfg.Dropout > 0 {
			r.dropKey = tensor.Empty(r.dev, tensor.I32, 2)
		}
	})
	tensor.Fill(r.stats.Rows(4, 5), float32(step))
}

// backendOf is dev's backend (nil where it has none).
func backendOf(dev tensor.Device) backend.Backend {
	b, _ := backend.Get(dev)
	return b
}

// captureStep records one step's micro-steps and update into r.graph.
func (r *run) captureStep(step int) error {
	gr := backendOf(r.dev).(backend.Grapher)
	if err := gr.BeginCapture(); err != nil {
		return err
	}
	tel := r.tel
	r.tel = nil // no device marks inside a graph
	err := tensor.Catch(func() {
		sched, lrs := r.graphSched, r.lrs
		if r.scalerState != nil {
			sched, lrs = nil, nil // the scaler schedules fp16's steps itself
		}
		tensor.StepClock(r.stats, sched, lrs, r.opt.Config.Beta1, r.opt.Config.Beta2)
		if r.dropKey != nil {
			tensor.StepDropoutKey(r.dropKey, r.stats, r.cfg.Seed)
		}
		defer r.model.SetDropoutBase(nil)
		for micro := 0; micro < r.cfg.GradAccum; micro++ {
			r.microStep(-2, micro, r.graphIn[micro][0], r.graphIn[micro][1]) // -2: the step's number from the clock
		}
		r.update(-2, 0, nil)
	})
	r.tel = tel
	g, endErr := gr.EndCapture()
	if err != nil || endErr != nil {
		if g != nil {
			g.Free()
		}
		return errors.Join(err, endErr)
	}
	r.graph = g
	return nil
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
	r.scalerState = tensor.FromFloat32s(r.dev, st, len(st))
	r.seed = r.scalerState.Rows(backend.ScalerSeed, backend.ScalerSeed+1).Reshape()
	r.sched16 = r.scalerState.Rows(backend.ScalerLR, backend.ScalerLR+3)
	r.openLRs()
}

// openLRs puts the learning-rate schedule on the device, a rate per step
// of the run (lrFill: one, set each step, where there is no schedule).
func (r *run) openLRs() {
	if r.lrs != nil {
		return
	}
	if r.sched == (optim.Schedule{}) {
		r.lrs, r.lrFill = tensor.Zeros(r.dev, 1), true
		return
	}
	lrs := make([]float32, max(r.cfg.MaxIters, 1))
	for i := range lrs {
		lrs[i] = float32(r.sched.At(i))
	}
	r.lrs = tensor.FromFloat32s(r.dev, lrs, len(lrs))
}

// readScaler copies the device's scaler state into the host's scaler, and
// AdamW's step count (the updates taken) into the optimizer, after done
// steps: at read points, for the log, telemetry and checkpoints.
func (r *run) readScaler(done int) {
	var st [backend.ScalerStateLen]float32
	r.scalerState.ReadFloat32s(st[:])
	s := r.scaler
	s.Scale, s.Tracker, s.Skipped = st[backend.ScalerScale], int(st[backend.ScalerTracker]), int(st[backend.ScalerSkipped])
	r.opt.Steps = done - s.Skipped
}

// readStats reads the step statistics (a host wait, at read points
// only) and restarts the loss sum: the mean loss of the steps since the
// last read, and the first steps whose loss and whose gradients were not
// finite (0: none).
func (r *run) readStats(done int) (meanLoss float64, steps, badLoss, badGrads int) {
	v := r.statsHost[:]
	r.stats.ReadFloat32s(v)
	tensor.Fill(r.lossSum, 0)
	if steps = done - r.statsAt; steps > 0 {
		meanLoss = float64(v[0]) / float64(steps)
	}
	r.statsAt = done
	if v[1] >= 0 {
		badLoss = int(v[1])
	}
	if v[3] >= 0 {
		badGrads = int(v[3])
	}
	if r.clipCoef != nil {
		r.gradNorm = float64(v[2])
	}
	if r.scalerState != nil {
		r.readScaler(done)
	} else if r.graph != nil {
		r.opt.Steps = done // the replays' updates, which the host does not count
	}
	if r.hostBadGrads > 0 && (badGrads == 0 || r.hostBadGrads < badGrads) {
		badGrads = r.hostBadGrads
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
		if r.dropKey != nil {
			r.model.SetDropoutBase(r.dropKey)
		}
	} else {
		r.model.SetDropout(r.dropoutKey(step), r.dropoutRow0(micro))
	}
	tensor.Step(func() {
		var loss *tensor.Tensor
		tensor.Autocast(cfg.ProductDType(), func() { loss = r.model.Loss(x, y) })
		tensor.TrackLoss(r.stats, loss, 1/float32(cfg.GradAccum), step+1)
		var seed *tensor.Tensor
		switch {
		case r.seed != nil: // fp16's scale/accumulation, on the device
			seed = r.seed
		case r.scaler != nil:
			loss = tensor.Scale(loss, r.scaler.Scale/float32(cfg.GradAccum))
		case cfg.GradAccum > 1:
			loss = tensor.Scale(loss, 1/float32(cfg.GradAccum))
		}
		tel.to(phBackward)
		if r.ddp != nil && micro == cfg.GradAccum-1 {
			prev := tensor.SetGradReadyHook(r.ddp.hookFn)
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
	if r.scalerState != nil || r.clipCoef != nil {
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
	r.gradNorm = norm
	if r.scaler == nil && !finite(norm) {
		// Without a loss scaler, whose business such steps are, gradients
		// that are not finite would make AdamW's every weight NaN: the
		// update is not applied, and the run stops (see diverged).
		if r.hostBadGrads == 0 {
			r.hostBadGrads = step + 1
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
	r.opt.GradSumSquares(r.clipAcc)
	if reduce != nil {
		if err := reduce(); err != nil {
			return err
		}
	}
	switch {
	case r.scalerState != nil:
		if r.lrFill && step >= 0 { // (a captured step's is set outside its graph)
			tensor.Fill(r.lrs, float32(lr))
		}
		tensor.ScalerCoef(r.clipCoef, r.stats, r.clipAcc, r.scalerState, r.lrs, r.cfg.GradClip, step,
			r.scaler.GrowthInterval, 1/float32(r.cfg.GradAccum), r.opt.Config.Beta1, r.opt.Config.Beta2)
		r.opt.StepSched(r.clipCoef, r.sched16)
	case step < 0:
		tensor.ClipCoef(r.clipCoef, r.stats, r.clipAcc, r.cfg.GradClip, -1)
		r.opt.StepSched(r.clipCoef, r.graphSched)
	default:
		tensor.ClipCoef(r.clipCoef, r.stats, r.clipAcc, r.cfg.GradClip, step+1)
		r.opt.SetLR(float32(lr))
		r.opt.StepScaled(r.clipCoef)
	}
	r.opt.ZeroGrad()
	return nil
}

// evaluate estimates train and val loss on EvalIters random batches each,
// saving best.safetensors when val loss improves. In a data-parallel group
// every rank evaluates its rows of the batches one process of the same
// global micro-batch would evaluate, and the losses are averaged, so the
// group's estimate is that process's.
func (r *run) evaluate(step int, sum *Summary) error {
	r.evaluating = true
	defer func() { r.evaluating = false }()
	var tl, vl float64
	loss := r.model.Loss
	progs := programs{tensor.ProgramOf(r.dev)}
	if r.pipe != nil {
		r.pipe.st.SyncHead()
		loss, progs = r.pipe.evalLoss, r.pipe.progs
	}
	rank, world := r.cfg.Rank, max(r.cfg.WorldSize, 1)
	eval := func() {
		progs.autocast(r.cfg.ProductDType(), func() { // evaluate as the model trains
			tl = estimateLoss(r.model, progs, loss, r.evalTr, step, r.cfg.EvalIters, r.cfg.BatchSize, rank, world)
			vl = estimateLoss(r.model, progs, loss, r.evalVal, step, r.cfg.EvalIters, r.cfg.BatchSize, rank, world)
		})
	}
	if r.pipe != nil {
		r.pipe.allCores(eval) // the stages take turns: each may use every core
	} else {
		eval()
	}
	if r.ddp != nil {
		vals := [...]float32{float32(tl), float32(vl)}
		if err := r.ddp.average(vals[:]); err != nil {
			r.ddp.err = err
			return fmt.Errorf("step %d: averaging the evaluation: %w", step, err)
		}
		tl, vl = float64(vals[0]), float64(vals[1])
	}
	if r.simulated {
		if r.cfg.Rank == 0 {
			fmt.Fprintf(r.log, "eval step %d: train loss n/a, val loss n/a (simulated GPU)\n", step)
		}
		return nil
	}
	if !finite(tl) || !finite(vl) {
		// The weights the step left are not finite: no metric, no
		// best.safetensors, and no JSON could even hold the loss.
		advice, args := r.divergedAdvice(step)
		return setting.Errorf("step %d: the evaluation loss is not finite (train %v, val %v): the run diverged at or before this step; "+advice,
			append([]any{step, tl, vl}, args...)...)
	}
	if r.cfg.Rank != 0 {
		return nil // rank 0 logs and saves
	}
	ppl := math.Exp(vl)
	fmt.Fprintf(r.log, "eval step %d: train loss %.4f, val loss %.4f, val perplexity %.3f\n", step, tl, vl, ppl)
	sum.FinalValLoss = vl
	sum.ValPerplexity = ppl
	if vl < sum.BestValLoss {
		sum.BestValLoss = vl
		if err := r.model.SaveWeights(filepath.Join(r.cfg.Out, BestFile), map[string]string{"step": fmt.Sprint(step)}); err != nil {
			return err
		}
	}
	if err := r.sinks.sample(r.model, step, r.cfg.Seed); err != nil {
		return err
	}
	return r.addMetric(Metric{Step: step, TrainLoss: &tl, ValLoss: &vl, Perplexity: &ppl})
}

// EstimateLoss averages the loss over iters batches of random windows
// drawn for step, with dropout off and no gradients.
func EstimateLoss(m *model.GPT, s *data.Sampler, step, iters, batch int) float64 {
	return estimateLoss(m, programs{tensor.ProgramOf(m.Device())}, m.Loss, s, step, iters, batch, 0, 1)
}

// estimateLoss is EstimateLoss for rank of a group of world processes,
// each with batch rows: batch k of the group is windows k·batch·world
// onwards, and the rank evaluates its batch rows of it, with loss (the
// model's, or a pipeline's through its stages), in steps of the programs
// progs that drive the devices it runs on. The mean of the ranks'
// estimates is the estimate of one process with batch·world rows.
func estimateLoss(m *model.GPT, progs programs, loss func(x, y *tensor.Tensor) *tensor.Tensor, s *data.Sampler,
	step, iters, batch, rank, world int) float64 {
	defer m.SetTraining(m.SetTraining(false))
	T := s.BlockSize()
	x := make([]int32, batch*T)
	y := make([]int32, batch*T)
	dev := m.Device()
	var total float64
	progs.noGrad(func() {
		for k := 0; k < iters; k++ {
			s.Batch(step, (k*world+rank)*batch, batch, x, y)
			progs.step(func() {
				total += float64(loss(tensor.FromInt32s(dev, x, batch, T), tensor.FromInt32s(dev, y, batch, T)).Item())
			})
		}
	})
	return total / float64(iters)
}

// addMetric appends a line to metrics.jsonl, rewriting the file atomically.
func (r *run) addMetric(m Metric) error {
	dropNonFinite(&m)
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if r.cfg.Rank != 0 {
		return nil
	}
	r.metrics.Write(line)
	r.metrics.WriteByte('\n')
	if err := r.sinks.emit(m); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(r.cfg.Out, MetricsFile), r.metrics.Bytes())
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'))
}

// dropNonFinite leaves out the fields of m that are NaN or infinite (an
// fp16 step's gradient norm where the scaler skipped it, or a diverging
// run's), which JSON cannot hold: the log line still shows them.
func dropNonFinite(m *Metric) {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f, ok := v.Field(i).Interface().(*float64); ok && f != nil && !finite(*f) {
			v.Field(i).SetZero()
		}
	}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// simulated reports whether dev is a simulated GPU (backend.Simulated).
func simulated(dev tensor.Device) bool {
	b, err := backend.Get(dev)
	if err != nil {
		return false
	}
	s, ok := b.(backend.Simulated)
	return ok && s.Simulated()
}

// lossText formats a loss for the log: n/a on a simulated GPU.
func (r *run) lossText(v float64) string {
	if r.simulated {
		return "n/a"
	}
	return fmt.Sprintf("%.4f", v)
}

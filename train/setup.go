package train

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
	"github.com/fleetml/fleet/train/ddp"
)

// setup is what Run settles before it trains, in order: the plan, the
// job's store, the run's folder, the checkpoint it resumes, its data and
// tokenizer, and its recorded configuration, which the ranks of a job
// agree on before any of them writes.
type setup struct {
	log  io.Writer
	plan config.Plan
	cfg  Config // the plan's, as the run settles it
	// initFile is --init-from's weights.
	initFile *checkpoint.File
	// store is the job's rendezvous store (nil alone, and once the
	// data-parallel group owns it); agreed: the ranks have compared their
	// settings.
	store  *dist.Store
	agreed bool
	out    config.OutPlan
	// created: rank 0 made the run's folder, which a failed run that
	// wrote nothing removes.
	created bool
	// resumeDir and resumeMan are the checkpoint the run resumes ("" and
	// nil: none), was its run's configuration.
	resumeDir string
	resumeMan *checkpoint.Manifest
	was       *config.RunConfig
	ds        *dataset
	tok       Tokenizer
	rc        config.RunConfig
}

// settle resolves cfg and settles everything the run needs before it is
// built (see setup).
func (s *setup) settle(cfg Config) (err error) {
	if cfg.InitFrom != "" {
		if s.initFile, err = initFrom(&cfg); err != nil {
			return err
		}
	}
	if s.plan, err = config.Resolve(cfg); err != nil {
		return err
	}
	s.cfg = s.plan.Config
	dev := s.plan.Place.Device
	if s.cfg.Resume && simulated(dev) {
		return setting.Errorf("{Resume}: a run on a simulated GPU (%v) saves no checkpoints to resume", dev)
	}
	// The ranks of a job join their store first: rank 0 decides the run's
	// folder, and every rank compares its settings with rank 0's, before
	// any rank writes.
	if s.cfg.WorldSize > 1 {
		if s.store, err = ddp.Join(s.cfg, s.log); err != nil {
			return err
		}
	}
	cpuBF16 := s.plan.Precision == config.BF16 && s.plan.OnCPU()
	if s.out, err = ddp.ShareOut(s.store, s.cfg, cpuBF16); err != nil {
		return err
	}
	if s.cfg.Out == "" { // a folder rank 0 chose; a given --out stays this rank's own
		s.cfg.Out = s.out.Dir
	}
	if s.out.Note != "" && s.cfg.Rank == 0 {
		fmt.Fprintln(s.log, s.out.Note)
	}
	if err := s.findCheckpoint(); err != nil {
		return err
	}
	if s.cfg.Elastic && s.was != nil {
		if err := config.KeepGlobalBatch(&s.cfg, *s.was, s.log); err != nil {
			return err
		}
	}
	if s.ds, err = openData(s.cfg); err != nil {
		return err
	}
	if s.cfg.BatchAuto {
		if err := autoBatch(&s.cfg, s.ds.vocab, dev, s.resumeMan, s.log); err != nil {
			return err
		}
	}
	if s.tok, err = s.ds.tokenizer(); err != nil {
		return err
	}
	if cpuBF16 {
		if err := config.SettleCPUBF16(&s.cfg, s.out, s.resumeDir, s.was, setBF16Product, s.log); err != nil {
			return err
		}
	} else {
		s.cfg.CPUBF16 = "" // no bf16 product runs on the CPU: none is recorded
	}
	s.rc = config.RunConfig{Train: s.cfg, Model: s.cfg.ModelConfig(s.ds.vocab), DataID: s.ds.id,
		TokenizerID: config.TokenizerIdentity(s.tok, s.ds.tokenizerDesc())}
	if s.was != nil {
		if err := checkResume(&s.rc, *s.was, s.resumeDir, s.resumeMan.Step, s.log); err != nil {
			return err
		}
	}
	if s.store != nil {
		err := ddp.AgreeSettings(s.store, s.cfg.Rank, s.rc.Settings())
		s.agreed = true
		if err != nil {
			return err
		}
	}
	return s.makeOut()
}

// findCheckpoint finds, resuming, the newest checkpoint in the run's
// folder that verifies, and reads its run's configuration.
func (s *setup) findCheckpoint() error {
	if !s.cfg.Resume {
		return nil
	}
	ckRoot := filepath.Join(s.cfg.Out, CheckpointDir)
	d, m, skipped, err := config.NewestCheckpoint(ckRoot)
	if err != nil {
		return err
	}
	for _, e := range skipped {
		fmt.Fprintf(s.log, "skipping an incomplete or damaged checkpoint: %v\n", e)
	}
	if d == "" {
		fmt.Fprintf(s.log, "resume: no complete checkpoint in %s; starting at step 0\n", ckRoot)
	}
	s.resumeDir, s.resumeMan = d, m
	if m != nil {
		s.was = new(config.RunConfig)
		if err := json.Unmarshal(m.Config, s.was); err != nil {
			return fmt.Errorf("resume from %s: its config: %w", d, err)
		}
	}
	return nil
}

// makeOut makes the run's folder, on rank 0 (the other ranks of a
// data-parallel job write nothing).
func (s *setup) makeOut() error {
	if s.cfg.Rank != 0 {
		return nil
	}
	dir, created, err := config.MakeOut(s.out)
	if err == nil && dir != s.cfg.Out { // another run took the number meanwhile
		fmt.Fprintf(s.log, "run folder: %s (another run took %s meanwhile)\n", dir, s.cfg.Out)
		s.cfg.Out, s.rc.Train.Out = dir, dir
	}
	s.created = created
	return err
}

// release undoes what a run that returns err leaves: the folder it made
// and wrote nothing into, its data, and the job's store where the group
// does not own it (telling the other ranks why this one failed, where
// they still wait to compare settings).
func (s *setup) release(err error) {
	if s.created && err != nil {
		os.Remove(s.cfg.Out) // only if still empty: a run that wrote nothing leaves no folder
	}
	if s.ds != nil {
		s.ds.close()
	}
	if s.store != nil {
		if err != nil && !s.agreed {
			ddp.PostFailure(s.store, s.cfg.Rank, err)
		}
		s.store.Close()
	}
}

// build makes the run: its samplers, the model (with --init-from's
// weights), a pipeline's stages, the optimizer, the loss scaler and the
// telemetry, and writes config.json and the tokenizer (rank 0).
func (s *setup) build() (r *run, err error) {
	cfg, log, ds, dev := s.cfg, s.log, s.ds, s.plan.Place.Device
	r = newRun(cfg, dev, log)
	r.feed.checkIDs, r.simulated = ds.checkIDs, simulated(dev)
	if r.simulated && cfg.Rank == 0 {
		fmt.Fprintf(log, "simulated GPU: %v executes nothing; losses are n/a, times are the host's, and no weights are written\n", dev)
	}
	if cfg.Rank == 0 {
		r.out.status = newStatusLine(log) // one live line for the group
	}
	if r.out.status != nil {
		r.log, log = r.out.status, r.out.status
		s.log = log
	}
	if r.train, err = data.NewTokenSampler(ds.train, cfg.BlockSize, cfg.Seed, data.StreamTrain); err != nil {
		return r, fmt.Errorf("train split: %w", err)
	}
	if r.eval.val, err = data.NewTokenSampler(ds.val, cfg.BlockSize, cfg.Seed, data.StreamEvalVal); err != nil {
		return r, fmt.Errorf("validation split: %w", err)
	}
	r.eval.train, _ = data.NewTokenSampler(ds.train, cfg.BlockSize, cfg.Seed, data.StreamEvalTrain)
	r.feed.vocab = ds.vocab

	mc := cfg.ModelConfig(ds.vocab)
	if r.model, err = model.New(mc, dev, cfg.Seed); err != nil {
		return r, err
	}
	r.model.SetRecompute(cfg.Recompute)
	if s.initFile != nil {
		if err := r.model.SetWeights(s.initFile); err != nil {
			return r, setting.Errorf("{InitFrom} %s: %w", cfg.InitFrom, err)
		}
		fmt.Fprintf(log, "init: weights from %s\n", cfg.InitFrom)
	}
	if st := s.plan.Place.Stages; len(st) > 0 { // before the optimizer: its moments live with their parameters
		if r.multi, err = newPipeRun(r, st); err != nil {
			return r, err
		}
	}
	if reps := s.plan.Place.Replicas; len(reps) > 0 {
		if r.multi, err = newReplicaRun(r, reps); err != nil {
			return r, err
		}
	}
	if cfg.Rank == 0 { // the other ranks of a data-parallel job write nothing
		if err := writeJSON(filepath.Join(cfg.Out, ConfigFile), s.rc); err != nil {
			return r, err
		}
		if err := ds.saveTokenizer(cfg.Out); err != nil {
			return r, err
		}
	}
	if err := tensor.Catch(func() { // its moments are the run's largest allocation
		r.opt, err = newOptimizer(cfg, r.model.Parameters())
	}); err != nil {
		return r, fmt.Errorf("optimizer state: %w", err)
	}
	if err != nil {
		return r, err
	}
	r.sched = optim.Schedule{LR: cfg.LR, MinLR: cfg.MinLR, WarmupIters: cfg.WarmupIters, DecayIters: cfg.DecayIters()}
	r.tel = newTelemetry(dev)
	r.perf.flopsPerToken = r.model.FLOPsPerToken(cfg.BlockSize)
	r.logSetup(ds)
	if r.ckpt, err = newCheckpointer(r, s.rc); err != nil {
		return r, err
	}
	return r, nil
}

// logSetup logs the run's data, model, batch and precision.
func (r *run) logSetup(ds *dataset) {
	cfg, log, mc := r.cfg, r.log, r.model.Config
	fmt.Fprintf(log, "data: %s\n", ds.desc)
	fmt.Fprintf(log, "tokens: %d train, %d val, vocabulary %d (%s)\n", ds.train.Len(), ds.val.Len(), ds.vocab, ds.tokenizerDesc())
	fmt.Fprintf(log, "model: %s, %d layers, %d heads, %d embd, block %d, %.2fM parameters, on %v\n",
		mc.Family(), mc.NLayer, mc.NHead, mc.NEmbd, mc.BlockSize, float64(r.model.NumParams())/1e6, r.dev)
	fmt.Fprintf(log, "batch: micro-batch %d × %d tokens, %d accumulation steps, world %d: %d tokens per step\n",
		cfg.BatchSize, cfg.BlockSize, cfg.GradAccum, max(cfg.WorldSize, 1), r.tokensPerStep()*max(cfg.WorldSize, 1))
	if m, ok := r.opt.(*optim.Muon); ok {
		lr, mom, wd := cfg.MuonSettings()
		fmt.Fprintf(log, "optimizer: Muon for the blocks' %d weight matrices (lr %g, momentum %g, weight decay %g; Newton–Schulz products in %v), AdamW for the other parameters (lr %g)\n",
			m.Matrices(), lr, mom, wd, cfg.ProductDType(), cfg.LR)
	}
	if cfg.Recompute {
		fmt.Fprintf(log, "recompute: on: each block is recomputed in the backward pass (less memory, more time)\n")
	}
	// Settings that ask for what a run of this shape cannot do run as
	// plain training; each says so.
	if cfg.Zero == 1 && max(cfg.WorldSize, 1) == 1 {
		fmt.Fprintf(log, "zero: --zero 1 shards the optimizer's state over a data-parallel group; one process has none, so its state stays whole: plain training\n")
	}
	if p, ok := r.multi.(*pipeRun); ok && len(p.devs) == 1 {
		fmt.Fprintf(log, "pipeline: one stage holds the whole model on %v, so nothing runs in parallel: plain training, its %d micro-batches accumulating gradients; give --pipeline two or more devices to pipeline\n",
			p.devs[0], max(cfg.MicroBatches, 1))
	}
	if r.scaler != nil {
		fmt.Fprintf(log, "precision: fp16 products with dynamic loss scaling (initial scale %g, ×%d after %d clean steps, ×%g on inf or NaN gradients, whose steps are skipped)\n",
			r.scaler.Scale, optim.ScalerGrowth, r.scaler.GrowthInterval, optim.ScalerBackoff)
		if onHost(r.dev) {
			fmt.Fprintf(log, "precision: the CPU has no fp16 products; they are emulated (f16 operands widened to f32) and slower than fp32\n")
		}
	}
}

// summary is the run's summary.json as it starts: what it trains, on
// what, and the device's peak for its MFU.
func (r *run) summary(ds *dataset) Summary {
	var peakSrc string
	r.perf.peakFLOPs, peakSrc = peakFLOPs(r.dev, r.prec.DType())
	sum := Summary{Config: r.cfg, Model: r.model.Config, Device: r.dev.String(), NumParams: r.model.NumParams(), Data: ds.desc,
		TrainTokens: ds.train.Len(), ValTokens: ds.val.Len(), BestValLoss: math.Inf(1),
		FLOPsPerToken: r.perf.flopsPerToken, PeakFLOPs: r.perf.peakFLOPs, PeakSource: peakSrc, Simulated: r.simulated}
	if r.simulated {
		sum.BestValLoss = 0 // no loss: see Summary.Simulated
	}
	return sum
}

// resume restores the run from its checkpoint, where it resumes one, and
// returns the step it starts at.
func (s *setup) resume(r *run, sum *Summary) (start int, err error) {
	if s.resumeDir == "" {
		return 0, nil
	}
	if cerr := tensor.Catch(func() { start, sum.BestValLoss, err = r.restore(s.resumeDir, s.resumeMan) }); cerr != nil {
		return 0, fmt.Errorf("resume: %w", cerr)
	}
	if err != nil {
		return 0, err
	}
	if start > r.cfg.MaxIters {
		return 0, setting.Errorf("resume: checkpoint %s is at step %d, past {MaxIters} %d", s.resumeDir, start, r.cfg.MaxIters)
	}
	r.keepMetrics(start)
	r.ckpt.last, r.ckpt.lastStep = s.resumeDir, start
	sum.Steps = start
	if start == r.cfg.MaxIters {
		fmt.Fprintf(s.log, "resume: %s is the end of the run (step %d); rewriting the final files\n", s.resumeDir, start)
	} else {
		fmt.Fprintf(s.log, "resume: continuing from %s at step %d\n", s.resumeDir, start)
	}
	return start, nil
}

// joinGroup joins a data-parallel job's group over its store, which the
// group owns from then on; the ranks but rank 0 then train quietly.
func (s *setup) joinGroup(r *run) (err error) {
	if s.store == nil {
		return nil
	}
	store := s.store
	s.store = nil // the group owns it from here
	if cerr := tensor.Catch(func() { err = r.openDDP(store) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}
	if r.cfg.Rank != 0 { // rank 0 logs for the group
		fmt.Fprintf(s.log, "rank %d: training quietly; rank 0 logs and saves for the group\n", r.cfg.Rank)
		r.log = io.Discard
	}
	return nil
}

// newOptimizer makes the run's optimizer (Config.Optimizer): AdamW, or
// Muon for the blocks' matrices and AdamW for the rest, its
// Newton–Schulz products in the run's product type (bf16 under
// --precision bf16).
func newOptimizer(cfg Config, params []*nn.Parameter) (optim.Optimizer, error) {
	adam := optim.AdamWConfig{LR: float32(cfg.LR), Beta1: float32(cfg.Beta1), Beta2: float32(cfg.Beta2), WeightDecay: float32(cfg.WeightDecay)}
	if cfg.Optimizer != config.OptimizerMuon {
		return optim.NewAdamW(params, adam), nil
	}
	lr, mom, wd := cfg.MuonSettings()
	mc := optim.MuonConfig{LR: float32(lr), Momentum: float32(mom), WeightDecay: float32(wd)}
	if cfg.ProductDType() == tensor.BF16 {
		mc.Round = tensor.BF16
	}
	return optim.NewMuon(params, adam, mc)
}

package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// Settings of --batch-size auto.
const (
	// autoBatchMargin is the share of the device's memory left free on the
	// GPU: fragmentation, the CUDA context, and kernels' workspace.
	autoBatchMargin = 0.10
	// autoBatchCPUShare is the share of the machine's RAM --batch-size auto
	// may plan for on the CPU when --memory-limit is not given.
	autoBatchCPUShare = 0.5
)

// BatchProbe is one trial step of --batch-size auto.
type BatchProbe struct {
	Batch int
	Peak  int64 // the step's peak device memory, model and optimizer included
	Fits  bool
	OOM   bool // the device ran out of memory
}

// AutoBatch is what --batch-size auto chose, and why.
type AutoBatch struct {
	Batch  int   // the micro-batch chosen
	Budget int64 // the memory it had to fit in
	Peak   int64 // the chosen batch's measured (GPU) or estimated (CPU) peak
	Max    int   // the largest micro-batch considered
	Probes []BatchProbe
	Reason string
}

// ChooseBatch finds the largest micro-batch that fits the device. On a
// GPU it probes real training steps under the caching allocator,
// doubling the batch until a step runs out of memory (or passes the
// budget: the device's memory less a 10% margin) and then bisecting. On
// the CPU it fits peak(B) = fixed + B × per-sequence from two real small
// steps, solves for the budget (--memory-limit, or half the machine's
// RAM), and checks the answer with one more step. With --tokens-per-step
// the batch must divide the token budget's sequences per process;
// without, it is at most config.AutoBatchCap.
func ChooseBatch(cfg Config, vocab int, dev tensor.Device, log io.Writer) (AutoBatch, error) {
	maxB, err := cfg.MaxMicro()
	if err != nil {
		return AutoBatch{}, err
	}
	ok := func(b int) bool { _, err := cfg.WithBatch(b); return err == nil }
	res := AutoBatch{Max: maxB}
	stats := tensor.MemStats(dev)
	probe := func(b int) (BatchProbe, error) {
		peak, err := probeBatch(cfg, vocab, dev, b)
		p := BatchProbe{Batch: b, Peak: peak}
		switch {
		case errors.Is(err, backend.ErrOutOfMemory):
			p.OOM = true
		case err != nil:
			return p, setting.Errorf("{BatchSize} auto: a trial step at batch %d: %w", b, err)
		default:
			p.Fits = peak <= res.Budget
		}
		res.Probes = append(res.Probes, p)
		fmt.Fprintf(log, "batch auto: batch %d: %s\n", b, p.describe(res.Budget))
		return p, nil
	}
	if onHost(dev) {
		res.Budget = cfg.MemoryLimit
		src := "--memory-limit"
		if res.Budget == 0 {
			res.Budget = int64(float64(stats.Total) * autoBatchCPUShare)
			src = fmt.Sprintf("half of the machine's %s of RAM (set --memory-limit to change it)", units.Bytes(stats.Total))
		}
		if res.Budget <= 0 {
			return res, setting.Errorf("{BatchSize} auto on the CPU needs {MemoryLimit}: the machine's memory is unknown")
		}
		p1, err := probe(1)
		if err != nil {
			return res, err
		}
		p2, err := probe(2)
		if err != nil {
			return res, err
		}
		per := max(p2.Peak-p1.Peak, 1)
		fixed := p1.Peak - per
		b := min(int((res.Budget-fixed)/per), maxB)
		for b > 1 && !ok(b) {
			b--
		}
		if b < 1 || !p1.Fits {
			return res, setting.Errorf("{BatchSize} auto: even batch 1 needs %s, over the budget of %s (%s)", units.Bytes(p1.Peak), units.Bytes(res.Budget), src)
		}
		// Check the estimate with a real step, shrinking if it was short.
		for tries := 0; ; tries++ {
			p, err := probe(b)
			if err != nil {
				return res, err
			}
			if p.Fits || b == 1 || tries == 3 {
				if !p.Fits {
					return res, setting.Errorf("{BatchSize} auto: batch %d needs %s, over the budget of %s", b, units.Bytes(p.Peak), units.Bytes(res.Budget))
				}
				res.Batch, res.Peak = b, p.Peak
				break
			}
			b = max(1, b*9/10)
			for b > 1 && !ok(b) {
				b--
			}
		}
		res.Reason = fmt.Sprintf("a trial step needs %s fixed + %s per sequence (measured at batch 1 and 2); the budget is %s, %s",
			units.Bytes(fixed), units.Bytes(per), units.Bytes(res.Budget), src)
		if res.Batch == maxB {
			res.Reason += fmt.Sprintf("; capped at %d", maxB)
		}
		return res, nil
	}
	if stats.Total <= 0 {
		return res, setting.Errorf("{BatchSize} auto: %v does not report its memory size", dev)
	}
	res.Budget = int64(float64(stats.Total)*(1-autoBatchMargin)) - stats.Allocated
	good, bad, goodPeak, err := searchBatch(maxB, ok, probe)
	if err != nil {
		return res, err
	}
	if good == 0 {
		return res, setting.Errorf("{BatchSize} auto: even batch 1 does not fit in %s on %v", units.Bytes(res.Budget), dev)
	}
	res.Batch, res.Peak = good, goodPeak
	res.Reason = fmt.Sprintf("the largest batch whose trial step fit in %s (%v's %s less a %.0f%% margin)",
		units.Bytes(res.Budget), dev, units.Bytes(stats.Total), autoBatchMargin*100)
	if bad > 0 {
		res.Reason += fmt.Sprintf("; batch %d did not", bad)
	} else if good == maxB {
		res.Reason += fmt.Sprintf("; capped at %d", maxB)
	}
	return res, nil
}

// searchBatch finds the largest allowed batch in [1, maxB] whose probe
// fits: it doubles from 1 until a probe fails, then bisects between the
// last fit (good) and the first failure (bad, 0 if none failed).
func searchBatch(maxB int, ok func(int) bool, probe func(int) (BatchProbe, error)) (good, bad int, goodPeak int64, err error) {
	for b := 1; ; b *= 2 {
		b = min(b, maxB)
		for b > good+1 && !ok(b) {
			b--
		}
		p, err := probe(b)
		if err != nil {
			return 0, 0, 0, err
		}
		if !p.Fits {
			bad = b
			break
		}
		good, goodPeak = b, p.Peak
		if b == maxB {
			break
		}
	}
	for bad > 0 && bad-good > 1 {
		mid := (good + bad) / 2
		for mid > good && !ok(mid) {
			mid--
		}
		if mid == good {
			break
		}
		p, err := probe(mid)
		if err != nil {
			return 0, 0, 0, err
		}
		if p.Fits {
			good, goodPeak = mid, p.Peak
		} else {
			bad = mid
		}
	}
	return good, bad, goodPeak, nil
}

func (p BatchProbe) describe(budget int64) string {
	switch {
	case p.OOM:
		return "out of memory"
	case p.Fits:
		return fmt.Sprintf("peak %s, fits in %s", units.Bytes(p.Peak), units.Bytes(budget))
	}
	return fmt.Sprintf("peak %s, over %s", units.Bytes(p.Peak), units.Bytes(budget))
}

// probeBatch runs one full training step (forward, backward, clipping,
// AdamW) of a fresh model at micro-batch b on random tokens and returns
// its peak memory, counting the model and optimizer state, then frees
// everything it made.
func probeBatch(cfg Config, vocab int, dev tensor.Device, b int) (peak int64, err error) {
	cfg.BatchSize, cfg.GradAccum, cfg.TokensPerStep, cfg.BatchAuto = b, 1, 0, false
	tensor.ResetPeakMemory(dev)
	base := tensor.MemStats(dev).Allocated
	r := newRun(cfg, dev, nil)
	tokens := make([]int32, b*cfg.BlockSize+cfg.BlockSize+1)
	g := rng.New(cfg.Seed)
	for i := range tokens {
		tokens[i] = int32(g.Intn(vocab))
	}
	if r.train, err = data.NewSampler(tokens, cfg.BlockSize, cfg.Seed, data.StreamTrain); err != nil {
		return 0, err
	}
	var stepErr error
	err = tensor.Catch(func() {
		m, err := model.New(cfg.ModelConfig(vocab), dev, cfg.Seed)
		if err != nil {
			stepErr = err
			return
		}
		r.model = m
		m.SetRecompute(cfg.Recompute)
		if r.opt, stepErr = newOptimizer(cfg, m.Parameters()); stepErr != nil { // the run's, and its scratch
			return
		}
		stepErr = r.step(0, cfg.LR)
	})
	if err == nil {
		err = stepErr
	}
	peak = tensor.MemStats(dev).Peak - base
	r.close()
	r.free()
	return peak, err
}

// free returns the model's and optimizer's memory to the device pool.
func (r *run) free() {
	freeAll(r.stats.buf)
	r.stats.buf, r.stats.lossSum = nil, nil
	if r.upd != nil {
		r.upd.free()
		r.upd = nil
	}
	for _, in := range r.g.in {
		in[0].Free()
		in[1].Free()
	}
	freeAll(r.g.dropKey)
	r.g.in, r.g.dropKey = nil, nil
	if r.model != nil {
		for _, p := range r.model.Parameters() {
			if p.T.Grad != nil {
				p.T.Grad.Free()
			}
			p.T.Free() // a packed optimizer's view: its buffers go below
		}
	}
	if r.opt != nil {
		r.opt.Free()
	}
}

// autoBatch settles --batch-size auto for a run: the checkpoint's batch
// when resuming (so the batches continue exactly), else ChooseBatch's;
// then the accumulation that keeps the token budget.
func autoBatch(cfg *Config, vocab int, dev tensor.Device, resume *checkpoint.Manifest, log io.Writer) error {
	if resume != nil {
		var rc config.RunConfig
		if err := json.Unmarshal(resume.Config, &rc); err != nil || rc.Train.BatchSize <= 0 {
			return setting.Errorf("resume: the checkpoint's config does not say its batch size, which {BatchSize} auto needs")
		}
		cfg.BatchSize = rc.Train.BatchSize
		fmt.Fprintf(log, "batch auto: micro-batch %d, the checkpoint's\n", cfg.BatchSize)
	} else {
		ab, err := ChooseBatch(*cfg, vocab, dev, log)
		if err != nil {
			return err
		}
		cfg.BatchSize = ab.Batch
		fmt.Fprintf(log, "batch auto: chose micro-batch %d: %s\n", ab.Batch, ab.Reason)
	}
	tokens := cfg.TokensPerStep
	c, err := cfg.WithBatch(cfg.BatchSize)
	if err != nil {
		return err
	}
	*cfg = c
	if tokens > 0 {
		fmt.Fprintf(log, "batch auto: %d accumulation steps keep --tokens-per-step %d\n", cfg.GradAccum, tokens)
	}
	return nil
}

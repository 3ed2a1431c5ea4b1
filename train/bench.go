package train

import (
	"fmt"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// BenchResult is the timing of full training steps (forward, backward,
// clipping and AdamW) on random tokens.
type BenchResult struct {
	Device        string
	NumParams     int
	TokensPerStep int
	MsPerStep     float64 // median
	TokensPerSec  float64 // median of per-step rates
	FLOPsPerToken float64
	GFLOPs        float64 // achieved model FLOP/s at the median rate, in 1e9
}

// Benchmark times steps training steps of the model cfg describes after
// warmup untimed ones, with exactly the step the trainer runs.
func Benchmark(cfg Config, vocab, warmup, steps int) (BenchResult, error) {
	cfg.Out = "-"
	if err := cfg.Validate(); err != nil {
		return BenchResult{}, err
	}
	if steps <= 0 || warmup < 0 {
		return BenchResult{}, fmt.Errorf("--steps must be positive and --warmup not negative")
	}
	dev, err := backend.Resolve(cfg.Device)
	if err != nil {
		return BenchResult{}, fmt.Errorf("--device %s: %w", cfg.Device, err)
	}
	r := &run{cfg: cfg, dev: dev}
	tokens := make([]int32, 1<<16+cfg.BlockSize+1)
	g := rng.New(cfg.Seed)
	for i := range tokens {
		tokens[i] = int32(g.Intn(vocab))
	}
	if r.train, err = data.NewSampler(tokens, cfg.BlockSize, cfg.Seed, data.StreamTrain); err != nil {
		return BenchResult{}, err
	}
	if r.model, err = model.New(cfg.ModelConfig(vocab), dev, cfg.Seed); err != nil {
		return BenchResult{}, err
	}
	r.opt = optim.NewAdamW(r.model.Parameters(), optim.AdamWConfig{LR: float32(cfg.LR), Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
	var ms, rates []float64
	err = tensor.Catch(func() {
		for s := 0; s < warmup+steps; s++ {
			t0 := time.Now()
			r.step(s, cfg.LR)
			dt := time.Since(t0).Seconds()
			if s >= warmup {
				ms = append(ms, dt*1000)
				rates = append(rates, float64(r.tokensPerStep())/dt)
			}
		}
	})
	if err != nil {
		return BenchResult{}, err
	}
	res := BenchResult{Device: dev.String(), NumParams: r.model.NumParams(), TokensPerStep: r.tokensPerStep(),
		MsPerStep: median(ms), TokensPerSec: median(rates), FLOPsPerToken: r.model.FLOPsPerToken(cfg.BlockSize)}
	res.GFLOPs = res.TokensPerSec * res.FLOPsPerToken / 1e9
	return res, nil
}

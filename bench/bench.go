// Package bench times fleet's training step and the model's matrix
// products: fleet bench, the benchmarks of go test -bench and the lab's
// training experiments use it. It sits above train and runs exactly the
// step the trainer runs (train.Stepper).
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/stats"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

// Result is the timing of full training steps (forward, backward,
// clipping and AdamW) on random tokens.
type Result struct {
	Device        string  `json:"device"`
	NumParams     int     `json:"num_params"`
	Batch         int     `json:"batch"` // the micro-batch
	Accum         int     `json:"accum"` // accumulation steps
	TokensPerStep int     `json:"tokens_per_step"`
	MsPerStep     float64 `json:"ms_per_step"`    // median
	TokensPerSec  float64 `json:"tokens_per_sec"` // median of per-step rates
	// FLOPsPerToken is the model's training FLOPs per token in llm.c's
	// units (model.GPT.FLOPsPerToken), FLOPsPerTokenPaLM in PaLM's.
	FLOPsPerToken     float64 `json:"flops_per_token"`
	FLOPsPerTokenPaLM float64 `json:"flops_per_token_palm"`
	GFLOPs            float64 `json:"gflops"`     // achieved model FLOP/s at the median rate, in 1e9 (llm.c's units)
	PeakBytes         int64   `json:"peak_bytes"` // the device pool's peak allocation during the benchmark
	// MFU is the model FLOP/s at the median rate against the device's
	// data-sheet peak for the products' dtype (dense BF16 on tensor cores,
	// or FP32), in llm.c's units; MFUPaLM in PaLM's. 0 where the device has
	// no such figure (the CPU) or is simulated (SimReport's predicted MFU).
	MFU     float64 `json:"mfu,omitempty"`
	MFUPaLM float64 `json:"mfu_palm,omitempty"`
	// SimReport is what a simulated GPU recorded, per step; nil on a real
	// device.
	*SimReport `json:",omitempty"`
}

// Steps times steps training steps of the model cfg describes after
// warmup untimed ones, with exactly the step the trainer runs.
func Steps(cfg train.Config, vocab, warmup, steps int) (Result, error) {
	return StepsWith(cfg, vocab, warmup, steps, Options{})
}

// Options are a benchmark's settings beyond the trainer's.
type Options struct {
	// SimWorld, above 1, makes the step data-parallel over that many
	// ranks of a simulated GPU (--sim-world): the gradients are
	// all-reduced as over NCCL, with the collectives priced by package
	// sim's bus-bandwidth model and the other ranks imagined alike.
	SimWorld int
	// SimRank is the rank simulated (--sim-rank, default 0): under
	// ZeRO-1 the ranks' shards, and so their optimizer steps, differ.
	SimRank int
}

// StepsWith is Steps with options.
func StepsWith(cfg train.Config, vocab, warmup, steps int, o Options) (Result, error) {
	cfg.Out = "-"
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if steps <= 0 || warmup < 0 {
		return Result{}, setting.Errorf("{Steps} must be positive and {Warmup} not negative")
	}
	plan, err := config.Resolve(cfg)
	if err != nil {
		return Result{}, err
	}
	dev := plan.Place.Device
	if plan.Config.BatchAuto {
		ab, err := train.ChooseBatch(plan.Config, vocab, dev, io.Discard)
		if err != nil {
			return Result{}, err
		}
		if plan, err = plan.WithBatch(ab.Batch); err != nil {
			return Result{}, err
		}
	}
	cfg = plan.Config
	// The peak is this benchmark's: counted from the memory held when it
	// starts (another benchmark's model, in the same process).
	tensor.ResetPeakMemory(dev)
	base := tensor.MemStats(dev).Allocated
	tokens := make([]int32, 1<<16+cfg.BlockSize+1)
	g := rng.New(cfg.Seed)
	for i := range tokens {
		tokens[i] = int32(g.Intn(vocab))
	}
	s, err := data.NewSampler(tokens, cfg.BlockSize, cfg.Seed, data.StreamTrain)
	if err != nil {
		return Result{}, err
	}
	m, err := model.New(cfg.ModelConfig(vocab), dev, cfg.Seed)
	if err != nil {
		return Result{}, err
	}
	m.SetRecompute(cfg.Recompute)
	var r *train.Stepper
	if err := tensor.Catch(func() { r = train.NewStepper(cfg, dev, m, s) }); err != nil {
		return Result{}, fmt.Errorf("optimizer state: %w", err)
	}
	var ms, rates []float64
	defer r.Close()
	simDev := simOf(dev)
	if cfg.Zero != 0 && o.SimWorld <= 1 {
		return Result{}, setting.Errorf("{Zero} in a benchmark needs {SimWorld} above 1")
	}
	if o.SimRank != 0 && o.SimWorld <= 1 {
		return Result{}, fmt.Errorf("--sim-rank %d needs --sim-world above 1", o.SimRank)
	}
	if o.SimWorld > 1 {
		if simDev == nil {
			return Result{}, setting.Errorf("{SimWorld} needs a simulated GPU ({Device} sim:h200, say), not %v", dev)
		}
		if o.SimRank < 0 || o.SimRank >= o.SimWorld {
			return Result{}, fmt.Errorf("--sim-rank %d is not a rank of --sim-world %d", o.SimRank, o.SimWorld)
		}
		if err := r.UseDeviceGroup(&simGroup{dev: simDev, world: o.SimWorld, rank: o.SimRank}); err != nil {
			return Result{}, err
		}
	}
	var before, after sim.Counters
	var finalSyncs int64
	var stepErr error
	err = tensor.Catch(func() {
		for s := 0; s < warmup+steps && stepErr == nil; s++ {
			if simDev != nil && s == warmup {
				before = simDev.Counters()
			}
			t0 := time.Now()
			stepErr = r.Step(s, cfg.LR)
			dt := time.Since(t0).Seconds()
			if s >= warmup {
				ms = append(ms, dt*1000)
				rates = append(rates, float64(r.TokensPerStep())/dt)
			}
		}
		if simDev != nil && stepErr == nil {
			// One synchronisation after the window, counted apart.
			after = simDev.Counters()
			b, _ := backend.Get(dev)
			if s, ok := b.(interface{ Synchronize() error }); ok {
				stepErr = s.Synchronize()
			}
			finalSyncs = simDev.Counters().HostSyncs - after.HostSyncs
		}
	})
	if err == nil {
		err = stepErr
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Device: dev.String(), NumParams: m.NumParams(), Batch: plan.Batch.Micro, Accum: plan.Batch.Accum, TokensPerStep: r.TokensPerStep(),
		MsPerStep: stats.Median(ms), TokensPerSec: stats.Median(rates), FLOPsPerToken: m.FLOPsPerToken(cfg.BlockSize),
		FLOPsPerTokenPaLM: m.FLOPsPerTokenPaLM(cfg.BlockSize)}
	res.GFLOPs = res.TokensPerSec * res.FLOPsPerToken / 1e9
	if b, err := backend.Get(dev); err == nil && simDev == nil { // a simulator's host time is no device's
		if p, ok := b.(interface {
			PeakTFLOPs(backend.DType) (float64, bool)
		}); ok {
			if tf, ok := p.PeakTFLOPs(cfg.ProductDType()); ok && tf > 0 {
				res.MFU = res.GFLOPs / (tf * 1e3)
				res.MFUPaLM = res.MFU * res.FLOPsPerTokenPaLM / res.FLOPsPerToken
			}
		}
	}
	res.PeakBytes = tensor.MemStats(dev).Peak - base
	if simDev != nil {
		res.SimReport = simReport(simDev.Spec, after.Sub(before), finalSyncs, steps, res, res.FLOPsPerTokenPaLM)
		if o.SimWorld > 1 {
			res.SimWorld, res.CommModel = o.SimWorld, sim.CommModel(o.SimWorld)
		}
	}
	return res, nil
}

// MarshalJSON writes r; on a simulated GPU, without the top-level
// ms_per_step, tokens_per_sec and gflops, which there are the host's
// figures: the report names them host_ms_per_step, host_tokens_per_sec
// and host_gflops, beside the predicted ones.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	if r.SimReport == nil {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		plain
		MsPerStep    *float64 `json:"ms_per_step,omitempty"`
		TokensPerSec *float64 `json:"tokens_per_sec,omitempty"`
		GFLOPs       *float64 `json:"gflops,omitempty"`
	}{plain: plain(r)})
}

// MatMulShape is one matrix product of the model: [M, K] @ [K, N].
type MatMulShape struct {
	Name    string
	M, K, N int
}

// MatMulShapes lists the forward matrix products of a GPT training step
// with this config and vocabulary (an LSTM's: each layer's input
// projection of every step at once, and its recurrent product, one per
// step), plus the 512³ square product.
func MatMulShapes(cfg train.Config, vocab int) []MatMulShape {
	rows, C := cfg.BatchSize*cfg.BlockSize, cfg.NEmbd
	if cfg.Arch == model.ArchLSTM {
		return []MatMulShape{
			{"lstm.ih", rows, C, 4 * C},
			{"lstm.hh (a step)", cfg.BatchSize, C, 4 * C},
			{"lm_head", rows, C, vocab},
			{"square 512", 512, 512, 512},
		}
	}
	return []MatMulShape{
		{"attn.c_attn", rows, C, 3 * C},
		{"attn.c_proj", rows, C, C},
		{"mlp.c_fc", rows, C, 4 * C},
		{"mlp.c_proj", rows, 4 * C, C},
		{"lm_head", rows, C, vocab},
		{"square 512", 512, 512, 512},
	}
}

// TimeMatMul returns the median seconds of iters products of the shape on
// dev, after a warmup.
func TimeMatMul(dev tensor.Device, s MatMulShape, iters int) (float64, error) {
	var times []float64
	err := tensor.Catch(func() {
		r := tensor.NewRNG(1)
		tensor.NoGrad(func() {
			tensor.Step(func() {
				a := tensor.Randn(dev, r, 1, s.M, s.K)
				b := tensor.Randn(dev, r, 1, s.K, s.N)
				for i := 0; i < iters+2; i++ {
					tensor.Step(func() {
						t0 := time.Now()
						c := tensor.MatMul(a, b)
						c.Reshape(-1).Rows(0, 1).Item() // wait for the device
						if i >= 2 {
							times = append(times, time.Since(t0).Seconds())
						}
					})
				}
			})
		})
	})
	return stats.Median(times), err
}

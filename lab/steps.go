package lab

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/train/config"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/bench"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/monitor/report"
	"github.com/fleetml/fleet/monitor/sysstat"
	"github.com/fleetml/fleet/tensor"
)

// StepPoint is one configuration's training step: experiment 5's
// precisions and experiment 7's devices.
type StepPoint struct {
	Name         string  `json:"name"` // fp32, bf16; or a device
	Batch        int     `json:"batch"`
	StepMs       float64 `json:"step_ms"`
	TokensPerSec float64 `json:"tokens_per_s"`
	PeakBytes    int64   `json:"peak_bytes"`
}

// Accum is experiment 6: one batch of B×k sequences against k
// accumulated micro-batches of B.
type Accum struct {
	Batch int `json:"batch"` // B
	Steps int `json:"steps"` // k
	// MaxAbsDiff is the largest difference between the two gradients of
	// any parameter element; MaxAbsGrad the largest gradient element, and
	// RelDiff their ratio.
	MaxAbsDiff float64 `json:"max_abs_diff"`
	MaxAbsGrad float64 `json:"max_abs_grad"`
	RelDiff    float64 `json:"rel_diff"`
	// OneBatch and Accumulated are full training steps of each.
	OneBatch    StepPoint `json:"one_batch"`
	Accumulated StepPoint `json:"accumulated"`
	Summary     string    `json:"summary"`
}

// Speedup is experiment 7: a training step on the GPU against the CPU.
type Speedup struct {
	NotApplicable
	CPU     *StepPoint `json:"cpu,omitempty"`
	GPU     *StepPoint `json:"gpu,omitempty"`
	Speedup float64    `json:"speedup,omitempty"` // CPU step time / GPU step time
	Summary string     `json:"summary,omitempty"`
}

// stepsFor gives a benchmark's timed steps: enough for about tokens
// tokens, at least 3 and at most most.
func stepsFor(batch, block, tokens, most int) int {
	return min(most, max(3, tokens/(batch*block)))
}

// utilMeter measures the device's utilisation, a fraction from 0 to 1,
// over a call of fn: on a GPU, the mean of NVML's utilisation from a
// monitor/sysstat Sampler; on the CPU, the process's CPU time over the
// wall time and the worker threads (what the Sampler's process CPU reads,
// at nanosecond rather than clock-tick resolution). -1 means not measured.
func utilMeter(dev tensor.Device, be backend.Backend) (source string, measure func(fn func() error) (float64, error)) {
	if dev.OnCPU() {
		if _, ok := cpuTime(); !ok {
			return "not measured on this system", func(fn func() error) (float64, error) { return -1, fn() }
		}
		n := threads(be)
		return fmt.Sprintf("process CPU time / wall time / %d worker threads over each benchmark, model set-up included", n),
			func(fn func() error) (float64, error) {
				c0, _ := cpuTime()
				t0 := time.Now()
				err := fn()
				wall := time.Since(t0)
				c1, _ := cpuTime()
				return math.Min(1, float64(c1-c0)/float64(wall)/float64(n)), err
			}
	}
	probe, err := sysstat.NewGPUSampler(dev.Index, 50*time.Millisecond)
	if err != nil {
		return "not measured: " + err.Error(), func(fn func() error) (float64, error) { return -1, fn() }
	}
	name := probe.Stop().Source
	return fmt.Sprintf("mean NVML utilisation of %s (a monitor/sysstat Sampler every 50 ms) over each benchmark, model set-up included", name),
		func(fn func() error) (float64, error) {
			s, err := sysstat.NewGPUSampler(dev.Index, 50*time.Millisecond)
			if err != nil {
				return -1, fn()
			}
			s.Start()
			err = fn()
			st := s.Stop()
			if st.Samples == 0 {
				return -1, err
			}
			return st.MeanUtil / 100, err
		}
}

// batchSweep runs experiment 4: training steps at batch sizes 1, 2, 4,
// ... with their utilisation, and MFU against the fp32 peak of the
// matrix-product experiment mm (returned as peak, 0 if none).
func batchSweep(dev tensor.Device, be backend.Backend, o Options, m *Model, mm MatMul) (s report.Sweep, peak float64, err error) {
	w := o.Log
	maxBatch := o.MaxBatch
	if maxBatch <= 0 {
		switch {
		case o.Quick:
			maxBatch = 4
		case dev.OnCPU():
			maxBatch = 64
		default:
			maxBatch = 1024
		}
	}
	bound := o.MaxStepMs
	if bound <= 0 {
		bound = 2000
	}
	tokens, warmup, most := 32768, 3, 30
	if o.Quick {
		tokens, warmup = 1024, 1
	}
	if !dev.OnCPU() {
		tokens, most = 1<<20, 200
	}
	for _, p := range mm.Points {
		if p.DType == config.FP32 && p.PeakTFLOPs > 0 {
			peak = p.PeakTFLOPs
		}
	}
	var measure func(func() error) (float64, error)
	s.UtilSource, measure = utilMeter(dev, be)
	fmt.Fprintf(w, "   %6s %12s %10s %10s %8s %8s %12s\n", "batch", "tokens/s", "ms/step", "GFLOP/s", "MFU", "util", "peak memory")
	s.Stop = fmt.Sprintf("reached the largest batch asked for, %d", maxBatch)
	for b := 1; b <= maxBatch; b *= 2 {
		c := o.Model
		c.BatchSize = b
		var r bench.Result
		util, err := measure(func() (err error) {
			r, err = bench.Steps(c, o.Vocab, warmup, stepsFor(b, c.BlockSize, tokens, most))
			return err
		})
		if isOOM(err) {
			s.Stop = fmt.Sprintf("batch %d ran out of device memory", b)
			fmt.Fprintf(w, "   %6d out of memory: stopped\n", b)
			break
		}
		if err != nil {
			return s, peak, fmt.Errorf("batch %d: %w", b, err)
		}
		m.Params = r.NumParams
		p := report.SweepPoint{Batch: b, TokensPerSec: r.TokensPerSec, StepMs: r.MsPerStep, GFLOPs: r.GFLOPs, Util: util, PeakBytes: r.PeakBytes}
		if peak > 0 {
			p.MFU = r.GFLOPs / 1e3 / peak
		}
		s.Points = append(s.Points, p)
		fmt.Fprintf(w, "   %6d %12.0f %10.2f %10.1f %8s %8s %12s\n", b, p.TokensPerSec, p.StepMs, p.GFLOPs, percent(p.MFU), percent(p.Util), units.Bytes(p.PeakBytes))
		if p.StepMs > bound {
			s.Stop = fmt.Sprintf("a step at batch %d took %.0f ms, over the %.0f ms bound", b, p.StepMs, bound)
			break
		}
	}
	if len(s.Points) == 0 {
		return s, peak, fmt.Errorf("not even batch 1 fits: %s", s.Stop)
	}
	first, best := s.Points[0], s.Points[0]
	for _, p := range s.Points {
		if p.TokensPerSec > best.TokensPerSec {
			best = p
		}
	}
	s.Summary = fmt.Sprintf("tokens/s rises from %.0f at batch 1 to %.0f at batch %d (%.1fx): small batches leave the device idle between small kernels, "+
		"and past the knee a larger batch only lengthens the step (the sweep ended because it %s)", first.TokensPerSec, best.TokensPerSec, best.Batch,
		best.TokensPerSec/first.TokensPerSec, strings.TrimPrefix(s.Stop, "a "))
	fmt.Fprintf(w, "   utilisation: %s\n", s.UtilSource)
	fmt.Fprintf(w, "   => %s\n", s.Summary)
	return s, peak, nil
}

func precisions(dev tensor.Device, o Options) ([]StepPoint, error) {
	w := o.Log
	warmup, steps := 3, 20
	if o.Quick {
		warmup, steps = 1, 3
	}
	var out []StepPoint
	fmt.Fprintf(w, "   %6s %6s %10s %12s %12s\n", "prec", "batch", "ms/step", "tokens/s", "peak memory")
	for _, p := range []config.Precision{config.FP32, config.BF16} {
		c := o.Model
		c.Precision = p.String()
		r, err := bench.Steps(c, o.Vocab, warmup, steps)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p, err)
		}
		sp := StepPoint{Name: p.String(), Batch: c.BatchSize, StepMs: r.MsPerStep, TokensPerSec: r.TokensPerSec, PeakBytes: r.PeakBytes}
		out = append(out, sp)
		fmt.Fprintf(w, "   %6s %6d %10.2f %12.0f %12s\n", p, sp.Batch, sp.StepMs, sp.TokensPerSec, units.Bytes(sp.PeakBytes))
	}
	f, b := out[0], out[1]
	why := "bf16 halves the bytes of the products' operands and runs them on tensor cores"
	if dev.OnCPU() {
		why = "on the CPU bf16 saves bandwidth but adds casts, and its products are fast only with AVX512-BF16"
	}
	fmt.Fprintf(w, "   => bf16/fp32: %.2fx the tokens/s, %.2fx the peak memory (master weights, AdamW state, norms and the loss stay fp32); %s\n",
		b.TokensPerSec/f.TokensPerSec, float64(b.PeakBytes)/float64(max(f.PeakBytes, 1)), why)
	return out, nil
}

func gradAccum(dev tensor.Device, o Options) (Accum, error) {
	w := o.Log
	a := Accum{Batch: o.AccumBatch, Steps: o.AccumSteps}
	if a.Batch <= 0 {
		a.Batch = 4
	}
	if a.Steps <= 0 {
		a.Steps = 4
	}
	if err := accumGrads(dev, o, &a); err != nil {
		return a, err
	}
	warmup, steps := 3, 15
	if o.Quick {
		warmup, steps = 1, 3
	}
	one := o.Model
	one.BatchSize = a.Batch * a.Steps
	r1, err := bench.Steps(one, o.Vocab, warmup, steps)
	if err != nil {
		return a, err
	}
	acc := o.Model
	acc.BatchSize, acc.GradAccum = a.Batch, a.Steps
	r2, err := bench.Steps(acc, o.Vocab, warmup, steps)
	if err != nil {
		return a, err
	}
	a.OneBatch = StepPoint{Name: fmt.Sprintf("batch %d", one.BatchSize), Batch: one.BatchSize, StepMs: r1.MsPerStep, TokensPerSec: r1.TokensPerSec, PeakBytes: r1.PeakBytes}
	a.Accumulated = StepPoint{Name: fmt.Sprintf("%d x batch %d", a.Steps, a.Batch), Batch: one.BatchSize, StepMs: r2.MsPerStep, TokensPerSec: r2.TokensPerSec, PeakBytes: r2.PeakBytes}
	fmt.Fprintf(w, "   %-14s %10s %12s %12s\n", "", "ms/step", "tokens/s", "peak memory")
	for _, p := range []StepPoint{a.OneBatch, a.Accumulated} {
		fmt.Fprintf(w, "   %-14s %10.2f %12.0f %12s\n", p.Name, p.StepMs, p.TokensPerSec, units.Bytes(p.PeakBytes))
	}
	fmt.Fprintf(w, "   gradient: max |difference| %.3g, max |gradient| %.3g, relative %.2g\n", a.MaxAbsDiff, a.MaxAbsGrad, a.RelDiff)
	a.Summary = fmt.Sprintf("%d micro-batches of %d give the gradient of one batch of %d to %.1g (relative), in %.2fx its step time and %.2fx its peak memory: "+
		"accumulation trades speed for memory, not accuracy", a.Steps, a.Batch, one.BatchSize, a.RelDiff,
		a.Accumulated.StepMs/a.OneBatch.StepMs, float64(a.Accumulated.PeakBytes)/float64(max(a.OneBatch.PeakBytes, 1)))
	fmt.Fprintf(w, "   => %s\n", a.Summary)
	return a, nil
}

// accumGrads computes the model's gradient on one batch of B×k random
// sequences, then as the sum of k micro-batches' gradients of loss/k, and
// compares them.
func accumGrads(dev tensor.Device, o Options, a *Accum) error {
	return compareAccum(dev, o, a, 1/float32(a.Steps))
}

// compareAccum is accumGrads with each micro-batch's loss scaled by scale.
func compareAccum(dev tensor.Device, o Options, a *Accum, scale float32) error {
	c := o.Model
	c.Dropout = 0 // the same function in both passes
	mc := c.ModelConfig(o.Vocab)
	B, k, T := a.Batch, a.Steps, c.BlockSize
	r := rand.New(rand.NewPCG(c.Seed, 7))
	x := make([]int32, B*k*T)
	y := make([]int32, B*k*T)
	for i := range x {
		x[i], y[i] = int32(r.IntN(o.Vocab)), int32(r.IntN(o.Vocab))
	}
	return tensor.Catch(func() {
		m, err := model.New(mc, dev, c.Seed)
		if err != nil {
			panic(&tensor.Error{Op: "lab", Err: err})
		}
		params := m.Parameters()
		grads := func() [][]float32 {
			out := make([][]float32, len(params))
			for i, p := range params {
				if p.T.Grad != nil {
					out[i] = p.T.Grad.Float32s()
				}
				tensor.ZeroGrad(p.T)
			}
			return out
		}
		tensor.Step(func() {
			xt := tensor.FromInt32s(dev, x, B*k, T)
			yt := tensor.FromInt32s(dev, y, B*k, T)
			m.Loss(xt, yt).Backward()
		})
		full := grads()
		for j := 0; j < k; j++ {
			tensor.Step(func() {
				lo, hi := j*B*T, (j+1)*B*T
				xt := tensor.FromInt32s(dev, x[lo:hi], B, T)
				yt := tensor.FromInt32s(dev, y[lo:hi], B, T)
				tensor.Scale(m.Loss(xt, yt), scale).Backward()
			})
		}
		acc := grads()
		for i := range full {
			if len(full[i]) != len(acc[i]) {
				panic(&tensor.Error{Op: "lab", Msg: fmt.Sprintf("parameter %s has a gradient in one pass only", params[i].Name)})
			}
			for e := range full[i] {
				a.MaxAbsDiff = math.Max(a.MaxAbsDiff, math.Abs(float64(full[i][e])-float64(acc[i][e])))
				a.MaxAbsGrad = math.Max(a.MaxAbsGrad, math.Abs(float64(full[i][e])))
			}
		}
		if a.MaxAbsGrad > 0 {
			a.RelDiff = a.MaxAbsDiff / a.MaxAbsGrad
		}
		for _, p := range params {
			p.T.Free()
		}
	})
}

func speedup(dev tensor.Device, o Options) (Speedup, error) {
	w := o.Log
	if dev.OnCPU() {
		s := Speedup{NotApplicable: NotApplicable{Note: "not applicable: no GPU here, so there is nothing to compare the CPU with"}}
		fmt.Fprintf(w, "   %s\n", s.Note)
		return s, nil
	}
	warmup, steps := 3, 10
	if o.Quick {
		warmup, steps = 1, 3
	}
	s := Speedup{NotApplicable: NotApplicable{Applicable: true}}
	fmt.Fprintf(w, "   %8s %6s %10s %12s\n", "device", "batch", "ms/step", "tokens/s")
	for _, d := range []tensor.Device{tensor.CPU, dev} {
		c := o.Model
		c.Device = d.String()
		r, err := bench.Steps(c, o.Vocab, warmup, steps)
		if err != nil {
			return s, fmt.Errorf("%s: %w", d, err)
		}
		p := &StepPoint{Name: d.String(), Batch: c.BatchSize, StepMs: r.MsPerStep, TokensPerSec: r.TokensPerSec, PeakBytes: r.PeakBytes}
		if d == tensor.CPU {
			s.CPU = p
		} else {
			s.GPU = p
		}
		fmt.Fprintf(w, "   %8s %6d %10.2f %12.0f\n", d, p.Batch, p.StepMs, p.TokensPerSec)
	}
	s.Speedup = s.CPU.StepMs / s.GPU.StepMs
	s.Summary = fmt.Sprintf("a training step at batch %d is %.1fx faster on %s than on the CPU's %d threads; the gap widens with batch and width, "+
		"since a small model leaves most of the GPU idle", o.Model.BatchSize, s.Speedup, dev, benchThreads(tensor.CPU))
	fmt.Fprintf(w, "   => %s\n", s.Summary)
	return s, nil
}

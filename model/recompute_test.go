package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// randomBatch draws token ids and targets [B, T] below vocab.
func randomBatch(seed uint64, vocab, B, T int) (x, y []int32) {
	r := rng.New(seed)
	x, y = make([]int32, B*T), make([]int32, B*T)
	for i := range x {
		x[i], y[i] = int32(r.Intn(vocab)), int32(r.Intn(vocab))
	}
	return x, y
}

// lossAndGrads runs one forward and backward pass with the dropout seed
// set as the trainer sets it, under autocast dt, and returns the loss and
// every parameter's gradient, clearing them afterwards.
func lossAndGrads(t *testing.T, m *GPT, dt tensor.DType, x, y []int32, B, T int) (float32, [][]float32) {
	t.Helper()
	var loss float32
	m.SetDropout(77, 3)
	err := tensor.Catch(func() {
		tensor.Step(func() {
			var l *tensor.Tensor
			tensor.Autocast(dt, func() {
				l = m.Loss(tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T))
			})
			loss = l.Item()
			l.Backward()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	var grads [][]float32
	for _, p := range m.Parameters() {
		if p.Grad() == nil {
			t.Fatalf("%s got no gradient", p.Name)
		}
		grads = append(grads, p.Grad().Float32s())
		tensor.ZeroGrad(p.T)
	}
	return loss, grads
}

// TestRecomputeGradients checks that recomputing the blocks in the
// backward pass gives the loss and gradients of the plain pass bit for
// bit, with dropout drawing masks inside the blocks, with and without
// biases, in F32 and under BF16 autocast.
func TestRecomputeGradients(t *testing.T) {
	for _, tc := range []struct {
		bias bool
		dt   tensor.DType
	}{{true, tensor.F32}, {false, tensor.F32}, {true, tensor.BF16}} {
		t.Run(fmt.Sprintf("bias=%v,%v", tc.bias, tc.dt), func(t *testing.T) {
			cfg := Config{VocabSize: 29, BlockSize: 8, NLayer: 3, NHead: 2, NEmbd: 16, Dropout: 0.2, Bias: tc.bias}
			m, err := New(cfg, tensor.CPU, 5)
			if err != nil {
				t.Fatal(err)
			}
			const B, T = 3, 8
			x, y := randomBatch(9, cfg.VocabSize, B, T)
			plainLoss, plain := lossAndGrads(t, m, tc.dt, x, y, B, T)
			m.SetRecompute(true)
			reLoss, re := lossAndGrads(t, m, tc.dt, x, y, B, T)
			m.SetRecompute(false)
			againLoss, again := lossAndGrads(t, m, tc.dt, x, y, B, T)
			if plainLoss != reLoss || plainLoss != againLoss {
				t.Fatalf("loss %v plain, %v with recompute, %v plain again", plainLoss, reLoss, againLoss)
			}
			ps := m.Parameters()
			for i := range plain {
				for j := range plain[i] {
					if math.Float32bits(plain[i][j]) != math.Float32bits(re[i][j]) {
						t.Fatalf("%s[%d]: %v plain, %v with recompute", ps[i].Name, j, plain[i][j], re[i][j])
					}
					if plain[i][j] != again[i][j] {
						t.Fatalf("%s[%d]: %v, then %v: the plain pass is not repeatable", ps[i].Name, j, plain[i][j], again[i][j])
					}
				}
			}
			// Without the saved dropout state the recomputed masks differ,
			// so the comparison above can fail.
			if equalBits(blockGrad(m, x, B, T, true), blockGrad(m, x, B, T, false)) {
				t.Fatal("recomputing without restoring the dropout RNG gave the same gradient; the test cannot tell")
			}
		})
	}
}

// blockGrad is the gradient of sum(block 0's output) with respect to its
// MLP's first weight, with block 0 recomputed with or without the
// dropout RNG.
func blockGrad(m *GPT, x []int32, B, T int, withRNG bool) []float32 {
	w := m.Blocks[0].MLP.(*nn.MLP).CFC.W.T
	p := &m.pass
	var g []float32
	tensor.Step(func() {
		m.SetDropout(77, 3)
		h := m.embed(tensor.FromInt32s(tensor.CPU, x, B, T), p)
		var r *tensor.DropoutStream
		if withRNG {
			r = p.rng()
		}
		out := tensor.RecomputeRNG(r, p.recomputed(m, 0), h)
		tensor.Sum(out).Backward()
		g = w.Grad.Float32s()
	})
	for _, p := range m.Parameters() {
		tensor.ZeroGrad(p.T)
	}
	return g
}

func equalBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// stepPeak returns the pool's peak allocation above what was allocated
// before one training step (forward, backward, gradients kept).
func stepPeak(t *testing.T, m *GPT, x, y []int32, B, T int) int64 {
	t.Helper()
	for _, p := range m.Parameters() {
		tensor.ZeroGrad(p.T)
	}
	run := func() {
		tensor.Step(func() {
			l := m.Loss(tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T))
			l.Backward()
		})
	}
	run() // the gradients now exist, as in a steady-state step
	tensor.ResetPeakMemory(tensor.CPU)
	base := tensor.MemStats(tensor.CPU).Allocated
	run()
	for _, p := range m.Parameters() {
		tensor.ZeroGrad(p.T)
	}
	return tensor.MemStats(tensor.CPU).Peak - base
}

// TestRecomputePeakMemory measures the device pool's peak during a
// training step with and without recomputation: it must be lower with.
func TestRecomputePeakMemory(t *testing.T) {
	for _, c := range []struct{ layers, embd, heads, block, batch int }{
		{4, 128, 4, 64, 12},
		{6, 192, 6, 128, 8},
	} {
		cfg := Config{VocabSize: 65, BlockSize: c.block, NLayer: c.layers, NHead: c.heads, NEmbd: c.embd, Dropout: 0.1, Bias: true}
		m, err := New(cfg, tensor.CPU, 1)
		if err != nil {
			t.Fatal(err)
		}
		x, y := randomBatch(3, cfg.VocabSize, c.batch, c.block)
		plain := stepPeak(t, m, x, y, c.batch, c.block)
		m.SetRecompute(true)
		re := stepPeak(t, m, x, y, c.batch, c.block)
		t.Logf("%d layers, n_embd %d, block %d, batch %d: step peak %.1f MiB plain, %.1f MiB with recompute (%.2f×)",
			c.layers, c.embd, c.block, c.batch, mib(plain), mib(re), float64(re)/float64(plain))
		if re >= plain {
			t.Errorf("peak %d bytes with recompute, %d without", re, plain)
		}
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// TestRecomputeAllocations counts Go heap allocations of a steady-state
// forward and backward pass, with and without recomputation, with a
// gradient-ready hook installed: recompute records, walk memory and
// scopes are pooled, so there are none.
func TestRecomputeAllocations(t *testing.T) {
	cfg := Config{VocabSize: 65, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 32, Dropout: 0.1, Bias: true}
	m, err := New(cfg, tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 16
	x, y := randomBatch(4, cfg.VocabSize, B, T)
	var xt, yt *tensor.Tensor
	tensor.Persist(func() {
		xt, yt = tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T)
	})
	ps := m.Parameters()
	reported := 0
	defer tensor.SetGradReadyHook(tensor.SetGradReadyHook(func(*tensor.Tensor) { reported++ }))
	step := func() {
		tensor.Step(func() { m.Loss(xt, yt).Backward() })
		for _, p := range ps {
			tensor.ZeroGradInPlace(p.T)
		}
	}
	for _, recompute := range []bool{false, true} {
		m.SetRecompute(recompute)
		for i := 0; i < 3; i++ {
			step()
		}
		reported = 0
		allocs := testing.AllocsPerRun(5, step)
		if allocs != 0 { // a collection may empty the kernels' scratch pools once
			allocs = testing.AllocsPerRun(5, step)
		}
		t.Logf("recompute=%v: %.0f heap allocations per step", recompute, allocs)
		if allocs != 0 {
			t.Errorf("recompute=%v: %.0f heap allocations per steady-state step, want 0", recompute, allocs)
		}
		if reported%len(ps) != 0 || reported == 0 {
			t.Errorf("recompute=%v: %d leaves reported, not a multiple of %d parameters", recompute, reported, len(ps))
		}
	}
}

// BenchmarkRecompute times forward and backward passes of a small GPT
// (4 layers, n_embd 128, block 64, batch 12) with and without
// recomputation, alternating the two so that a busy machine slows both
// alike, and reports the median milliseconds of each and the median ratio
// of the pairs: recomputation's time cost.
func BenchmarkRecompute(b *testing.B) {
	cfg := Config{VocabSize: 65, BlockSize: 64, NLayer: 4, NHead: 4, NEmbd: 128, Dropout: 0.1, Bias: true}
	const B = 12
	x, y := randomBatch(3, cfg.VocabSize, B, cfg.BlockSize)
	var xt, yt *tensor.Tensor
	tensor.Persist(func() {
		xt, yt = tensor.FromInt32s(tensor.CPU, x, B, cfg.BlockSize), tensor.FromInt32s(tensor.CPU, y, B, cfg.BlockSize)
	})
	var steps [2]func() time.Duration
	for i := range steps {
		m, err := New(cfg, tensor.CPU, 1)
		if err != nil {
			b.Fatal(err)
		}
		m.SetRecompute(i == 1)
		ps := m.Parameters()
		steps[i] = func() time.Duration {
			t0 := time.Now()
			tensor.Step(func() { m.Loss(xt, yt).Backward() })
			dt := time.Since(t0)
			for _, p := range ps {
				tensor.ZeroGradInPlace(p.T)
			}
			return dt
		}
		steps[i]() // fill the pools
	}
	var plain, re, ratio []float64
	for b.Loop() {
		p, r := steps[0](), steps[1]()
		plain = append(plain, p.Seconds()*1e3)
		re = append(re, r.Seconds()*1e3)
		ratio = append(ratio, r.Seconds()/p.Seconds())
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(plain), "plain-ms")
	b.ReportMetric(median(re), "recompute-ms")
	b.ReportMetric(median(ratio), "ratio")
}

// TestGradReadyHookGPT checks the gradient-ready hook on the GPT, with and
// without recomputation: every parameter is reported exactly once per
// Backward, the tied token embedding (read by the first op and the head)
// among the last; its gradient when reported is the one Backward ends
// with; blocks are reported from the last to the first, each block's
// parameters before any of the block below.
func TestGradReadyHookGPT(t *testing.T) {
	cfg := Config{VocabSize: 31, BlockSize: 8, NLayer: 3, NHead: 2, NEmbd: 16, Dropout: 0.1, Bias: true}
	m, err := New(cfg, tensor.CPU, 2)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 8
	x, y := randomBatch(6, cfg.VocabSize, B, T)
	ps := m.Parameters()
	index := map[*tensor.Tensor]int{}
	for i, p := range ps {
		index[p.T] = i
	}
	block := func(name string) int { // the block a parameter belongs to, or -1
		var l int
		if _, err := fmt.Sscanf(name, "transformer.h.%d.", &l); err != nil {
			return -1
		}
		return l
	}
	for _, recompute := range []bool{false, true} {
		m.SetRecompute(recompute)
		for pass := 0; pass < 2; pass++ { // the second Backward accumulates
			var order []int
			seen := make([][]float32, len(ps))
			prev := tensor.SetGradReadyHook(func(leaf *tensor.Tensor) {
				i, ok := index[leaf]
				if !ok {
					t.Errorf("reported a leaf that is not a parameter: %v", leaf)
					return
				}
				order = append(order, i)
				seen[i] = leaf.Grad.Float32s()
			})
			tensor.Step(func() {
				m.SetDropout(uint64(pass), 3)
				m.Loss(tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T)).Backward()
			})
			tensor.SetGradReadyHook(prev)
			count := make([]int, len(ps))
			for _, i := range order {
				count[i]++
			}
			for i, p := range ps {
				if count[i] != 1 {
					t.Fatalf("recompute=%v: %s reported %d times", recompute, p.Name, count[i])
				}
				if !equalBits(seen[i], p.Grad().Float32s()) {
					t.Errorf("recompute=%v: %s's gradient changed after it was reported", recompute, p.Name)
				}
			}
			names := make([]string, len(order))
			for k, i := range order {
				names[k] = ps[i].Name
			}
			if pass == 0 {
				t.Logf("recompute=%v: %v", recompute, names)
			}
			if !strings.HasPrefix(names[0], "transformer.ln_f.") {
				t.Errorf("recompute=%v: %s reported first, want the final LayerNorm", recompute, names[0])
			}
			wte := slices.Index(names, "transformer.wte.weight")
			last := cfg.NLayer
			for k, n := range names {
				l := block(n)
				if l < 0 {
					continue
				}
				if l > last {
					t.Errorf("recompute=%v: %s reported after a parameter of block %d", recompute, n, last)
				}
				last = l
				if k > wte {
					t.Errorf("recompute=%v: %s reported after the tied embedding", recompute, n)
				}
			}
		}
		for _, p := range ps {
			tensor.ZeroGrad(p.T)
		}
	}
	m.SetRecompute(false)
}

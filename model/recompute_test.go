package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
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
	m.SetDropoutSeed(77)
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
// MLP's first weight, with block 0 checkpointed with or without the
// dropout RNG.
func blockGrad(m *GPT, x []int32, B, T int, withRNG bool) []float32 {
	w := m.Blocks[0].MLP.CFC.W.T
	m.SetRecompute(true)
	defer m.SetRecompute(false)
	var g []float32
	tensor.Step(func() {
		m.SetDropoutSeed(77)
		ids := tensor.FromInt32s(tensor.CPU, x, B, T)
		h := m.Drop.Forward(tensor.Add(m.WTE.Forward(ids), m.WPE.Forward(m.positionsFrom0(B, T))))
		var out *tensor.Tensor
		if withRNG {
			out = tensor.CheckpointRNG(m.dropRNG, m.Blocks[0].checkpointed, h)
		} else {
			out = tensor.Checkpoint(m.Blocks[0].checkpointed, h)
		}
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
// forward and backward pass with recomputation: checkpoint records, walk
// memory and scopes are pooled, so there are none.
func TestRecomputeAllocations(t *testing.T) {
	cfg := Config{VocabSize: 65, BlockSize: 16, NLayer: 2, NHead: 2, NEmbd: 32, Dropout: 0.1, Bias: true}
	m, err := New(cfg, tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	m.SetRecompute(true)
	const B, T = 2, 16
	x, y := randomBatch(4, cfg.VocabSize, B, T)
	var xt, yt *tensor.Tensor
	tensor.Persist(func() {
		xt, yt = tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T)
	})
	ps := m.Parameters()
	step := func() {
		tensor.Step(func() { m.Loss(xt, yt).Backward() })
		for _, p := range ps {
			tensor.ZeroGradInPlace(p.T)
		}
	}
	for i := 0; i < 3; i++ {
		step()
	}
	allocs := testing.AllocsPerRun(5, step)
	if allocs != 0 { // a collection may empty the kernels' scratch pools once
		allocs = testing.AllocsPerRun(5, step)
	}
	t.Logf("%.0f heap allocations per step with recompute", allocs)
	if allocs != 0 {
		t.Errorf("%.0f heap allocations per steady-state step with recompute, want 0", allocs)
	}
}

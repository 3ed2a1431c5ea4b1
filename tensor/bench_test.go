package tensor

import "testing"

// benchModel is a small Transformer block's worth of ops on the CPU,
// sized so that the per-op bookkeeping (headers, scopes, the tape, the
// device-to-program lookup) is a visible part of a step: what the
// benchmarks below watch for regressions.
type benchModel struct {
	emb, ln1w, ln1b, qkvw, projw, fc1w, fc1b, fc2w *Tensor
	ids, targets                                   *Tensor
	drop                                           *DropoutStream
	mlp                                            RecomputeFunc // made once: a closure made per call would allocate
}

func newBenchModel(p *Program, dev Device, B, T, C, V int) *benchModel {
	r := NewRNG(1)
	m := &benchModel{drop: &DropoutStream{Key: 2}}
	m.mlp = func(a ...*Tensor) *Tensor {
		h := LayerNorm(a[0], m.ln1w, m.ln1b, 1e-5)
		h = Dropout(GELU(Linear(h, m.fc1w, m.fc1b)), 0.1, m.drop)
		return Add(a[0], Linear(h, m.fc2w, nil))
	}
	ids := make([]int32, B*T)
	targets := make([]int32, B*T)
	for i := range ids {
		ids[i], targets[i] = int32(i*7%V), int32(i*11%V)
	}
	p.Persist(func() {
		m.emb = Randn(dev, r, 0.02, V, C).SetRequiresGrad(true)
		m.ln1w = Ones(dev, C).SetRequiresGrad(true)
		m.ln1b = Zeros(dev, C).SetRequiresGrad(true)
		m.qkvw = Randn(dev, r, 0.02, C, 3*C).SetRequiresGrad(true)
		m.projw = Randn(dev, r, 0.02, C, C).SetRequiresGrad(true)
		m.fc1w = Randn(dev, r, 0.02, C, 4*C).SetRequiresGrad(true)
		m.fc1b = Zeros(dev, 4*C).SetRequiresGrad(true)
		m.fc2w = Randn(dev, r, 0.02, 4*C, C).SetRequiresGrad(true)
		m.ids = FromInt32s(dev, ids, B, T)
		m.targets = FromInt32s(dev, targets, B, T)
	})
	return m
}

func (m *benchModel) params() []*Tensor {
	return []*Tensor{m.emb, m.ln1w, m.ln1b, m.qkvw, m.projw, m.fc1w, m.fc1b, m.fc2w}
}

// loss runs the block forward: attention and an MLP with dropout, one of
// them recomputed, and the tied head's cross-entropy.
func (m *benchModel) loss(heads int) *Tensor {
	x := Embedding(m.emb, m.ids)
	h := LayerNorm(x, m.ln1w, m.ln1b, 1e-5)
	x = Add(x, Linear(Attention(Linear(h, m.qkvw, nil), heads), m.projw, nil))
	x = RecomputeRNG(m.drop, m.mlp, x)
	return CrossEntropy(LinearT(x, m.emb), m.targets)
}

// BenchmarkForwardBackward is one training step of the small block
// (forward, backward, gradients zeroed in place) on the default program.
func BenchmarkForwardBackward(b *testing.B) {
	m := newBenchModel(DefaultProgram(), CPU, 2, 16, 32, 64)
	params := m.params()
	b.ReportAllocs()
	for b.Loop() {
		Step(func() { m.loss(4).Backward() })
		ZeroGradInPlace(params...)
	}
}

// BenchmarkForwardBackwardProgram is BenchmarkForwardBackward in a
// program of its own, with three others holding devices: every op looks
// its program up in the list of claimed devices.
func BenchmarkForwardBackwardProgram(b *testing.B) {
	for i := range 3 {
		q, err := NewProgram(Device{Kind: "cpu", Index: 20 + i})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
	}
	dev := Device{Kind: "cpu", Index: 23}
	p, err := NewProgram(dev)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	m := newBenchModel(p, dev, 2, 16, 32, 64)
	params := m.params()
	b.ReportAllocs()
	for b.Loop() {
		p.Step(func() { m.loss(4).Backward() })
		ZeroGradInPlace(params...)
	}
}

// BenchmarkOpOverhead is a step of many ops on tiny tensors, where the
// kernels cost little and the bookkeeping of each op dominates.
func BenchmarkOpOverhead(b *testing.B) {
	var x, w *Tensor
	Persist(func() {
		x = Ones(CPU, 4, 4).SetRequiresGrad(true)
		w = Ones(CPU, 4, 4).SetRequiresGrad(true)
	})
	b.ReportAllocs()
	for b.Loop() {
		Step(func() {
			y := x
			for range 50 {
				y = Scale(Add(MatMul(y, w), x), 0.5)
			}
			Sum(y).Backward()
		})
		ZeroGradInPlace(x, w)
	}
}

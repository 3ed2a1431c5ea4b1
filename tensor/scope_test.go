package tensor

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// slot is one pass of a micro-batch in a pipeline stage's schedule.
type slot struct {
	mb  int
	fwd bool
}

// oneFOneB returns the order of a 1F1B stage with at most inFlight
// micro-batches between their forward and backward passes: inFlight
// forward passes, then one backward and one forward pass in turn, then
// the remaining backward passes.
func oneFOneB(micros, inFlight int) []slot {
	var order []slot
	f, b := 0, 0
	for ; f < min(inFlight, micros); f++ {
		order = append(order, slot{f, true})
	}
	for ; b < micros; b++ {
		order = append(order, slot{b, false})
		if f < micros {
			order = append(order, slot{f, true})
			f++
		}
	}
	return order
}

// mbModel is a small MLP trained on micro-batches: Linear, GELU and
// LayerNorm, then a recomputed Linear and GELU, then a head whose weight
// is a Recompute of a parameter that the step makes once and every
// micro-batch reads (a tensor of the step's scope in each micro-batch's
// graph), and CrossEntropy.
type mbModel struct {
	p                              *Program
	w1, b1, lnw, lnb, w2, b2, head *Tensor
	xs, ys                         []*Tensor
	mlp, halve                     RecomputeFunc
	scopes                         []Scope   // one per micro-batch, kept across steps
	losses                         []*Tensor // the micro-batches' losses, during a step
	lossValues                     []float32
	order                          []slot
	headWeight                     *Tensor // the step's shared head weight
}

const mbRows, mbIn, mbHidden, mbClasses = 6, 8, 16, 5

func newMBModel(p *Program, dev Device, micros int) *mbModel {
	r := NewRNG(42)
	m := &mbModel{p: p, order: oneFOneB(micros, 2)}
	m.mlp = func(a ...*Tensor) *Tensor { return GELU(Linear(a[0], m.w2, m.b2)) }
	m.halve = func(a ...*Tensor) *Tensor { return Scale(a[0], 0.5) }
	p.Persist(func() {
		m.w1 = Randn(dev, r, 0.4, mbIn, mbHidden).SetRequiresGrad(true)
		m.b1 = Randn(dev, r, 0.1, mbHidden).SetRequiresGrad(true)
		m.lnw = Ones(dev, mbHidden).SetRequiresGrad(true)
		m.lnb = Zeros(dev, mbHidden).SetRequiresGrad(true)
		m.w2 = Randn(dev, r, 0.3, mbHidden, mbHidden).SetRequiresGrad(true)
		m.b2 = Randn(dev, r, 0.1, mbHidden).SetRequiresGrad(true)
		m.head = Randn(dev, r, 0.5, mbHidden, mbClasses).SetRequiresGrad(true)
		for mb := range micros {
			m.xs = append(m.xs, Randn(dev, r, 1, mbRows, mbIn))
			ys := make([]int32, mbRows)
			for i := range ys {
				ys[i] = int32((i*3 + mb) % mbClasses)
			}
			m.ys = append(m.ys, FromInt32s(dev, ys, mbRows))
		}
	})
	m.scopes = make([]Scope, micros)
	m.losses = make([]*Tensor, micros)
	m.lossValues = make([]float32, micros)
	return m
}

func (m *mbModel) params() []*Tensor { return []*Tensor{m.w1, m.b1, m.lnw, m.lnb, m.w2, m.b2, m.head} }

func (m *mbModel) free() {
	for _, t := range append(m.params(), append(m.xs, m.ys...)...) {
		ZeroGrad(t)
		t.Free()
	}
}

// loss is micro-batch mb's forward pass, with head as the head's weight.
func (m *mbModel) loss(mb int, head *Tensor) *Tensor {
	h := LayerNorm(GELU(Linear(m.xs[mb], m.w1, m.b1)), m.lnw, m.lnb, 1e-5)
	h = m.p.Recompute(m.mlp, h)
	return CrossEntropy(Linear(h, head, nil), m.ys[mb])
}

// sequentialStep runs every micro-batch's forward and backward pass in
// turn in one Step of the model's program, without detached scopes: every
// graph lives until the step ends. Each micro-batch makes its own head
// weight, since a Backward outside In releases the graph it walks.
func (m *mbModel) sequentialStep() {
	m.p.Step(func() {
		for mb := range m.losses {
			loss := m.loss(mb, m.p.Recompute(m.halve, m.head))
			m.lossValues[mb] = loss.Item()
			loss.Backward()
		}
	})
}

// scopedStep runs the 1F1B order in one Step, each micro-batch in its
// detached scope, freed right after its backward pass when freeEach is
// set, else all at the end of the step, the last first. The head weight is made once, in
// the step's scope, and read by every micro-batch.
func (m *mbModel) scopedStep(freeEach bool) {
	p := m.p
	p.Step(func() {
		m.headWeight = p.Recompute(m.halve, m.head)
		for _, sl := range m.order {
			s := &m.scopes[sl.mb]
			if sl.fwd {
				p.In(s, func() {
					m.losses[sl.mb] = m.loss(sl.mb, m.headWeight)
					m.lossValues[sl.mb] = m.losses[sl.mb].Item()
				})
				continue
			}
			p.In(s, func() { m.losses[sl.mb].Backward() })
			if freeEach {
				s.Free()
			}
		}
		if !freeEach { // in any order
			for i := len(m.scopes) - 1; i >= 0; i-- {
				m.scopes[i].Free()
			}
		}
		m.headWeight = nil
		clear(m.losses)
	})
}

// mbRun is what a run of the model computes, bit for bit.
type mbRun struct {
	losses []float32
	grads  [][]float32 // after the first step
	params [][]float32 // after every step's SGD update
}

func (a mbRun) diff(b mbRun) string {
	if s := bitDiff("loss", a.losses, b.losses); s != "" {
		return s
	}
	for i := range a.grads {
		if s := bitDiff(fmt.Sprintf("gradient %d", i), a.grads[i], b.grads[i]); s != "" {
			return s
		}
	}
	for i := range a.params {
		if s := bitDiff(fmt.Sprintf("parameter %d", i), a.params[i], b.params[i]); s != "" {
			return s
		}
	}
	return ""
}

// mbTrain trains a fresh model on dev in p for steps steps, sequentially
// or in detached scopes freed after each backward pass, and returns the
// losses, the first step's gradients and the final parameters. It returns
// the first error met instead of failing a test, so it can run on any
// goroutine.
func mbTrain(p *Program, dev Device, scoped bool, steps int) (run mbRun, err error) {
	m := newMBModel(p, dev, 3)
	defer m.free()
	err = Catch(func() {
		for step := range steps {
			if scoped {
				m.scopedStep(true)
			} else {
				m.sequentialStep()
			}
			run.losses = append(run.losses, m.lossValues...)
			for _, w := range m.params() {
				if step == 0 {
					run.grads = append(run.grads, w.Grad.Float32s())
				}
				AddInPlace(w, w.Grad, -0.2)
			}
			ZeroGradInPlace(m.params()...)
		}
	})
	for _, w := range m.params() {
		run.params = append(run.params, w.Float32s())
	}
	return run, err
}

// TestOneFOneBOrder checks the schedule the tests below run.
func TestOneFOneBOrder(t *testing.T) {
	var b strings.Builder
	for _, s := range oneFOneB(3, 2) {
		fmt.Fprintf(&b, "%c%d ", map[bool]byte{true: 'F', false: 'B'}[s.fwd], s.mb)
	}
	if got := strings.TrimSpace(b.String()); got != "F0 F1 B0 F2 B1 B2" {
		t.Fatalf("order %s", got)
	}
}

// TestScopesInterleaved runs micro-batches in the 1F1B order, each in a
// detached scope freed after its backward pass, and checks the losses and
// gradients bit for bit against the sequential run in one Step, that the
// peak memory is lower than when every scope lives to the end of the
// step, and that a tensor of a freed scope panics as freed.
func TestScopesInterleaved(t *testing.T) {
	dev := cpuN(13)
	p := mustProgram(t, dev)
	start := MemStats(dev).Allocated
	seq, err := mbTrain(p, dev, false, 3)
	if err != nil {
		t.Fatal(err)
	}
	scoped, err := mbTrain(p, dev, true, 3)
	if err != nil {
		t.Fatal(err)
	}
	if d := seq.diff(scoped); d != "" {
		t.Fatalf("sequential and interleaved in scopes: %s", d)
	}
	if got := MemStats(dev).Allocated; got != start {
		t.Fatalf("%d bytes left allocated", got-start)
	}

	m := newMBModel(p, dev, 3)
	defer m.free()
	peak := func(step func()) int64 {
		step() // fills the pools
		ZeroGradInPlace(m.params()...)
		base := MemStats(dev).Allocated
		ResetPeakMemory(dev)
		step()
		ZeroGradInPlace(m.params()...)
		return MemStats(dev).Peak - base
	}
	sequential := peak(m.sequentialStep)
	atEnd := peak(func() { m.scopedStep(false) })
	each := peak(func() { m.scopedStep(true) })
	t.Logf("peak bytes of a step: %d sequential, %d with scopes freed at its end, %d freed after each backward", sequential, atEnd, each)
	if each >= atEnd || each >= sequential {
		t.Errorf("peak %d bytes freeing each scope after its backward pass, not below %d freeing them at the end of the step and %d sequentially", each, atEnd, sequential)
	}

	// A tensor of a freed scope panics, before and after the step ends.
	var stale, leafGrad *Tensor
	p.Step(func() {
		m.headWeight = p.Recompute(m.halve, m.head)
		for _, sl := range m.order {
			s := &m.scopes[sl.mb]
			if sl.fwd {
				p.In(s, func() { m.losses[sl.mb] = m.loss(sl.mb, m.headWeight) })
				continue
			}
			p.In(s, func() { m.losses[sl.mb].Backward() })
			if sl.mb == 0 {
				if m.headWeight.node == nil {
					t.Error("the Backward of micro-batch 0 released the step's head weight")
				}
				stale = m.losses[0]
				p.In(s, func() { // a stage input's gradient, made by Backward in Persist
					in := m.xs[0].Clone().SetRequiresGrad(true)
					Sum(Scale(in, 2)).Backward()
					leafGrad = in.Grad
				})
			}
			s.Free()
			if sl.mb == 0 {
				if err := Catch(func() { stale.Item() }); err == nil || !strings.Contains(err.Error(), "freed") {
					t.Errorf("reading the loss of a freed scope gave %v, want a freed error", err)
				}
				if err := Catch(func() { leafGrad.Float32s() }); err == nil || !strings.Contains(err.Error(), "freed") {
					t.Errorf("reading the leaf gradient a freed scope tracked gave %v, want a freed error", err)
				}
			}
		}
		for range 500 { // tensors made now take every recycled header
			Scale(m.head, 2)
		}
		if !stale.Shape().Equal(Shape{}) || stale.Device() != dev {
			t.Errorf("the header of a freed scope's tensor was recycled inside its step (now %v)", stale)
		}
		wantErr(t, "a loss of a freed scope, later in the step", func() { stale.Item() }, "freed")
	})
	ZeroGradInPlace(m.params()...)
	p.Step(func() {
		for range 500 {
			Scale(m.head, 2)
		}
		if !stale.Shape().Equal(Shape{}) {
			t.Errorf("the header of a freed scope's tensor was recycled in the next step (now %v)", stale)
		}
		wantErr(t, "a loss of a freed scope, in the next step", func() { stale.Item() }, "freed")
	})
}

// TestScopeSemantics checks where tensors go inside In, that a detached
// scope outlives the step around it, nested steps and the misuses that
// panic.
func TestScopeSemantics(t *testing.T) {
	dev := cpuN(14)
	p := mustProgram(t, dev)
	start := MemStats(dev).Allocated
	var s Scope // the zero Scope is ready to use
	var inS, inStep, inNested *Tensor
	p.Step(func() {
		before := len(p.scopes[0].tensors)
		p.In(&s, func() {
			inS = Full(dev, 3, 4)
			p.Step(func() { inNested = Ones(dev, 2) })
			p.Persist(func() { Ones(dev, 1).Free() })
		})
		if s.Len() != 1 || len(p.scopes[0].tensors) != before {
			t.Errorf("In tracked %d tensors, the step %d more", s.Len(), len(p.scopes[0].tensors)-before)
		}
		mustPanic(t, "a tensor of a step nested in In", func() { inNested.Item() })
		inStep = Ones(dev, 5)
		p.In(&s, func() { Scale(inS, 2) }) // In again in the same scope
		if s.Len() != 2 {
			t.Errorf("a second In left %d tensors in the scope, want 2", s.Len())
		}
	})
	mustPanic(t, "a tensor of an ended step", func() { inStep.Item() })
	if got := inS.Float32s(); !equal32(got, []float32{3, 3, 3, 3}) {
		t.Fatalf("a tensor of a detached scope reads %v after the step around it", got)
	}
	s.Free()
	wantErr(t, "a tensor of a freed scope", func() { inS.Float32s() }, "freed")
	if s.Len() != 0 {
		t.Errorf("a freed scope tracks %d tensors", s.Len())
	}
	s.Free() // freeing an empty scope does nothing
	if got := MemStats(dev).Allocated; got != start {
		t.Fatalf("%d bytes left allocated", got-start)
	}

	// Outside any step: the scope tracks, and its headers are held until
	// the next Free at the outermost level.
	if d := NewScope(); d.p != DefaultProgram() {
		t.Error("NewScope made a scope of another program than the default one")
	}
	s2 := p.NewScope()
	var stale *Tensor
	p.In(&s, func() { stale = Ones(dev, 1, 3) })
	s.Free()
	p.In(s2, func() {
		for range 200 {
			Ones(dev, 2)
		}
	})
	if !stale.Shape().Equal(Shape{1, 3}) {
		t.Errorf("the header of a freed scope's tensor was recycled before the next Free (now %v)", stale)
	}
	wantErr(t, "a tensor of a freed scope outside any step", func() { stale.Float32s() }, "freed")
	s2.Free()
	if got := MemStats(dev).Allocated; got != start {
		t.Fatalf("%d bytes left allocated", got-start)
	}

	wantErr(t, "Free inside In", func() { p.In(&s, func() { s.Free() }) }, "free_scope", "on the stack")
	wantErr(t, "In inside In of the same scope", func() { p.In(&s, func() { p.In(&s, func() {}) }) }, "on the stack")
	if len(p.scopes) != 0 || s.onStack {
		t.Fatalf("a panic inside In left %d scopes on the stack", len(p.scopes))
	}
	wantErr(t, "In of another program's scope", func() { DefaultProgram().In(&s, func() {}) }, "a scope of "+p.String())
	wantErr(t, "In of a nil scope", func() { p.In(nil, func() {}) }, "nil scope")
	p.Step(func() {
		wantErr(t, "In of a step's scope", func() { p.In(p.scopes[0], func() {}) }, "a step's scope")
	})
	var leaked *Tensor
	wantErr(t, "a panic inside In", func() {
		p.In(&s, func() {
			leaked = Ones(dev, 3)
			panic(&Error{Op: "test", Msg: "boom"})
		})
	}, "boom")
	if s.Len() != 1 || leaked.Float32s()[0] != 1 {
		t.Error("a panic inside In freed its scope")
	}
	s.Free()
	if got := MemStats(dev).Allocated; got != start {
		t.Fatalf("%d bytes left allocated", got-start)
	}
}

// TestScopeRecomputeNoGradBackward checks Backward and Recompute inside
// In: a forward pass under NoGrad, and a Backward started inside a nested
// step of a detached scope.
func TestScopeRecomputeNoGradBackward(t *testing.T) {
	dev := cpuN(15)
	p := mustProgram(t, dev)
	start := MemStats(dev).Allocated
	var w *Tensor
	p.Persist(func() { w = FromFloat32s(dev, []float32{1, 2, 3}, 3).SetRequiresGrad(true) })
	double := func(a ...*Tensor) *Tensor { return Scale(a[0], 2) }
	var s, e Scope
	var y *Tensor
	p.Step(func() {
		p.In(&s, func() { y = p.Recompute(double, Mul(w, w)) })
		p.In(&e, func() {
			p.NoGrad(func() {
				if p.Recompute(double, w).RequiresGrad() {
					t.Error("a recomputation under NoGrad requires grad")
				}
			})
		})
		e.Free()
		p.In(&s, func() { p.Step(func() { Sum(y).Backward() }) })
		s.Free()
	})
	if g := w.Grad.Float32s(); !equal32(g, []float32{4, 8, 12}) {
		t.Errorf("gradient %v through a recomputation in a scope", g)
	}
	ZeroGrad(w)
	w.Free()
	if got := MemStats(dev).Allocated; got != start {
		t.Fatalf("%d bytes left allocated", got-start)
	}
}

// TestScopeStepAllocations checks that a steady-state step of micro-batches
// in detached scopes, with recomputations, makes no Go heap allocations.
func TestScopeStepAllocations(t *testing.T) {
	dev := cpuN(16)
	p := mustProgram(t, dev)
	m := newMBModel(p, dev, 3)
	defer m.free()
	step := func() {
		m.scopedStep(true)
		ZeroGradInPlace(m.params()...)
	}
	step() // fills the pools
	step()
	if allocs := testing.AllocsPerRun(5, step); allocs != 0 {
		t.Errorf("a steady-state step in detached scopes made %.0f heap allocations, want 0", allocs)
	}
}

// TestScopesConcurrent trains the model in detached scopes in two programs
// at once, on cpu:1 and cpu:2, each on a goroutine of its own, and checks
// both bit for bit against the sequential run on the default program. Run
// it with -race.
func TestScopesConcurrent(t *testing.T) {
	steps := 8
	if testing.Short() {
		steps = 3
	}
	devs := []Device{cpuN(1), cpuN(2)}
	want := make([]mbRun, len(devs))
	for i, dev := range devs {
		var err error
		if want[i], err = mbTrain(DefaultProgram(), dev, false, steps); err != nil {
			t.Fatal(err)
		}
	}
	progs := []*Program{mustProgram(t, devs[0]), mustProgram(t, devs[1])}
	got := make([]mbRun, len(devs))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for i, dev := range devs {
		wg.Go(func() { got[i], errs[i] = mbTrain(progs[i], dev, true, steps) })
	}
	wg.Wait()
	for i := range devs {
		if errs[i] != nil {
			t.Fatalf("%v: %v", progs[i], errs[i])
		}
		if d := want[i].diff(got[i]); d != "" {
			t.Errorf("%v: %s sequentially and in scopes, concurrently", progs[i], d)
		}
	}
}

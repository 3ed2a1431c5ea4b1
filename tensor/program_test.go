package tensor

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

// mustProgram claims devs for a new program, closed when the test ends.
func mustProgram(t *testing.T, devs ...Device) *Program {
	t.Helper()
	p, err := NewProgram(devs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func cpuN(n int) Device { return Device{Kind: "cpu", Index: n} }

// TestNewProgramClaims checks which program drives which device, the
// errors of NewProgram and Close, and that Close hands the devices back to
// the default program.
func TestNewProgramClaims(t *testing.T) {
	cpu3, cpu4, cpu5 := cpuN(3), cpuN(4), cpuN(5)
	if ProgramOf(cpu3) != DefaultProgram() || ProgramOf(CPU) != DefaultProgram() {
		t.Fatal("devices start with a program other than the default one")
	}
	p, err := NewProgram(cpu3, cpu4)
	if err != nil {
		t.Fatal(err)
	}
	if ProgramOf(cpu3) != p || ProgramOf(cpu4) != p || ProgramOf(CPU) != DefaultProgram() || ProgramOf(cpu5) != DefaultProgram() {
		t.Fatal("NewProgram did not claim exactly its devices")
	}
	if d := p.Devices(); len(d) != 2 || d[0] != cpu3 || d[1] != cpu4 || DefaultProgram().Devices() != nil {
		t.Errorf("devices %v and %v", d, DefaultProgram().Devices())
	}

	for _, c := range []struct {
		name string
		devs []Device
		want []string
	}{
		{"a device of another program", []Device{cpu5, cpu4}, []string{"cpu:4 is driven by " + p.String(), "cpu:3, cpu:4"}},
		{"no devices", nil, []string{"no devices"}},
		{"a device twice", []Device{cpu5, cpu5}, []string{"cpu:5 is listed twice"}},
		{"a device that does not open", []Device{{Kind: "tpu"}}, []string{"no backend registered"}},
	} {
		q, err := NewProgram(c.devs...)
		if err == nil {
			t.Fatalf("NewProgram with %s: no error", c.name)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("NewProgram with %s: error %q does not say %q", c.name, err, w)
			}
		}
		if q != nil {
			t.Errorf("NewProgram with %s returned a program", c.name)
		}
	}
	if ProgramOf(cpu5) != DefaultProgram() {
		t.Error("a failed NewProgram claimed a device")
	}

	if err := DefaultProgram().Close(); err == nil {
		t.Error("the default program closed")
	}
	p.Step(func() {
		if err := p.Close(); err == nil || !strings.Contains(err.Error(), "inside a step") {
			t.Errorf("Close inside the program's step: %v", err)
		}
	})
	if ProgramOf(cpu3) != p {
		t.Fatal("a refused Close gave the devices back")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if ProgramOf(cpu3) != DefaultProgram() || ProgramOf(cpu4) != DefaultProgram() {
		t.Fatal("Close did not give the devices back to the default program")
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	q := mustProgram(t, cpu4) // a closed program's device can be claimed again
	if ProgramOf(cpu4) != q || ProgramOf(cpu3) != DefaultProgram() {
		t.Error("a device given back was not claimed again")
	}
}

// TestPackageLevelStateIsTheDefaultPrograms checks that the package-level
// Step, NoGrad, Autocast and hook act on the default program only: tensors
// made on a device another program drives go to that program's innermost
// scope, or are not tracked at all when it has none, and record the tape
// under that program's modes.
func TestPackageLevelStateIsTheDefaultPrograms(t *testing.T) {
	cpu6 := cpuN(6)
	p := mustProgram(t, cpu6)
	start := MemStats(cpu6).Allocated

	// Outside any step of p: not tracked, so alive after Step.
	var untracked *Tensor
	Step(func() { untracked = Full(cpu6, 2, 3) })
	if got := untracked.Float32s(); !equal32(got, []float32{2, 2, 2}) {
		t.Errorf("a tensor of another program made in Step reads %v after it", got)
	}
	untracked.Free()

	// Inside a step of p: p's step frees it, not the default one.
	var inP, onCPU *Tensor
	p.Step(func() {
		Step(func() {
			inP = Ones(cpu6, 3)
			if len(p.scopes[0].tensors) != 1 || len(defaultProgram.scopes[0].tensors) != 0 {
				t.Errorf("p's scope tracks %d tensors, the default one %d", len(p.scopes[0].tensors), len(defaultProgram.scopes[0].tensors))
			}
		})
		if inP.Float32s()[0] != 1 {
			t.Error("a tensor of p's step reads wrong")
		}
		onCPU = Ones(CPU, 2) // no default step is open: not tracked
	})
	mustPanic(t, "a tensor of p's ended step", func() { inP.Float32s() })
	if onCPU.Float32s()[1] != 1 {
		t.Error("a tensor of the default program made in p's step was freed")
	}
	onCPU.Free()
	if got := MemStats(cpu6).Allocated; got != start {
		t.Errorf("%d bytes left allocated on cpu:6", got-start)
	}

	// Gradient mode, autocast and the hook are the program's.
	var hooked, defaultHooked int
	defer SetGradReadyHook(SetGradReadyHook(func(*Tensor) { defaultHooked++ }))
	defer p.SetGradReadyHook(p.SetGradReadyHook(func(*Tensor) { hooked++ }))
	r := NewRNG(3)
	xs, ws := Randn(CPU, r, 1, 4, 8).Float32s(), Randn(CPU, r, 1, 8, 3).Float32s()
	linear := func(dev Device) []float32 {
		var out []float32
		Step(func() { out = Linear(FromFloat32s(dev, xs, 4, 8), FromFloat32s(dev, ws, 8, 3), nil).Float32s() })
		return out
	}
	var f32, bf16 []float32
	p.Step(func() {
		x := FromFloat32s(cpu6, xs, 4, 8).SetRequiresGrad(true)
		NoGrad(func() {
			if !p.GradEnabled() || !Scale(x, 2).RequiresGrad() {
				t.Error("the default NoGrad turned off p's recording")
			}
		})
		p.NoGrad(func() {
			Step(func() {
				onCPU := Ones(CPU, 1).SetRequiresGrad(true)
				if !GradEnabled() || p.GradEnabled() || Scale(x, 2).RequiresGrad() || !Scale(onCPU, 2).RequiresGrad() {
					t.Error("p.NoGrad did not turn off exactly p's recording")
				}
			})
		})
		Sum(Scale(x, 2)).Backward()
		if hooked != 1 || defaultHooked != 0 {
			t.Errorf("a Backward in p called p's hook %d times and the default one %d", hooked, defaultHooked)
		}
		Autocast(BF16, func() {
			if p.AutocastDType() != F32 || DefaultProgram().AutocastDType() != BF16 {
				t.Error("the default Autocast changed p's policy")
			}
			f32 = linear(cpu6)
		})
		p.Autocast(BF16, func() {
			if p.AutocastDType() != BF16 {
				t.Error("p.Autocast did not set p's policy")
			}
			bf16 = linear(cpu6)
			if !equal32(linear(CPU), f32) {
				t.Error("p.Autocast changed the products on the default program's devices")
			}
		})
	})
	if want := linear(CPU); !equal32(f32, want) {
		t.Error("products on p's device ran in the default program's autocast policy")
	}
	var want []float32
	Autocast(BF16, func() { want = linear(CPU) })
	if !equal32(bf16, want) || equal32(bf16, f32) {
		t.Error("products on p's device did not follow p's autocast policy")
	}
}

// TestRecomputeProgram checks that Recompute runs in its inputs'
// program and refuses tensors of another one, and that a Backward that
// would reach another program's tensors panics before changing them.
func TestRecomputeProgram(t *testing.T) {
	cpu7, cpu8 := cpuN(7), cpuN(8)
	p := mustProgram(t, cpu7)
	double := func(a ...*Tensor) *Tensor { return Scale(a[0], 2) }
	p.Step(func() {
		x := Ones(cpu7, 3).SetRequiresGrad(true)
		y := Recompute(double, x) // the package-level one: p, x's program
		if len(defaultProgram.scopes) != 0 || y.Device() != cpu7 {
			t.Fatal("Recompute of a tensor of p did not run in p")
		}
		Sum(y).Backward()
		if g := x.Grad.Float32s(); !equal32(g, []float32{2, 2, 2}) {
			t.Errorf("gradient through a recomputation in p %v", g)
		}
		Step(func() { // the default program's tensors are freed with this step
			wantErr(t, "Recompute in p of a default program's tensor", func() { p.Recompute(double, Ones(CPU, 2)) },
				"a tensor on cpu, driven by the default program, in a recomputation run in "+p.String())
			wantErr(t, "Recompute whose result is on another program's device", func() {
				Recompute(func(a ...*Tensor) *Tensor { return a[0].To(CPU) }, x)
			}, "a tensor on cpu, driven by the default program")
		})
	})

	// A graph the default program made across cpu:8 and cpu:9, through a
	// recomputation's input, then split between programs.
	cpu9 := cpuN(9)
	Step(func() {
		x := Ones(cpu8, 3).SetRequiresGrad(true)
		w := Ones(cpu9, 3).SetRequiresGrad(true)
		y := Recompute(func(a ...*Tensor) *Tensor { return Mul(a[0].To(cpu9), w) }, x)
		q := mustProgram(t, cpu9)
		q.Step(func() {
			wantErr(t, "Backward reaching another program", func() { Sum(y).Backward() },
				"backward: a graph in "+q.String()+" reaches a tensor on cpu:8, driven by the default program")
		})
		if q.walkDepth != 0 || x.Grad != nil || w.Grad != nil {
			t.Errorf("the refused Backward left walk depth %d, gradients %v and %v", q.walkDepth, x.Grad, w.Grad)
		}
	})
}

// programRun is what programWorkload computes, bit for bit.
type programRun struct {
	losses, evals []float32
	params        [][]float32
	reported      int // leaves the grad-ready hook saw
}

// programWorkload trains a small attention-and-MLP model for steps steps
// on dev, driven by p, with products in cast: forward passes through
// checkpoints with dropout (the package-level Recompute and p's, on
// alternate steps), Backward, a NoGrad evaluation added into a persistent
// accumulator, and SGD updates. It returns the first error it met instead
// of failing a test, so it can run on any goroutine.
func programWorkload(p *Program, dev Device, cast DType, steps int) (run programRun, err error) {
	const B, T, C, V = 2, 5, 8, 11
	r, drop := NewRNG(7), &DropoutStream{Key: 8}
	var emb, wqkv, w1, b1, w2, lnw, acc, ids, targets *Tensor
	ids32, targets32 := make([]int32, B*T), make([]int32, B*T)
	for i := range ids32 {
		ids32[i], targets32[i] = int32(i*3%V), int32(i*5%V)
	}
	p.Persist(func() {
		emb = Randn(dev, r, 0.3, V, C).SetRequiresGrad(true)
		wqkv = Randn(dev, r, 0.3, C, 3*C).SetRequiresGrad(true)
		w1 = Randn(dev, r, 0.3, C, 2*C).SetRequiresGrad(true)
		b1 = Randn(dev, r, 0.1, 2*C).SetRequiresGrad(true)
		w2 = Randn(dev, r, 0.3, 2*C, C).SetRequiresGrad(true)
		lnw = Ones(dev, C).SetRequiresGrad(true)
		acc = Zeros(dev)
		ids, targets = FromInt32s(dev, ids32, B, T), FromInt32s(dev, targets32, B, T)
	})
	params := []*Tensor{emb, wqkv, w1, b1, w2, lnw}
	defer func() {
		for _, t := range append(params, acc, ids, targets) {
			ZeroGrad(t)
			t.Free()
		}
	}()
	defer p.SetGradReadyHook(p.SetGradReadyHook(func(*Tensor) { run.reported++ }))
	mlp := func(a ...*Tensor) *Tensor {
		h := Dropout(GELU(Linear(LayerNorm(a[0], lnw, nil, 1e-5), w1, b1)), 0.2, drop)
		return Add(a[0], Linear(h, w2, nil))
	}
	forward := func(step int) *Tensor {
		x := Embedding(emb, ids)
		if step%2 == 0 {
			x = RecomputeRNG(drop, mlp, x)
		} else {
			x = p.RecomputeRNG(drop, mlp, x)
		}
		x = Add(x, Attention(Linear(x, wqkv, nil), 2))
		return CrossEntropy(LinearT(x, emb), targets)
	}
	err = Catch(func() {
		for step := range steps {
			p.Step(func() {
				var loss *Tensor
				p.Autocast(cast, func() { loss = forward(step) })
				loss.Backward()
				run.losses = append(run.losses, loss.Item())
				p.NoGrad(func() {
					p.Autocast(cast, func() {
						e := forward(step)
						if e.RequiresGrad() {
							panic(&Error{Op: "test", Msg: "an evaluation under NoGrad requires grad"})
						}
						AddInPlace(acc, e, 1)
						run.evals = append(run.evals, e.Item())
					})
				})
				for _, w := range params {
					AddInPlace(w, w.Grad, -0.1)
				}
				ZeroGradInPlace(params...)
			})
		}
	})
	if err != nil {
		return run, err
	}
	run.evals = append(run.evals, acc.Item())
	for _, w := range params {
		run.params = append(run.params, w.Float32s())
	}
	return run, nil
}

// bitDiff says where x and y (values of what) first differ bit for bit,
// or "".
func bitDiff(what string, x, y []float32) string {
	if len(x) != len(y) {
		return fmt.Sprintf("%s: %d values and %d", what, len(x), len(y))
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return fmt.Sprintf("%s[%d]: %v and %v", what, i, x[i], y[i])
		}
	}
	return ""
}

// sameBits reports where two runs first differ bit for bit, or "".
func sameBits(a, b programRun) string {
	if d := bitDiff("loss", a.losses, b.losses); d != "" {
		return d
	}
	if d := bitDiff("evaluation", a.evals, b.evals); d != "" {
		return d
	}
	for i := range a.params {
		if d := bitDiff(fmt.Sprintf("parameter %d", i), a.params[i], b.params[i]); d != "" {
			return d
		}
	}
	if a.reported != b.reported {
		return fmt.Sprintf("%d and %d leaves reported ready", a.reported, b.reported)
	}
	return ""
}

// TestProgramsConcurrent runs the workload in three programs at once: its
// own on cpu:1 with BF16 products, its own on cpu:2 in F32, and the
// default one on the CPU with F16 products, each on a goroutine of its
// own, and checks every result bit for bit against the same workload run
// alone on the default program. Run it with -race.
func TestProgramsConcurrent(t *testing.T) {
	steps := 30
	if testing.Short() {
		steps = 6
	}
	type job struct {
		dev  Device
		cast DType
	}
	jobs := []job{{cpuN(1), BF16}, {cpuN(2), F32}, {CPU, F16}}
	alone := make([]programRun, len(jobs))
	for i, j := range jobs {
		var err error
		if alone[i], err = programWorkload(DefaultProgram(), j.dev, j.cast, steps); err != nil {
			t.Fatal(err)
		}
		if alone[i].reported != 6*steps {
			t.Fatalf("%d leaves reported ready in %d steps of 6 parameters", alone[i].reported, steps)
		}
	}
	if sameBits(alone[0], alone[1]) == "" {
		t.Fatal("BF16 and F32 products gave the same results: the test cannot tell the programs' policies apart")
	}

	progs := []*Program{mustProgram(t, jobs[0].dev), mustProgram(t, jobs[1].dev), DefaultProgram()}
	together := make([]programRun, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { together[i], errs[i] = programWorkload(progs[i], j.dev, j.cast, steps) })
	}
	wg.Wait()
	for i, j := range jobs {
		if errs[i] != nil {
			t.Fatalf("%v: %v", progs[i], errs[i])
		}
		if d := sameBits(alone[i], together[i]); d != "" {
			t.Errorf("%v on %v with %v products: %s alone and concurrently", progs[i], j.dev, j.cast, d)
		}
	}
}

// TestProgramsPipeline runs a two-stage pipeline, each stage in a program
// of its own on its own goroutine, handing the detached activation forward
// and its gradient back over channels; each stage keeps its step open
// until the other has copied what it handed over. The parameters end bit
// for bit where the same pipeline run on one goroutine in the default
// program leaves them.
func TestProgramsPipeline(t *testing.T) {
	const steps, rows, C, V = 6, 6, 8, 5
	dev1, dev2 := cpuN(1), cpuN(2)
	targets32 := make([]int32, rows)
	for i := range targets32 {
		targets32[i] = int32(i % V)
	}
	type stages struct{ x, w1, b1, w2, targets *Tensor }
	build := func(p1, p2 *Program) *stages {
		r := NewRNG(11)
		s := &stages{}
		p1.Persist(func() {
			s.x = Randn(dev1, r, 1, rows, C)
			s.w1 = Randn(dev1, r, 0.3, C, C).SetRequiresGrad(true)
			s.b1 = Randn(dev1, r, 0.3, C).SetRequiresGrad(true)
		})
		p2.Persist(func() {
			s.w2 = Randn(dev2, r, 0.3, C, V).SetRequiresGrad(true)
			s.targets = FromInt32s(dev2, targets32, rows)
		})
		return s
	}
	first := func(s *stages) *Tensor { return GELU(Linear(s.x, s.w1, s.b1)) }
	second := func(s *stages, in *Tensor) *Tensor { return CrossEntropy(Linear(in, s.w2, nil), s.targets) }
	sgd := func(ws ...*Tensor) {
		for _, w := range ws {
			AddInPlace(w, w.Grad, -0.5)
			ZeroGrad(w)
		}
	}
	result := func(s *stages) [][]float32 {
		return [][]float32{s.w1.Float32s(), s.b1.Float32s(), s.w2.Float32s()}
	}

	// On one goroutine, in the default program.
	s := build(DefaultProgram(), DefaultProgram())
	for range steps {
		Step(func() {
			h := first(s)
			in := h.Detach().To(dev2).SetRequiresGrad(true)
			second(s, in).Backward()
			h.BackwardWith(in.Grad.To(dev1))
			sgd(s.w1, s.b1, s.w2)
		})
	}
	want := result(s)

	p1, p2 := mustProgram(t, dev1), mustProgram(t, dev2)
	s = build(p1, p2)
	acts, grads := make(chan *Tensor), make(chan *Tensor)
	copied := make(chan struct{})
	var wg sync.WaitGroup
	var err1, err2 error
	wg.Go(func() {
		err1 = Catch(func() {
			for range steps {
				p1.Step(func() {
					h := first(s)
					acts <- h.Detach()
					g := (<-grads).To(dev1)
					copied <- struct{}{} // stage 2 may end its step now
					h.BackwardWith(g)
					sgd(s.w1, s.b1)
				})
			}
		})
	})
	wg.Go(func() {
		err2 = Catch(func() {
			for range steps {
				p2.Step(func() {
					in := (<-acts).To(dev2).SetRequiresGrad(true)
					second(s, in).Backward()
					grads <- in.Grad
					<-copied
					sgd(s.w2)
				})
			}
		})
	})
	wg.Wait()
	if err1 != nil || err2 != nil {
		t.Fatalf("stage errors: %v, %v", err1, err2)
	}
	got := result(s)
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("parameter %d[%d]: %v pipelined, %v on one goroutine", i, j, got[i][j], want[i][j])
			}
		}
	}
}

// TestProgramStepAllocations checks that a steady-state step in a program
// of its own, with another program holding a device, makes no Go heap
// allocations, as one in the default program does (train's
// TestStepAllocations): headers, scopes, walks and recompute records come
// from the program's pools, and the lookups allocate nothing.
func TestProgramStepAllocations(t *testing.T) {
	mustProgram(t, cpuN(11))
	dev := cpuN(12)
	p := mustProgram(t, dev)
	m := newBenchModel(p, dev, 2, 8, 16, 32)
	params := m.params()
	defer func() {
		for _, w := range append(params, m.ids, m.targets) {
			ZeroGrad(w)
			w.Free()
		}
	}()
	step := func() {
		p.Step(func() {
			p.Autocast(BF16, func() { m.loss(2).Backward() })
		})
		ZeroGradInPlace(params...)
	}
	step() // fills the pools
	step()
	if allocs := testing.AllocsPerRun(5, step); allocs != 0 {
		t.Errorf("a steady-state step in %v made %.0f heap allocations, want 0", p, allocs)
	}
}

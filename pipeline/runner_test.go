package pipeline

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/tensor"
)

// chain is a small model cut into stages: stage st multiplies by its own
// weight and applies GELU; the last stage maps to 5 classes.
type chain struct {
	devs []tensor.Device
	ws   []*tensor.Tensor
	x, y []*tensor.Tensor // per micro-batch, on the first and last stage
}

func newChain(devs []tensor.Device, micros int) *chain {
	c := &chain{devs: devs}
	r := tensor.NewRNG(7)
	tensor.Persist(func() {
		for st, d := range devs {
			out := 16
			if st == len(devs)-1 {
				out = 5
			}
			c.ws = append(c.ws, tensor.Randn(d, r, 0.3, out, 16).SetRequiresGrad(true))
		}
		for m := range micros {
			ids := make([]int32, 6)
			for i := range ids {
				ids[i] = int32((m*7 + i*3) % 5)
			}
			c.x = append(c.x, tensor.Randn(devs[0], r, 1, 6, 16))
			c.y = append(c.y, tensor.FromInt32s(devs[len(devs)-1], ids, 6))
		}
	})
	return c
}

func (c *chain) runner(sch Schedule, progs []*tensor.Program) *Runner {
	last := len(c.devs) - 1
	return &Runner{Schedule: sch, Devices: c.devs, Programs: progs,
		Input: func(m int) *tensor.Tensor { return c.x[m] },
		Forward: func(st, m int, x *tensor.Tensor) *tensor.Tensor {
			h := tensor.LinearT(x, c.ws[st])
			if st < last {
				h = tensor.GELU(h)
			}
			return h
		},
		Loss: func(m int, out *tensor.Tensor) *tensor.Tensor { return tensor.CrossEntropy(out, c.y[m]) },
	}
}

// claim gives each of devs a tensor program of its own until the test
// ends.
func claim(t *testing.T, devs []tensor.Device) []*tensor.Program {
	t.Helper()
	var progs []*tensor.Program
	for _, d := range devs {
		p, err := tensor.NewProgram(d)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		progs = append(progs, p)
	}
	return progs
}

// TestConcurrentRunnerMatchesSerial: stages on goroutines of their own,
// each driving its own tensor program, leave exactly the gradients of the
// same schedule run slot by slot on one goroutine, and their timeline has
// no overlapping slots within a stage. Run it with -race.
func TestConcurrentRunnerMatchesSerial(t *testing.T) {
	devs := []tensor.Device{{Kind: "cpu", Index: 5}, {Kind: "cpu", Index: 6}, {Kind: "cpu", Index: 7}}
	for _, name := range []string{GPipeName, OneFOneB} {
		t.Run(name, func(t *testing.T) {
			sch, err := New(name, len(devs), 4)
			if err != nil {
				t.Fatal(err)
			}
			grads := func(concurrent bool) [][]float32 {
				c := newChain(devs, 4)
				var progs []*tensor.Program
				if concurrent {
					progs = claim(t, devs)
				}
				r := c.runner(sch, progs)
				for range 2 { // gradients accumulate over two runs
					tensor.Step(r.Run)
				}
				if concurrent {
					if len(r.Spans) != 2*len(devs)*4 {
						t.Fatalf("%d spans for %d slots", len(r.Spans), 2*len(devs)*4)
					}
					end := map[int]float64{}
					for _, sp := range r.Spans {
						if sp.Start < end[sp.Slot.Stage] || sp.End < sp.Start {
							t.Errorf("stage %d's slot %v overlaps its previous one", sp.Slot.Stage, sp.Slot)
						}
						end[sp.Slot.Stage] = sp.End
					}
					if r.ActCopies != 2*2*4 || r.GradCopies != 2*2*4 {
						t.Errorf("%d activation and %d gradient copies, want 16 each", r.ActCopies, r.GradCopies)
					}
				}
				var g [][]float32
				for _, w := range c.ws {
					g = append(g, w.Grad.Float32s())
				}
				return g
			}
			serial, conc := grads(false), grads(true)
			for i := range serial {
				for k := range serial[i] {
					if math.Float32bits(serial[i][k]) != math.Float32bits(conc[i][k]) {
						t.Fatalf("stage %d weight gradient [%d]: concurrent %v, serial %v", i, k, conc[i][k], serial[i][k])
					}
				}
			}
		})
	}
}

// TestConcurrentRunnerFailure: a stage that fails stops the run with its
// error; the stages waiting for it give up instead of hanging.
func TestConcurrentRunnerFailure(t *testing.T) {
	devs := []tensor.Device{{Kind: "cpu", Index: 5}, {Kind: "cpu", Index: 6}}
	sch, _ := New(GPipeName, 2, 3)
	c := newChain(devs, 3)
	progs := claim(t, devs)
	r := c.runner(sch, progs)
	fwd := r.Forward
	r.Forward = func(st, m int, x *tensor.Tensor) *tensor.Tensor {
		if st == 0 && m == 1 {
			panic(&tensor.Error{Op: "test", Msg: fmt.Sprintf("stage %d fails on micro-batch %d", st, m)})
		}
		return fwd(st, m, x)
	}
	err := tensor.Catch(func() { tensor.Step(r.Run) })
	if err == nil || err.Error() != "test: stage 0 fails on micro-batch 1" {
		t.Fatalf("Run = %v; want stage 0's failure", err)
	}
	r.Forward = fwd // the runner is usable again
	if err := tensor.Catch(func() { tensor.Step(r.Run) }); err != nil {
		t.Fatalf("a run after a failed one: %v", err)
	}
}

// TestConcurrentRunnerOneStage: a pipeline of one stage (a model on one
// device, through the runner) runs concurrently too.
func TestConcurrentRunnerOneStage(t *testing.T) {
	devs := []tensor.Device{{Kind: "cpu", Index: 5}}
	sch, _ := New(OneFOneB, 1, 3)
	c := newChain(devs, 3)
	r := c.runner(sch, claim(t, devs))
	if err := tensor.Catch(func() { tensor.Step(r.Run) }); err != nil {
		t.Fatal(err)
	}
	if c.ws[0].Grad == nil || len(r.Spans) != 6 {
		t.Fatalf("gradient %v, %d spans; want a gradient and 6 spans", c.ws[0].Grad, len(r.Spans))
	}
}

// TestConcurrentRunnerFailureFreesGradients: a stage that fails after it
// took a gradient from the next stage frees it: the run leaves no memory
// behind.
func TestConcurrentRunnerFailureFreesGradients(t *testing.T) {
	devs := []tensor.Device{{Kind: "cpu", Index: 13}, {Kind: "cpu", Index: 14}}
	sch, _ := New(GPipeName, 2, 3)
	c := newChain(devs, 3)
	progs := claim(t, devs)
	r := c.runner(sch, progs)
	r.Before = func(sl Slot) {
		if sl.Stage == 0 && sl.Kind == Backward && sl.Micro == 1 {
			panic(&tensor.Error{Op: "test", Msg: "stage 0 fails in a backward slot"})
		}
	}
	held := [2]int64{tensor.MemStats(devs[0]).Allocated, tensor.MemStats(devs[1]).Allocated}
	if err := tensor.Catch(func() { tensor.Step(r.Run) }); err == nil {
		t.Fatal("the run did not fail")
	}
	for i, d := range devs {
		// The weights' gradients made by the backward passes that ran
		// are the only memory a failed run may add.
		var grads int64
		if g := c.ws[i].Grad; g != nil {
			grads = int64(g.Numel() * 4)
		}
		if got := tensor.MemStats(d).Allocated - held[i]; got != grads {
			t.Errorf("%v: %d bytes more allocated after the failed run, want %d (the weight's gradient)", d, got, grads)
		}
	}
}

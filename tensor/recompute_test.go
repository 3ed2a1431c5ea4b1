package tensor

import (
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/testenv"
)

// mlpRef is GELU(x @ w + b) in float64 for x [rows, k], w [k, n].
func mlpRef(x, w, b []float64, rows, k, n int) []float64 {
	h := make([]float64, rows*n)
	ref.MatMul(x, w, h, b, rows, n, k, false, false, 1, 0)
	return ref.GELU(h)
}

// TestRecomputeGradients checks Recompute's gradients against float64
// finite differences: for inputs passed to the function, for leaves the
// closure captures, for an input used twice and for a recomputation nested in
// another.
func TestRecomputeGradients(t *testing.T) {
	cases := []gradCase{
		{name: "recompute_mlp_layernorm", shapes: [][]int{{2, 3, 5}, {5, 7}, {7}, {7}},
			fwd: func(in []*Tensor) *Tensor {
				// in[1] and in[2] are read through the closure, in[3] passed.
				return Recompute(func(a ...*Tensor) *Tensor {
					return LayerNorm(GELU(Linear(a[0], in[1], in[2])), a[1], nil, 1e-5)
				}, in[0], in[3])
			},
			refFwd: func(in [][]float64) []float64 {
				return ref.LayerNorm(mlpRef(in[0], in[1], in[2], 6, 5, 7), in[3], nil, 6, 7, 1e-5)
			}},
		{name: "recompute_input_twice_and_outside", shapes: [][]int{{4, 3}, {3, 3}},
			fwd: func(in []*Tensor) *Tensor {
				y := Recompute(func(a ...*Tensor) *Tensor {
					return Add(Mul(a[0], a[0]), MatMul(a[0], in[1]))
				}, in[0])
				return Mul(y, in[0]) // in[0] is used outside the recomputation too
			},
			refFwd: func(in [][]float64) []float64 {
				xw := make([]float64, 12)
				ref.MatMul(in[0], in[1], xw, nil, 4, 3, 3, false, false, 1, 0)
				out := make([]float64, 12)
				for i, x := range in[0] {
					out[i] = (x*x + xw[i]) * x
				}
				return out
			}},
		{name: "recompute_nested", shapes: [][]int{{3, 4}, {4, 4}, {4, 4}},
			fwd: func(in []*Tensor) *Tensor {
				return Recompute(func(a ...*Tensor) *Tensor {
					h := Recompute(func(b ...*Tensor) *Tensor { return GELU(MatMul(b[0], in[1])) }, a[0])
					return Add(MatMul(h, a[1]), h)
				}, in[0], in[2])
			},
			refFwd: func(in [][]float64) []float64 {
				h := mlpRef(in[0], in[1], nil, 3, 4, 4)
				out := make([]float64, 12)
				ref.MatMul(h, in[2], out, nil, 3, 4, 4, false, false, 1, 0)
				for i := range out {
					out[i] += h[i]
				}
				return out
			}},
		{name: "recompute_identity", shapes: [][]int{{5}},
			fwd: func(in []*Tensor) *Tensor {
				return Scale(Recompute(func(a ...*Tensor) *Tensor { return a[0] }, in[0]), 3)
			},
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], in[0], func(a, _ float64) float64 { return 3 * a })
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runGradCase(t, c) })
	}
}

// TestRecomputeMatchesPlain compares, bit for bit, the gradients of a
// function with dropout under BF16 autocast run directly and under
// RecomputeRNG, and checks that the dropout stream is left where the
// forward pass left it.
func TestRecomputeMatchesPlain(t *testing.T) {
	r := NewRNG(3)
	var x, w1, w2 *Tensor
	Persist(func() {
		x = Randn(CPU, r, 1, 4, 6, 8).SetRequiresGrad(true)
		w1 = Randn(CPU, r, 0.3, 8, 16).SetRequiresGrad(true)
		w2 = Randn(CPU, r, 0.3, 16, 8).SetRequiresGrad(true)
	})
	drop := &DropoutStream{}
	fn := func(a ...*Tensor) *Tensor {
		h := Dropout(GELU(Linear(a[0], w1, nil)), 0.3, drop)
		return Add(a[0], Dropout(Linear(h, w2, nil), 0.3, drop))
	}
	run := func(recomputed bool) (grads [][]float32, after DropoutStream) {
		*drop = DropoutStream{Key: 11, Row0: 3}
		Step(func() {
			var y *Tensor
			Autocast(BF16, func() {
				if recomputed {
					y = RecomputeRNG(drop, fn, x)
				} else {
					y = fn(x)
				}
			})
			after = *drop
			Sum(Mul(y, y)).Backward()
		})
		for _, p := range []*Tensor{x, w1, w2} {
			grads = append(grads, p.Grad.Float32s())
			ZeroGrad(p)
		}
		return grads, after
	}
	plain, plainAfter := run(false)
	ck, ckAfter := run(true)
	if plainAfter != ckAfter || *drop != plainAfter || plainAfter.Site != 2 {
		t.Fatalf("dropout stream at %+v after the plain forward, %+v after the recomputed one, %+v after its backward", plainAfter, ckAfter, *drop)
	}
	for i := range plain {
		for j := range plain[i] {
			if math.Float32bits(plain[i][j]) != math.Float32bits(ck[i][j]) {
				t.Fatalf("gradient %d[%d]: %v plain, %v recomputed", i, j, plain[i][j], ck[i][j])
			}
		}
	}
}

// TestRecomputeFreesInside checks that the forward pass keeps only the
// result: the pool holds less after a recomputed forward pass than after
// a plain one, and the same after both once the step ends.
func TestRecomputeFreesInside(t *testing.T) {
	r := NewRNG(4)
	var x, w *Tensor
	Persist(func() {
		x = Randn(CPU, r, 1, 64, 32).SetRequiresGrad(true)
		w = Randn(CPU, r, 0.1, 32, 128).SetRequiresGrad(true)
	})
	fn := func(a ...*Tensor) *Tensor { return Sum(GELU(GELU(Linear(a[0], w, nil)))) }
	base := MemStats(CPU).Allocated
	held := func(recomputed bool) (during int64) {
		Step(func() {
			var y *Tensor
			if recomputed {
				y = Recompute(fn, x)
			} else {
				y = fn(x)
			}
			during = MemStats(CPU).Allocated - base
			y.Backward()
		})
		ZeroGrad(x, w)
		return during
	}
	plain, ck := held(false), held(true)
	t.Logf("held after the forward pass: %d bytes plain, %d recomputed", plain, ck)
	if ck >= plain || ck > 64 {
		t.Errorf("a recomputed forward pass holds %d bytes, a plain one %d; want only the result's", ck, plain)
	}
	if after := MemStats(CPU).Allocated; after != base {
		t.Errorf("%d bytes allocated after the steps, %d before", after, base)
	}
}

// TestRecomputeNoGrad checks that with recording off Recompute returns
// fn's result, alive after fn's other tensors are freed.
func TestRecomputeNoGrad(t *testing.T) {
	NoGrad(func() {
		Step(func() {
			x := FromFloat32s(CPU, []float32{1, -2, 3}, 3).SetRequiresGrad(true)
			y := Recompute(func(a ...*Tensor) *Tensor { return Scale(Add(a[0], a[0]), 0.5) }, x)
			if y.RequiresGrad() {
				t.Error("a result made with recording off requires grad")
			}
			got := y.Float32s()
			for i, want := range []float32{1, -2, 3} {
				if got[i] != want {
					t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
				}
			}
		})
	})
}

// TestRecomputeMisuse checks the errors for functions Recompute cannot
// recompute faithfully.
func TestRecomputeMisuse(t *testing.T) {
	for _, c := range []struct {
		name, want string
		run        func(x, w *Tensor)
	}{
		{"reads a non-leaf made outside", "outside it; pass it as an input", func(x, w *Tensor) {
			h := Scale(w, 2)
			Recompute(func(a ...*Tensor) *Tensor { return Mul(a[0], h) }, x)
		}},
		{"makes a leaf", "made a tensor that requires grad", func(x, _ *Tensor) {
			Recompute(func(a ...*Tensor) *Tensor {
				return Mul(a[0], Ones(CPU, 4).SetRequiresGrad(true))
			}, x)
		}},
		{"changes its graph", "must build the same graph", func(x, w *Tensor) {
			calls := 0
			y := Recompute(func(a ...*Tensor) *Tensor {
				calls++
				if calls == 1 {
					return Scale(a[0], 2)
				}
				return Mul(a[0], w)
			}, x)
			Sum(y).Backward()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var x, w *Tensor
			Persist(func() {
				x = FromFloat32s(CPU, []float32{1, 2, 3, 4}, 4).SetRequiresGrad(true)
				w = FromFloat32s(CPU, []float32{5, 6, 7, 8}, 4).SetRequiresGrad(true)
			})
			err := Catch(func() { Step(func() { c.run(x, w) }) })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			if defaultProgram.walkDepth != 0 || len(defaultProgram.scopes) != 0 {
				t.Fatalf("walk depth %d and %d scopes left open", defaultProgram.walkDepth, len(defaultProgram.scopes))
			}
		})
	}
}

// TestGradReadyHook checks that each leaf is reported once per Backward,
// after its last use (a leaf used both inside and outside a recomputation
// too), with the gradient it ends the Backward with, and that a leaf's
// report follows the reports of leaves used only after it.
func TestGradReadyHook(t *testing.T) {
	r := NewRNG(5)
	var x, w1, w2, w3 *Tensor
	Persist(func() {
		x = Randn(CPU, r, 1, 3, 4).SetRequiresGrad(true)
		w1 = Randn(CPU, r, 1, 4, 4).SetRequiresGrad(true)
		w2 = Randn(CPU, r, 1, 4, 4).SetRequiresGrad(true)
		w3 = Randn(CPU, r, 1, 4, 4).SetRequiresGrad(true)
	})
	names := map[*Tensor]string{x: "x", w1: "w1", w2: "w2", w3: "w3"}
	for _, recomputed := range []bool{false, true} {
		var order []string
		seen := map[string][]float32{}
		prev := SetGradReadyHook(func(leaf *Tensor) {
			n := names[leaf]
			order = append(order, n)
			seen[n] = leaf.Grad.Float32s()
		})
		for range 2 { // a second Backward accumulates into Grad
			order = order[:0]
			Step(func() {
				h := MatMul(x, w1)
				block := func(a ...*Tensor) *Tensor { return GELU(MatMul(GELU(MatMul(a[0], w2)), w1)) }
				if recomputed {
					h = Recompute(block, h)
				} else {
					h = block(h)
				}
				Sum(MatMul(h, w3)).Backward()
			})
			if got := strings.Join(order, " "); got != "w3 w2 w1 x" {
				t.Errorf("recomputed=%v: leaves reported in order %q, want \"w3 w2 w1 x\"", recomputed, got)
			}
			for n, g := range seen {
				var leaf *Tensor
				for l, ln := range names {
					if ln == n {
						leaf = l
					}
				}
				if !testenv.SameBits(g, leaf.Grad.Float32s()) {
					t.Errorf("recomputed=%v: %s's gradient changed after it was reported", recomputed, n)
				}
			}
		}
		SetGradReadyHook(prev)
		ZeroGrad(x, w1, w2, w3)
	}
}

// TestRecomputeKeepsQuarantine checks that the header of a tensor of the
// previous step is not recycled during a step whose recomputations end many
// nested scopes, so using that tensor still panics as freed.
func TestRecomputeKeepsQuarantine(t *testing.T) {
	var x *Tensor
	Persist(func() { x = FromFloat32s(CPU, []float32{1, 2, 3}, 3).SetRequiresGrad(true) })
	var stale *Tensor
	Step(func() { stale = Scale(x.Reshape(1, 3), 2) })
	Step(func() {
		y := x
		for range 4 {
			y = Recompute(func(a ...*Tensor) *Tensor { return GELU(Scale(Add(a[0], a[0]), 0.5)) }, y)
		}
		Sum(y).Backward()
		for range 1000 { // tensors made now take every recycled header
			Scale(x, 3)
		}
		if !stale.Shape().Equal(Shape{1, 3}) {
			t.Errorf("the header of a tensor of the previous step was recycled (now %v)", stale)
		}
		err := Catch(func() { stale.Float32s() })
		if err == nil || !strings.Contains(err.Error(), "freed") {
			t.Errorf("reading a tensor of the previous step gave %v, want a freed error", err)
		}
	})
	ZeroGrad(x)
}

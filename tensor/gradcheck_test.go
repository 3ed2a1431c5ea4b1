package tensor

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/rng"
)

// gradCase checks one differentiable op. fwd runs the op on F32 tensors
// with autograd; refFwd computes the same function in float64 with the
// reference kernels. The analytic F32 gradient of sum(out ⊙ R), for a
// random R, is compared with central finite differences of the float64
// reference.
type gradCase struct {
	name   string
	shapes [][]int // float inputs
	fwd    func(in []*Tensor) *Tensor
	refFwd func(in [][]float64) []float64
	// init optionally overrides the random inputs (e.g. to keep them positive)
	init func(i int, v []float64)
}

func randSlice(r *rng.RNG, n int, std float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.Norm() * std
	}
	return v
}

func to32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func runGradCase(t *testing.T, c gradCase) {
	t.Helper()
	r := rng.New(rng.Mix(42, uint64(len(c.name))))
	inputs := make([][]float64, len(c.shapes))
	for i, s := range c.shapes {
		inputs[i] = randSlice(r, Shape(s).Numel(), 1)
		if c.init != nil {
			c.init(i, inputs[i])
		}
		// The reference must see exactly the float32 values the op sees.
		inputs[i] = to64(to32(inputs[i]))
	}
	Step(func() {
		ts := make([]*Tensor, len(inputs))
		for i, v := range inputs {
			ts[i] = FromFloat32s(CPU, to32(v), c.shapes[i]...).SetRequiresGrad(true)
		}
		out := c.fwd(ts)
		want := c.refFwd(inputs)
		got := out.Float32s()
		if len(got) != len(want) {
			t.Fatalf("%s: output has %d elements, reference %d", c.name, len(got), len(want))
		}
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[i]); d > 1e-4*(1+math.Abs(want[i])) {
				t.Fatalf("%s: forward[%d] = %v, reference %v", c.name, i, got[i], want[i])
			}
		}
		R := randSlice(r, len(want), 1)
		R = to64(to32(R))
		out.BackwardWith(FromFloat32s(CPU, to32(R), out.Shape()...))
		objective := func() float64 {
			y := c.refFwd(inputs)
			var s float64
			for i := range y {
				s += y[i] * R[i]
			}
			return s
		}
		const h = 1e-6
		for i, x := range inputs {
			if ts[i].Grad == nil {
				t.Fatalf("%s: input %d got no gradient", c.name, i)
			}
			g := ts[i].Grad.Float32s()
			for j := range x {
				orig := x[j]
				x[j] = orig + h
				fp := objective()
				x[j] = orig - h
				fm := objective()
				x[j] = orig
				num := (fp - fm) / (2 * h)
				if d := math.Abs(float64(g[j]) - num); d > 1e-3*(1+math.Abs(num)) {
					t.Errorf("%s: d/dinput%d[%d] = %v, finite difference %v", c.name, i, j, g[j], num)
					return
				}
			}
		}
		// Again, now that every input holds a Grad (as an optimizer keeps
		// them): ops that add a leaf's gradient straight into its Grad
		// (gradSink) must add the same gradient, so each Grad doubles.
		first := make([][]float32, len(ts))
		for i := range ts {
			first[i] = ts[i].Grad.Float32s()
		}
		c.fwd(ts).BackwardWith(FromFloat32s(CPU, to32(R), out.Shape()...))
		for i := range ts {
			for j, v := range ts[i].Grad.Float32s() {
				if want := 2 * float64(first[i][j]); math.Abs(float64(v)-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("%s: the second Backward's d/dinput%d[%d] adds up to %v, want %v", c.name, i, j, v, want)
				}
			}
		}
	})
}

func TestGradients(t *testing.T) {
	ids := []int32{3, 0, 3, 1, 4, 2}
	targets := []int32{1, 4, 0, 2, 2, 3}
	cases := []gradCase{
		{name: "add", shapes: [][]int{{3, 4}, {3, 4}},
			fwd: func(in []*Tensor) *Tensor { return Add(in[0], in[1]) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], in[1], func(a, b float64) float64 { return a + b })
			}},
		{name: "sub", shapes: [][]int{{5}, {5}},
			fwd: func(in []*Tensor) *Tensor { return Sub(in[0], in[1]) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], in[1], func(a, b float64) float64 { return a - b })
			}},
		{name: "mul", shapes: [][]int{{2, 3}, {2, 3}},
			fwd: func(in []*Tensor) *Tensor { return Mul(in[0], in[1]) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], in[1], func(a, b float64) float64 { return a * b })
			}},
		{name: "mul_same", shapes: [][]int{{4}},
			fwd: func(in []*Tensor) *Tensor { return Mul(in[0], in[0]) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], in[0], func(a, b float64) float64 { return a * b })
			}},
		{name: "scale", shapes: [][]int{{6}},
			fwd: func(in []*Tensor) *Tensor { return Scale(in[0], -2.5) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], in[0], func(a, _ float64) float64 { return -2.5 * a })
			}},
		{name: "matmul_2d", shapes: [][]int{{2, 3, 5}, {5, 4}},
			fwd: func(in []*Tensor) *Tensor { return MatMul(in[0], in[1]) },
			refFwd: func(in [][]float64) []float64 {
				c := make([]float64, 6*4)
				ref.MatMul(in[0], in[1], c, nil, 6, 4, 5, false, false, 1, 0)
				return c
			}},
		{name: "matmul_batched", shapes: [][]int{{3, 2, 5}, {3, 5, 4}},
			fwd: func(in []*Tensor) *Tensor { return MatMul(in[0], in[1]) },
			refFwd: func(in [][]float64) []float64 {
				c := make([]float64, 3*2*4)
				for b := 0; b < 3; b++ {
					ref.MatMul(in[0][b*10:], in[1][b*20:], c[b*8:], nil, 2, 4, 5, false, false, 1, 0)
				}
				return c
			}},
		{name: "linear_bias", shapes: [][]int{{2, 3, 5}, {5, 7}, {7}},
			fwd: func(in []*Tensor) *Tensor { return Linear(in[0], in[1], in[2]) },
			refFwd: func(in [][]float64) []float64 {
				c := make([]float64, 6*7)
				ref.MatMul(in[0], in[1], c, in[2], 6, 7, 5, false, false, 1, 0)
				return c
			}},
		{name: "linear_nobias", shapes: [][]int{{4, 5}, {5, 3}},
			fwd: func(in []*Tensor) *Tensor { return Linear(in[0], in[1], nil) },
			refFwd: func(in [][]float64) []float64 {
				c := make([]float64, 4*3)
				ref.MatMul(in[0], in[1], c, nil, 4, 3, 5, false, false, 1, 0)
				return c
			}},
		{name: "linear_t", shapes: [][]int{{2, 3, 5}, {6, 5}},
			fwd: func(in []*Tensor) *Tensor { return LinearT(in[0], in[1]) },
			refFwd: func(in [][]float64) []float64 {
				c := make([]float64, 6*6)
				ref.MatMul(in[0], in[1], c, nil, 6, 6, 5, false, true, 1, 0)
				return c
			}},
		{name: "gelu", shapes: [][]int{{3, 7}},
			fwd:    func(in []*Tensor) *Tensor { return GELU(in[0]) },
			refFwd: func(in [][]float64) []float64 { return ref.GELU(in[0]) },
			init: func(_ int, v []float64) {
				for i := range v {
					v[i] *= 2
				}
			}},
		{name: "softmax", shapes: [][]int{{3, 6}},
			fwd:    func(in []*Tensor) *Tensor { return Softmax(in[0]) },
			refFwd: func(in [][]float64) []float64 { return ref.Softmax(in[0], 3, 6) }},
		{name: "layernorm_bias", shapes: [][]int{{2, 3, 8}, {8}, {8}},
			fwd:    func(in []*Tensor) *Tensor { return LayerNorm(in[0], in[1], in[2], 1e-5) },
			refFwd: func(in [][]float64) []float64 { return ref.LayerNorm(in[0], in[1], in[2], 6, 8, 1e-5) }},
		{name: "layernorm_nobias", shapes: [][]int{{5, 8}, {8}},
			fwd:    func(in []*Tensor) *Tensor { return LayerNorm(in[0], in[1], nil, 1e-5) },
			refFwd: func(in [][]float64) []float64 { return ref.LayerNorm(in[0], in[1], nil, 5, 8, 1e-5) }},
		// x feeds the LayerNorm and the residual add: the add's gradient is
		// gathered first, and the LayerNorm's backward adds it into dx.
		{name: "layernorm_residual", shapes: [][]int{{2, 3, 8}, {8}, {8}},
			fwd: func(in []*Tensor) *Tensor { return Add(LayerNorm(in[0], in[1], in[2], 1e-5), in[0]) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(ref.LayerNorm(in[0], in[1], in[2], 6, 8, 1e-5), in[0], func(a, b float64) float64 { return a + b })
			}},
		{name: "add_dropout", shapes: [][]int{{3, 4}, {3, 4}},
			fwd: func(in []*Tensor) *Tensor { return AddDropout(in[0], in[1], 0.3, &DropoutStream{Key: 5}) },
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0], dropoutRef(in[1], 5, 0.3), func(a, b float64) float64 { return a + b })
			}},
		// A dropout's output feeding a LayerNorm and an add: the
		// LayerNorm's backward pass masks the whole gradient for the
		// dropout (the fused path).
		{name: "dropout_layernorm", shapes: [][]int{{2, 3, 8}, {2, 3, 8}, {8}},
			fwd: func(in []*Tensor) *Tensor {
				h := AddDropout(in[0], in[1], 0.3, &DropoutStream{Key: 6})
				return Add(LayerNorm(h, in[2], nil, 1e-5), h)
			},
			refFwd: func(in [][]float64) []float64 {
				h := zipWith(in[0], dropoutRef(in[1], 6, 0.3), func(a, b float64) float64 { return a + b })
				return zipWith(ref.LayerNorm(h, in[2], nil, 6, 8, 1e-5), h, func(a, b float64) float64 { return a + b })
			}},
		// The same, but a gradient reaches the dropout's output after the
		// LayerNorm's backward pass: the masked copy is stale and the
		// dropout masks what it gets.
		{name: "dropout_layernorm_late", shapes: [][]int{{2, 3, 8}, {8}},
			fwd: func(in []*Tensor) *Tensor {
				h := Dropout(in[0], 0.4, &DropoutStream{Key: 7})
				return Add(Mul(h, h), LayerNorm(h, in[1], nil, 1e-5))
			},
			refFwd: func(in [][]float64) []float64 {
				h := dropoutRef(in[0], 7, 0.4)
				return zipWith(zipWith(h, h, func(a, b float64) float64 { return a * b }), ref.LayerNorm(h, in[1], nil, 6, 8, 1e-5), func(a, b float64) float64 { return a + b })
			}},
		// A table used twice, as GPT-2 ties its token embedding and its
		// head: both uses add into the table's Grad.
		{name: "embedding_tied", shapes: [][]int{{5, 4}},
			fwd: func(in []*Tensor) *Tensor { return LinearT(Embedding(in[0], FromInt32s(CPU, ids, 2, 3)), in[0]) },
			refFwd: func(in [][]float64) []float64 {
				e := ref.Embedding(in[0], ids, 4)
				out := make([]float64, 6*5)
				ref.MatMul(e, in[0], out, nil, 6, 5, 4, false, true, 1, 0)
				return out
			}},
		{name: "cross_entropy", shapes: [][]int{{2, 3, 5}},
			fwd: func(in []*Tensor) *Tensor {
				return CrossEntropy(in[0], FromInt32s(CPU, targets, 2, 3))
			},
			refFwd: func(in [][]float64) []float64 {
				var m float64
				for _, l := range ref.CrossEntropy(in[0], targets, 6, 5) {
					m += l / 6
				}
				return []float64{m}
			},
			init: func(_ int, v []float64) {
				for i := range v {
					v[i] *= 3
				}
			}},
		{name: "embedding", shapes: [][]int{{5, 4}},
			fwd: func(in []*Tensor) *Tensor { return Embedding(in[0], FromInt32s(CPU, ids, 2, 3)) },
			refFwd: func(in [][]float64) []float64 {
				return ref.Embedding(in[0], ids, 4)
			}},
		{name: "attention", shapes: [][]int{{2, 5, 3 * 8}},
			fwd:    func(in []*Tensor) *Tensor { return Attention(in[0], 2) },
			refFwd: func(in [][]float64) []float64 { return ref.Attention(in[0], 2, 5, 8, 2) }},
		{name: "sum", shapes: [][]int{{3, 4}},
			fwd: func(in []*Tensor) *Tensor { return Sum(in[0]) },
			refFwd: func(in [][]float64) []float64 {
				var s float64
				for _, v := range in[0] {
					s += v
				}
				return []float64{s}
			}},
		{name: "mean", shapes: [][]int{{3, 4}},
			fwd: func(in []*Tensor) *Tensor { return Mean(in[0]) },
			refFwd: func(in [][]float64) []float64 {
				var s float64
				for _, v := range in[0] {
					s += v
				}
				return []float64{s / 12}
			}},
		{name: "reshape_rows", shapes: [][]int{{4, 6}},
			fwd: func(in []*Tensor) *Tensor {
				return Mul(in[0].Reshape(2, -1).Rows(1, 2), in[0].Reshape(8, 3).Rows(4, 8).Reshape(1, 12))
			},
			refFwd: func(in [][]float64) []float64 {
				return zipWith(in[0][12:], in[0][12:], func(a, b float64) float64 { return a * b })
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runGradCase(t, c) })
	}
}

// dropoutRef is dropout at site 0 of a stream at row 0 with key key, in
// float64: element i keeps where word i%4 of Philox4x32-10 at counter
// (i/4, 0, 0, 0) under the key is, as a uniform in [0, 1), at least p.
func dropoutRef(x []float64, key uint64, p float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		w := rng.Philox4x32([4]uint32{uint32(i / 4), 0, 0, 0}, [2]uint32{uint32(key), uint32(key >> 32)})
		if float64(w[i%4])/(1<<32) >= float64(p) {
			out[i] = v * float64(float32(1/(1-p)))
		}
	}
	return out
}

func zipWith(a, b []float64, f func(a, b float64) float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = f(a[i], b[i])
	}
	return out
}

// TestDropoutGradFusion: the LayerNorm's backward pass masks the
// gradient for the dropout whose output it reads, and the dropout takes
// that copy, where the gradient is whole; where more reaches the dropout's
// output afterwards, it masks what it gets.
func TestDropoutGradFusion(t *testing.T) {
	for _, c := range []struct {
		name  string
		fused int64
		f     func(x, w *Tensor) *Tensor
	}{
		{"layernorm then add", 1, func(x, w *Tensor) *Tensor {
			h := Dropout(x, 0.3, &DropoutStream{Key: 1})
			return Add(LayerNorm(h, w, nil, 1e-5), h)
		}},
		{"a use after the layernorm's", 0, func(x, w *Tensor) *Tensor {
			h := Dropout(x, 0.3, &DropoutStream{Key: 1})
			return Add(Mul(h, h), LayerNorm(h, w, nil, 1e-5))
		}},
	} {
		Step(func() {
			x := Randn(CPU, NewRNG(2), 1, 4, 8).SetRequiresGrad(true)
			w := Ones(CPU, 8).SetRequiresGrad(true)
			before := fusedDropoutGrads.Load()
			Sum(c.f(x, w)).Backward()
			if got := fusedDropoutGrads.Load() - before; got != c.fused {
				t.Errorf("%s: %d dropout gradients from the layernorm's kernel, want %d", c.name, got, c.fused)
			}
		})
	}
}

// TestDropoutSplitsAlike: a batch's masks are its rows' own, keyed by
// each row's place in the global batch (DropoutStream.Row0), so the rows
// dropped in two halves, or in one piece, get the same masks; a different
// site, key or place gives different ones.
func TestDropoutSplitsAlike(t *testing.T) {
	Step(func() {
		x := Randn(CPU, NewRNG(3), 1, 4, 5, 8)
		whole := Dropout(x, 0.5, &DropoutStream{Key: 7, Site: 3, Row0: 10}).Float32s()
		xs := x.Float32s()
		var halves []float32
		for h := 0; h < 2; h++ {
			part := FromFloat32s(CPU, xs[h*2*5*8:(h+1)*2*5*8], 2, 5, 8)
			halves = append(halves, Dropout(part, 0.5, &DropoutStream{Key: 7, Site: 3, Row0: int64(10 + 2*h)}).Float32s()...)
		}
		for i := range whole {
			if math.Float32bits(whole[i]) != math.Float32bits(halves[i]) {
				t.Fatalf("element %d: %v dropped whole, %v dropped in halves", i, whole[i], halves[i])
			}
		}
		for _, s := range []DropoutStream{{Key: 7, Site: 4, Row0: 10}, {Key: 8, Site: 3, Row0: 10}, {Key: 7, Site: 3, Row0: 11}} {
			other := Dropout(x, 0.5, &s).Float32s()
			same := 0
			for i := range whole {
				if (whole[i] == 0) == (other[i] == 0) {
					same++
				}
			}
			if same > len(whole)*3/4 { // independent masks at p 0.5 agree on about half
				t.Errorf("stream %+v: %d of %d elements masked alike", s, same, len(whole))
			}
		}
	})
}

func TestDropout(t *testing.T) {
	Step(func() {
		x := Ones(CPU, 1000).SetRequiresGrad(true)
		y := Dropout(x, 0.25, &DropoutStream{Key: 1})
		vals := y.Float32s()
		zeros := 0
		for _, v := range vals {
			switch v {
			case 0:
				zeros++
			case float32(1 / 0.75):
			default:
				t.Fatalf("dropout value %v", v)
			}
		}
		if zeros < 180 || zeros > 320 {
			t.Fatalf("dropped %d of 1000 at p=0.25", zeros)
		}
		Sum(y).Backward()
		g := x.Grad.Float32s()
		for i := range g {
			if g[i] != vals[i] {
				t.Fatalf("grad[%d] = %v, want the mask value %v", i, g[i], vals[i])
			}
		}
	})
}

func ExampleCatch() {
	err := Catch(func() {
		a := Zeros(CPU, 2, 3)
		b := Zeros(CPU, 4, 5)
		MatMul(a, b)
	})
	fmt.Println(err)
	// Output: matmul: inner dimensions 3 and 4 differ (operands: tensor([2 3] f32 cpu) tensor([4 5] f32 cpu))
}

// TestCrossEntropyInPlace: the in-place loss has CrossEntropy's value and
// gradients, bit for bit, and its backward pass writes the logits'
// gradient over the logits (no array of their size of its own).
func TestCrossEntropyInPlace(t *testing.T) {
	targets := []int32{1, 4, 0, 2, -1, 3}
	run := func(inPlace bool) (loss float32, grad, after []float32) {
		Step(func() {
			w := Randn(CPU, NewRNG(3), 1, 6, 5).SetRequiresGrad(true)
			logits := Scale(w, 2)
			tg := FromInt32s(CPU, targets, 6)
			var l *Tensor
			if inPlace {
				l = CrossEntropyInPlace(logits, tg)
			} else {
				l = CrossEntropy(logits, tg)
			}
			loss = l.Item()
			l.Backward()
			grad, after = w.Grad.Float32s(), logits.Float32s()
		})
		return
	}
	l0, g0, a0 := run(false)
	l1, g1, a1 := run(true)
	if l0 != l1 {
		t.Fatalf("loss %v in place, %v not", l1, l0)
	}
	for i := range g0 {
		if g0[i] != g1[i] {
			t.Fatalf("gradient[%d] %v in place, %v not", i, g1[i], g0[i])
		}
		if a1[i] != g1[i]/2 { // d loss/d logits, where w's gradient is twice it
			t.Fatalf("logits[%d] after backward = %v, want the gradient %v written over them", i, a1[i], g1[i]/2)
		}
	}
	if a0[0] == a1[0] {
		t.Error("the plain loss's logits changed too, or the in-place one's did not")
	}
}

// TestWithLossGrad: under SetLossGrad the in-place loss forms the
// logits' gradient in its forward pass, with the values of the two passes
// bit for bit (a seed of 0.75 as accumulation's would be), and a backward
// pass seeded with another tensor panics.
func TestWithLossGrad(t *testing.T) {
	targets := []int32{1, 4, 0, 2, -1, 3}
	run := func(fused bool) (loss float32, grad []float32) {
		Step(func() {
			w := Randn(CPU, NewRNG(3), 1, 6, 5).SetRequiresGrad(true)
			logits := Scale(w, 2)
			tg := FromInt32s(CPU, targets, 6)
			g := Full(CPU, 0.75)
			var l *Tensor
			if fused {
				prev := SetLossGrad(g)
				l = CrossEntropyInPlace(logits, tg)
				SetLossGrad(prev)
				if a := logits.Float32s(); a[0] == 2*w.Float32s()[0] {
					t.Error("the logits are unchanged after the fused forward pass")
				}
			} else {
				l = CrossEntropyInPlace(logits, tg)
			}
			loss = l.Item()
			l.BackwardWith(g)
			grad = w.Grad.Float32s()
		})
		return
	}
	l0, g0 := run(false)
	l1, g1 := run(true)
	if l0 != l1 {
		t.Fatalf("loss %v fused, %v not", l1, l0)
	}
	for i := range g0 {
		if g0[i] != g1[i] {
			t.Fatalf("gradient[%d] %v fused, %v not", i, g1[i], g0[i])
		}
	}
	Step(func() {
		w := Randn(CPU, NewRNG(3), 1, 6, 5).SetRequiresGrad(true)
		tg := FromInt32s(CPU, targets, 6)
		var l *Tensor
		prev := SetLossGrad(Full(CPU, 1))
		l = CrossEntropyInPlace(Scale(w, 2), tg)
		SetLossGrad(prev)
		defer func() {
			if e, ok := recover().(*Error); !ok || !strings.Contains(e.Msg, "SetLossGrad") {
				t.Errorf("a backward pass with another gradient: %v, want a panic naming SetLossGrad", e)
			}
		}()
		l.Backward()
	})
}

// TestAddLayerNorm: the fused add and LayerNorm give the two ops' values
// and gradients bit for bit: a plain add, a dropout add, a dropout alone.
func TestAddLayerNorm(t *testing.T) {
	testAddNorm(t, func(x, y *Tensor, p float32, s *DropoutStream, w, b *Tensor) (*Tensor, *Tensor) {
		return AddLayerNorm(x, y, p, s, nil, w, b, 1e-5)
	}, func(sum, w, b *Tensor) *Tensor { return LayerNorm(sum, w, b, 1e-5) })
}

// testAddNorm holds a fused residual add and norm (fused; b is the norm's
// bias, for norms that have one) to the ops one after the other (the
// dropout or add, then norm), bit for bit: values and every gradient.
func testAddNorm(t *testing.T, fused func(x, y *Tensor, p float32, s *DropoutStream, w, b *Tensor) (*Tensor, *Tensor), norm func(sum, w, b *Tensor) *Tensor) {
	for _, c := range []struct {
		name  string
		p     float32
		withX bool
	}{{"add", 0, true}, {"dropout add", 0.3, true}, {"dropout", 0.25, false}} {
		run := func(isFused bool) (vals [][]float32) {
			Step(func() {
				x := Randn(CPU, NewRNG(4), 1, 3, 16).SetRequiresGrad(true)
				y := Randn(CPU, NewRNG(5), 1, 3, 16).SetRequiresGrad(true)
				w := Randn(CPU, NewRNG(6), 1, 16).SetRequiresGrad(true)
				b := Randn(CPU, NewRNG(7), 1, 16).SetRequiresGrad(true)
				var xx *Tensor
				if c.withX {
					xx = x
				}
				var sum, out *Tensor
				s := &DropoutStream{Key: 9, Site: 2, Row0: 5}
				if isFused {
					sum, out = fused(xx, y, c.p, s, w, b)
				} else {
					if c.withX {
						sum = AddDropout(x, y, c.p, s)
					} else {
						sum = Dropout(y, c.p, s)
					}
					out = norm(sum, w, b)
				}
				// Both outputs feed the loss, as a residual stream's do.
				loss := Sum(Add(Mul(out, out), sum))
				loss.Backward()
				vals = [][]float32{sum.Float32s(), out.Float32s(), y.Grad.Float32s(), w.Grad.Float32s()}
				if b.Grad != nil {
					vals = append(vals, b.Grad.Float32s())
				}
				if c.withX {
					vals = append(vals, x.Grad.Float32s())
				}
			})
			return vals
		}
		want, got := run(false), run(true)
		if len(got) != len(want) {
			t.Fatalf("%s: %d outputs fused, %d apart", c.name, len(got), len(want))
		}
		for k := range want {
			for i := range want[k] {
				if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("%s: output %d[%d] = %v fused, %v apart", c.name, k, i, got[k][i], want[k][i])
				}
			}
		}
	}
}

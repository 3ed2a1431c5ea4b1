package optim

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// TestMuonMatchesReference holds three Muon steps to a float64 reference
// written from the algorithm (refMuon), on matrices that take every path:
// a fused q/k/v whose q is tall and wider than its k and v (the parts
// land in two Newton–Schulz batches), a wide matrix, a fused gate/up of
// two tall parts (one batch, transposed straight in), and an embedding
// that AdamW updates. Packed and unpacked, with a clip coefficient on
// the device and without, and with weight decay.
func TestMuonMatchesReference(t *testing.T) {
	for _, packed := range []bool{false, true} {
		for _, scaled := range []bool{false, true} {
			t.Run(fmt.Sprintf("packed=%v,scaled=%v", packed, scaled), func(t *testing.T) { testMuonReference(t, packed, scaled) })
		}
	}
}

func testMuonReference(t *testing.T, packed, scaled bool) {
	r := tensor.NewRNG(7)
	mk := func(name string, parts []int, shape ...int) *nn.Parameter {
		p := nn.NewParameter(name, tensor.Randn(tensor.CPU, r, 0.2, shape...))
		p.Parts = parts
		return p
	}
	params := []*nn.Parameter{
		mk("emb", nil, 10, 16),
		mk("qkv", []int{24, 8, 8}, 16, 40),
		mk("proj", []int{16}, 24, 16),
		mk("gate_up", []int{40, 40}, 16, 80),
	}
	cfg := MuonConfig{LR: 0.05, Momentum: 0.9, WeightDecay: 0.1}
	o, err := NewMuon(params, AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Free()
	if packed && !o.Pack() {
		t.Fatal("not packed")
	}
	if o.Matrices() != 3 {
		t.Fatalf("%d Muon matrices, want 3", o.Matrices())
	}
	type refState struct{ w, m []float64 }
	refs := map[string]*refState{}
	for _, p := range params[1:] {
		refs[p.Name] = &refState{w: to64(p.T.Float32s()), m: make([]float64, p.T.Numel())}
	}
	coef := float32(1)
	var gs *tensor.Tensor
	if scaled {
		coef = 0.7
		gs = tensor.Full(tensor.CPU, coef, 1)
	}
	lrs := []float32{1e-2, 5e-3, 2e-3}
	for step, lr := range lrs {
		o.SetLR(lr)
		grads := map[string][]float32{}
		for _, p := range params {
			g := tensor.Randn(tensor.CPU, r, 1, p.T.Shape()...)
			if packed {
				p.T.Grad.CopyFrom(g)
			} else {
				p.T.Grad = g
			}
			grads[p.Name] = g.Float32s()
		}
		o.StepSched(gs, nil)
		rate := float64(cfg.LR) * float64(lr) / 1e-2
		for _, p := range params[1:] {
			s := refs[p.Name]
			g := to64(grads[p.Name])
			for i := range g {
				g[i] *= float64(coef)
			}
			refMuon(s.w, s.m, g, p.T.Dim(0), p.Parts, rate, float64(cfg.Momentum), float64(cfg.WeightDecay))
			got := p.T.Float32s()
			for i := range got {
				if d := math.Abs(float64(got[i]) - s.w[i]); d > 2e-6 {
					t.Fatalf("step %d: %s[%d] = %v, reference %v", step, p.Name, i, got[i], s.w[i])
				}
			}
		}
	}
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i := range v {
		out[i] = float64(v[i])
	}
	return out
}

// refMuon is one Muon step of w ([in, out], row-major, parts along out)
// in float64, from the algorithm: Nesterov momentum, each part's
// [width, in] matrix orthogonalised by refNS, scaled by max(1,
// width/in)^0.5, decoupled weight decay.
func refMuon(w, m, g []float64, in int, parts []int, rate, mu, wd float64) {
	out := len(w) / in
	u := make([]float64, len(w))
	for i := range w {
		m[i] = mu*m[i] + (1-mu)*g[i]
		u[i] = (1-mu)*g[i] + mu*m[i]
	}
	a := 0
	for _, pw := range parts {
		x := make([]float64, pw*in) // [pw, in]: the part transposed
		for r := range pw {
			for c := range in {
				x[r*in+c] = u[c*out+a+r]
			}
		}
		o := refNS(x, pw, in)
		s := math.Sqrt(max(1, float64(pw)/float64(in)))
		for r := range pw {
			for c := range in {
				k := c*out + a + r
				w[k] = w[k]*(1-rate*wd) - rate*s*o[r*in+c]
			}
		}
		a += pw
	}
}

// refNS is Newton–Schulz's five quintic iterations on x (rows×cols),
// transposed while it is tall.
func refNS(x []float64, rows, cols int) []float64 {
	tall := rows > cols
	if tall {
		x, rows, cols = refT(x, rows, cols), cols, rows
	}
	var n float64
	for _, v := range x {
		n += v * v
	}
	n = math.Sqrt(n) + 1e-7
	for i := range x {
		x[i] /= n
	}
	mul := func(a, b []float64, m, k, nn int) []float64 {
		c := make([]float64, m*nn)
		for i := range m {
			for j := range nn {
				var s float64
				for l := range k {
					s += a[i*k+l] * b[l*nn+j]
				}
				c[i*nn+j] = s
			}
		}
		return c
	}
	for range 5 {
		A := mul(x, refT(x, rows, cols), rows, cols, rows)
		AA := mul(A, A, rows, rows, rows)
		B := make([]float64, len(A))
		for i := range B {
			B[i] = -4.7750*A[i] + 2.0315*AA[i]
		}
		BX := mul(B, x, rows, rows, cols)
		for i := range x {
			x[i] = 3.4445*x[i] + BX[i]
		}
	}
	if tall {
		x = refT(x, rows, cols)
	}
	return x
}

func refT(x []float64, rows, cols int) []float64 {
	t := make([]float64, len(x))
	for r := range rows {
		for c := range cols {
			t[c*rows+r] = x[r*cols+c]
		}
	}
	return t
}

package tensor

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend/ref"
)

// The Llama-style ops' gradients against finite differences of the
// float64 references (runGradCase), and the fused residual RMSNorm
// against the two ops it fuses.
func TestLlamaGradients(t *testing.T) {
	const hd, maxPos = 4, 8
	invFreq := []float32{1, 0.01}
	table := func() *Tensor { return RotaryTable(CPU, invFreq, maxPos) }
	cos, sin := make([]float64, maxPos*hd/2), make([]float64, maxPos*hd/2)
	tab := table().Float32s()
	for i := range cos {
		cos[i], sin[i] = float64(tab[i]), float64(tab[len(cos)+i])
	}
	cases := []gradCase{
		{name: "rms_norm", shapes: [][]int{{3, 8}, {8}},
			fwd:    func(in []*Tensor) *Tensor { return RMSNorm(in[0], in[1], 1e-5) },
			refFwd: func(in [][]float64) []float64 { return ref.RMSNorm(in[0], in[1], 3, 8, 1e-5) }},
		{name: "swiglu", shapes: [][]int{{2, 3, 10}},
			fwd:    func(in []*Tensor) *Tensor { return SwiGLU(in[0]) },
			refFwd: func(in [][]float64) []float64 { return ref.SwiGLU(in[0], 6, 5) }},
		{name: "rotary", shapes: [][]int{{2, 5, (2 + 2*1) * hd}},
			fwd: func(in []*Tensor) *Tensor { return Rotary(in[0], table(), nil, nil, 2, 1, 0, 0) },
			refFwd: func(in [][]float64) []float64 {
				return ref.Rotary(in[0], 2, 5, 2, 1, hd, 0, cos, sin, nil, nil, 0)
			}},
		{name: "rotary qk-norm", shapes: [][]int{{2, 5, (2 + 2*1) * hd}, {hd}, {hd}},
			fwd: func(in []*Tensor) *Tensor { return Rotary(in[0], table(), in[1], in[2], 2, 1, 0, 1e-6) },
			refFwd: func(in [][]float64) []float64 {
				return ref.Rotary(in[0], 2, 5, 2, 1, hd, 0, cos, sin, in[1], in[2], 1e-6)
			}},
		{name: "grouped attention", shapes: [][]int{{2, 5, 8 + 2*4}},
			fwd:    func(in []*Tensor) *Tensor { return GroupedAttention(in[0], 4, 2) },
			refFwd: func(in [][]float64) []float64 { return ref.GroupedAttention(in[0], 2, 5, 8, 4, 2) }},
	}
	for _, c := range cases {
		runGradCase(t, c)
	}
}

func TestAddRMSNorm(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     float32
		withX bool
	}{{"add", 0, true}, {"dropout add", 0.3, true}, {"dropout", 0.25, false}} {
		run := func(fused bool) (vals [][]float32) {
			Step(func() {
				x := Randn(CPU, NewRNG(4), 1, 3, 16).SetRequiresGrad(true)
				y := Randn(CPU, NewRNG(5), 1, 3, 16).SetRequiresGrad(true)
				w := Randn(CPU, NewRNG(6), 1, 16).SetRequiresGrad(true)
				var xx *Tensor
				if c.withX {
					xx = x
				}
				var sum, out *Tensor
				s := &DropoutStream{Key: 9, Site: 2, Row0: 5}
				if fused {
					sum, out = AddRMSNorm(xx, y, c.p, s, nil, w, 1e-5)
				} else {
					if c.withX {
						sum = AddDropout(x, y, c.p, s)
					} else {
						sum = Dropout(y, c.p, s)
					}
					out = RMSNorm(sum, w, 1e-5)
				}
				loss := Sum(Add(Mul(out, out), sum))
				loss.Backward()
				vals = [][]float32{sum.Float32s(), out.Float32s(), y.Grad.Float32s(), w.Grad.Float32s()}
				if c.withX {
					vals = append(vals, x.Grad.Float32s())
				}
			})
			return vals
		}
		want, got := run(false), run(true)
		for k := range want {
			for i := range want[k] {
				if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("%s: output %d[%d] = %v fused, %v apart", c.name, k, i, got[k][i], want[k][i])
				}
			}
		}
	}
}

package tensor

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend/ref"
)

// The Llama-style ops' gradients (and ReLU²'s) against finite
// differences of the float64 references (runGradCase), and the fused
// residual RMSNorm against the two ops it fuses.
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
		{name: "relu2", shapes: [][]int{{2, 3, 10}},
			fwd:    func(in []*Tensor) *Tensor { return ReLU2(in[0]) },
			refFwd: func(in [][]float64) []float64 { return ref.ReLU2(in[0]) },
			init: func(_ int, v []float64) { // both signs, away from the kink at 0
				for i, x := range v {
					if math.Abs(x) < 1e-3 {
						v[i] = math.Copysign(1e-3, x)
					}
				}
			}},
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
	testAddNorm(t, func(x, y *Tensor, p float32, s *DropoutStream, w, _ *Tensor) (*Tensor, *Tensor) {
		return AddRMSNorm(x, y, p, s, nil, w, 1e-5)
	}, func(sum, w, _ *Tensor) *Tensor { return RMSNorm(sum, w, 1e-5) })
}

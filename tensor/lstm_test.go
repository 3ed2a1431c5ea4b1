package tensor

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend/ref"
)

// The LSTM's gradients (through every step of the recurrence, to the
// input's projection and the recurrent weight) against finite differences
// of the float64 reference (runGradCase), also as a layer with its input
// projection (Linear, then LSTM).
func TestLSTMGradients(t *testing.T) {
	const B, T, I, H = 2, 5, 3, 4
	cases := []gradCase{
		{name: "lstm", shapes: [][]int{{B, T, 4 * H}, {H, 4 * H}},
			fwd:    func(in []*Tensor) *Tensor { return LSTM(in[0], in[1], nil) },
			refFwd: func(in [][]float64) []float64 { return ref.LSTMRecurrence(in[0], in[1], B, T, H) }},
		{name: "lstm layer", shapes: [][]int{{B, T, I}, {I, 4 * H}, {4 * H}, {H, 4 * H}},
			fwd: func(in []*Tensor) *Tensor { return LSTM(Linear(in[0], in[1], in[2]), in[3], nil) },
			refFwd: func(in [][]float64) []float64 {
				return ref.LSTM(in[0], in[1], in[2], in[3], B, T, I, H)
			}},
	}
	for _, c := range cases {
		runGradCase(t, c)
	}
}

// A sequence run in two calls that carry the state is the sequence run in
// one.
func TestLSTMState(t *testing.T) {
	const B, T, H = 2, 6, 3
	xs, ws := make([]float32, B*T*4*H), make([]float32, H*4*H)
	for i := range xs {
		xs[i] = float32(math.Sin(float64(i)))
	}
	for i := range ws {
		ws[i] = float32(math.Cos(float64(3 * i)))
	}
	Step(func() {
		x, w := FromFloat32s(CPU, xs, B, T, 4*H), FromFloat32s(CPU, ws, H, 4*H)
		whole := LSTM(x, w, nil).Float32s()
		st := &LSTMState{H: Zeros(CPU, B, H), C: Zeros(CPU, B, H)}
		var got []float32
		for _, r := range [][2]int{{0, 2}, {2, T}} {
			part := make([]float32, 0, B*(r[1]-r[0])*4*H)
			for b := 0; b < B; b++ {
				part = append(part, xs[(b*T+r[0])*4*H:(b*T+r[1])*4*H]...)
			}
			got = append(got, LSTM(FromFloat32s(CPU, part, B, r[1]-r[0], 4*H), w, st).Float32s()...)
		}
		// got is [part][B][t][H]; whole is [B][T][H].
		i := 0
		for _, r := range [][2]int{{0, 2}, {2, T}} {
			for b := 0; b < B; b++ {
				for s := r[0]; s < r[1]; s++ {
					for j := 0; j < H; j++ {
						if w := whole[(b*T+s)*H+j]; math.Abs(float64(got[i]-w)) > 1e-6 {
							t.Fatalf("b %d step %d unit %d: %v in two calls, %v in one", b, s, j, got[i], w)
						}
						i++
					}
				}
			}
		}
	})
}

package cpu

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
)

// vecInputs spans the clamp range and beyond, with a length that leaves a
// scalar tail after the 8-wide SIMD loop.
func vecInputs(scale float64) []float32 {
	r := rng.New(11)
	x := make([]float32, 1003)
	for i := range x {
		x[i] = float32((r.Float64()*2 - 1) * scale)
	}
	x[0], x[1], x[2], x[3] = 0, -0.0, 88.3, -87.3
	return x
}

func TestExpChunk(t *testing.T) {
	for name, fn := range map[string]func(d, s []float32){"default": expChunk, "go": expGo} {
		x := vecInputs(100)
		got := make([]float32, len(x))
		fn(got, x)
		for i, v := range x {
			want := math.Exp(float64(min(max(v, -87.33654), 88.37626))) // clamped in float32, as the kernels do
			if d := math.Abs(float64(got[i])-want) / want; d > 4e-7 {
				t.Fatalf("%s: exp(%v) = %v, want %v (relative error %.2g)", name, v, got[i], want, d)
			}
		}
	}
}

func geluRef(x float64) (y, dy float64) {
	c := math.Sqrt(2 / math.Pi)
	u := c * (x + 0.044715*x*x*x)
	th := math.Tanh(u)
	y = 0.5 * x * (1 + th)
	dy = 0.5*(1+th) + 0.5*x*(1-th*th)*c*(1+3*0.044715*x*x)
	return
}

func TestGELUChunks(t *testing.T) {
	type pair struct {
		fwd func(d, s []float32)
		bwd func(dx, x, dy []float32)
	}
	for name, k := range map[string]pair{"default": {geluChunk, geluBackwardChunk}, "go": {geluGo, geluBackwardGo}} {
		for _, scale := range []float64{3, 30} {
			x := vecInputs(scale)
			dy := vecInputs(2)
			y, dx := make([]float32, len(x)), make([]float32, len(x))
			k.fwd(y, x)
			k.bwd(dx, x, dy)
			for i, v := range x {
				wy, wd := geluRef(float64(v))
				wd *= float64(dy[i])
				if math.Abs(float64(y[i])-wy) > 2e-6*(1+math.Abs(wy)) {
					t.Fatalf("%s: gelu(%v) = %v, want %v", name, v, y[i], wy)
				}
				if math.Abs(float64(dx[i])-wd) > 2e-6*(1+math.Abs(wd)) {
					t.Fatalf("%s: gelu'(%v)·%v = %v, want %v", name, v, dy[i], dx[i], wd)
				}
			}
		}
	}
}

package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend/cuda/emu"
	"github.com/fleetml/fleet/backend/cuda/kernels"
)

func init() { opCases.Add(map[string]emu.Case{"fleet_bias_rows_f32": testBiasRows}) }

// testBiasRows holds MatMul's bias epilogue to plain Go: beta 0 must
// overwrite (the output starts as NaN poison), other betas scale and add.
func testBiasRows(t *testing.T, m *emu.Module) {
	for _, sh := range [][2]int{{0, 5}, {1, 1}, {3, 7}, {5, 300}, {33, 17}} {
		for _, beta := range []float32{0, 1, 0.5} {
			for _, sms := range smCounts {
				rows, cols := sh[0], sh[1]
				r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
				bias, c0 := emu.RandF32(r, cols), emu.RandF32(r, rows*cols)
				c := emu.Poison(emu.F32, rows*cols)
				if beta != 0 {
					c = emu.NewF32(c0)
				}
				name := fmt.Sprintf("%dx%d beta=%v sms=%d", rows, cols, beta, sms)
				if err := kernels.BiasRows(launcher{m, sms}, c, emu.NewF32(bias), beta, rows, cols); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				want := make([]float32, rows*cols)
				for i := range want {
					want[i] = bias[i%cols]
					if beta != 0 {
						want[i] += beta * c0[i]
					}
				}
				if err := emu.AllClose(c.F32(), want, 1e-6, 0); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
}

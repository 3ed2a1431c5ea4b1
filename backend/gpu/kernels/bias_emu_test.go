package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

func init() {
	opCases.Add(map[string]emu.Case{"fleet_bias_rows_f32": testBiasRows, "fleet_bias_rows_bf16": testBiasRowsBF16})
}

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
				if err := kernels.BiasRows(launcher{m, sms}, backend.F32, c, emu.NewF32(bias), beta, rows, cols); err != nil {
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

// testBiasRowsBF16 is testBiasRows for bf16 activations: c and the bias
// (a weight's bf16 copy) in bf16, the sum in float rounded once (to
// within one bf16 rounding: a fused multiply-add may or may not round
// beta·c first).
func testBiasRowsBF16(t *testing.T, m *emu.Module) {
	bf := func(v []float32) []uint16 {
		out := make([]uint16, len(v))
		for i, x := range v {
			out[i] = backend.F32ToBF16(x)
		}
		return out
	}
	wide := func(h []uint16) []float32 {
		out := make([]float32, len(h))
		for i, x := range h {
			out[i] = backend.BF16ToF32(x)
		}
		return out
	}
	for _, sh := range [][2]int{{0, 5}, {1, 1}, {3, 7}, {33, 17}} {
		for _, beta := range []float32{0, 1, 0.5} {
			rows, cols := sh[0], sh[1]
			r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)+7))
			bias, c0 := bf(emu.RandF32(r, cols)), bf(emu.RandF32(r, rows*cols))
			c := emu.Poison(emu.U16, rows*cols)
			if beta != 0 {
				c = emu.NewU16(c0)
			}
			name := fmt.Sprintf("%dx%d beta=%v", rows, cols, beta)
			if err := kernels.BiasRows(launcher{m, 0}, backend.BF16, c, emu.NewU16(bias), beta, rows, cols); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			b, cw := wide(bias), wide(c0)
			want := make([]float32, rows*cols)
			for i := range want {
				want[i] = b[i%cols]
				if beta != 0 {
					want[i] += beta * cw[i]
				}
			}
			if err := emu.AllClose(wide(c.U16()), want, 1.0/128, 1e-6); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

package tensor

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend"
)

// roundBF16 returns v rounded to bfloat16 and widened back.
func roundBF16(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = backend.BF16ToF32(backend.F32ToBF16(x))
	}
	return out
}

// roundF16 returns v rounded to IEEE half precision and widened back.
func roundF16(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = backend.F16ToF32(backend.F32ToF16(x))
	}
	return out
}

func normErr(got, want []float32) float64 {
	var d, n float64
	for i := range want {
		d += math.Pow(float64(got[i]-want[i]), 2)
		n += math.Pow(float64(want[i]), 2)
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return math.Sqrt(d / n)
}

// TestAutocastBF16 checks Linear and LinearT under Autocast(BF16) and
// Autocast(F16) (emulated on the CPU through F32 products): the
// output and every gradient equal the F32 computation on bf16-rounded
// operands (products of bf16 and f16 values are exact in F32; only the order of
// the F32 sums differs), gradients reach the F32 leaves, and outputs and
// gradients are F32.
func TestAutocastBF16(t *testing.T) {
	r := NewRNG(3)
	xv := Randn(CPU, r, 1, 5, 3, 24).Float32s()
	wv := Randn(CPU, r, 1, 24, 40).Float32s()
	bv := Randn(CPU, r, 1, 40).Float32s()
	gv := Randn(CPU, r, 1, 5, 3, 40).Float32s()
	wt := Randn(CPU, r, 1, 40, 24).Float32s() // LinearT's [out, in] weight

	type result struct{ out, gx, gw, gb []float32 }
	run := func(dt DType, x, w, b, g []float32, transposed bool) (res result) {
		Step(func() {
			xt := FromFloat32s(CPU, x, 5, 3, 24).SetRequiresGrad(true)
			var wtn, bt *Tensor
			var out *Tensor
			Autocast(dt, func() {
				if transposed {
					wtn = FromFloat32s(CPU, w, 40, 24).SetRequiresGrad(true)
					out = LinearT(xt, wtn)
				} else {
					wtn = FromFloat32s(CPU, w, 24, 40).SetRequiresGrad(true)
					bt = FromFloat32s(CPU, b, 40).SetRequiresGrad(true)
					out = Linear(xt, wtn, bt)
				}
			})
			if out.DType() != F32 {
				t.Errorf("autocast output is %v, want f32", out.DType())
			}
			out.BackwardWith(FromFloat32s(CPU, g, 5, 3, 40))
			res = result{out: out.Float32s(), gx: xt.Grad.Float32s(), gw: wtn.Grad.Float32s()}
			if bt != nil {
				res.gb = bt.Grad.Float32s()
			}
			if xt.Grad.DType() != F32 || wtn.Grad.DType() != F32 {
				t.Errorf("gradients are %v and %v, want f32", xt.Grad.DType(), wtn.Grad.DType())
			}
		})
		return res
	}
	for _, tc := range []struct {
		dt    DType
		round func([]float32) []float32
	}{{BF16, roundBF16}, {F16, roundF16}} {
		for _, transposed := range []bool{false, true} {
			w := wv
			if transposed {
				w = wt
			}
			got := run(tc.dt, xv, w, bv, gv, transposed)
			want := run(F32, tc.round(xv), tc.round(w), bv, tc.round(gv), transposed)
			plain := run(F32, xv, w, bv, gv, transposed)
			for _, c := range []struct {
				name            string
				got, want, full []float32
			}{{"out", got.out, want.out, plain.out}, {"grad x", got.gx, want.gx, plain.gx}, {"grad w", got.gw, want.gw, plain.gw}} {
				if e := normErr(c.got, c.want); e > 1e-5 {
					t.Errorf("%v transposed=%v %s: %.3g from F32 on rounded operands", tc.dt, transposed, c.name, e)
				}
				if e := normErr(c.got, c.full); e > 1e-2 || e == 0 {
					t.Errorf("%v transposed=%v %s: %.3g from full F32 (want a rounding-sized difference)", tc.dt, transposed, c.name, e)
				}
			}
			if !transposed {
				// The bias gradient is a sum of g in F32: it does not see the rounding.
				if e := normErr(got.gb, plain.gb); e > 1e-6 {
					t.Errorf("bias gradient %.3g from F32", e)
				}
			}
		}
	}
	if err := Catch(func() { Autocast(I32, func() {}) }); err == nil {
		t.Error("autocast to i32 products was accepted")
	}
}

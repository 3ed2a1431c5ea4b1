package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/rng"
)

// The Llama-style kernels against the float64 references: forward values
// on random inputs, and each gradient against central finite differences
// of the reference, with guards around every operand and 3 threads (rows
// that cross lnChunk boundaries, so the weights' partial sums add up in
// several chunks).

func TestRMSNorm(t *testing.T) {
	c := newCPU(3)
	r := rng.New(21)
	rows, cols := 150, 24
	const eps = 1e-6
	xv, wv := randF32(r, rows*cols, 1), randF32(r, cols, 1)
	x, w := put(c, xv, 1), put(c, wv, 2)
	out, rstd := put(c, randF32(r, rows*cols, 1), 3), put(c, randF32(r, rows, 1), 1)
	c.RMSNorm(out, rstd, x, w, rows, cols, eps)
	checkClose(t, "rmsnorm", get(c, out, rows*cols), ref.RMSNorm(widen(xv), widen(wv), rows, cols, eps), 1e-5, 1e-5)
	checkGuards(t, "rmsnorm", out, rows*cols)
	checkGuards(t, "rmsnorm rstd", rstd, rows)

	// The backward pass: dx overwritten (plus dres), dw accumulated.
	R, res := randF32(r, rows*cols, 1), randF32(r, rows*cols, 1)
	dw0 := randF32(r, cols, 1)
	dout, dres := put(c, R, 0), put(c, res, 2)
	dx, dw := put(c, randF32(r, rows*cols, 5), 1), put(c, dw0, 0)
	c.RMSNormBackward(dx, dres, dw, dout, x, rstd, w, rows, cols, backend.DropoutOut{})
	x64, w64, R64 := widen(xv), widen(wv), widen(R)
	obj := func() float64 { return dot(R64, ref.RMSNorm(x64, w64, rows, cols, eps)) }
	numX, numW := fdGrad(x64, obj), fdGrad(w64, obj)
	for i := range numX {
		numX[i] += float64(res[i])
	}
	for i := range numW {
		numW[i] += float64(dw0[i])
	}
	checkGrad(t, "rmsnorm dx", get(c, dx, rows*cols), numX, 1e-5)
	checkGrad(t, "rmsnorm dw", get(c, dw, cols), numW, 1e-5)
	checkGuards(t, "rmsnorm dx", dx, rows*cols)
	checkGuards(t, "rmsnorm dw", dw, cols)
}

func TestAddRMSNormMatchesTwoOps(t *testing.T) {
	c := newCPU(2)
	r := rng.New(22)
	rows, cols := 9, 16
	xv, yv, wv := randF32(r, rows*cols, 1), randF32(r, rows*cols, 1), randF32(r, cols, 1)
	x, y, w := put(c, xv, 0), put(c, yv, 0), put(c, wv, 0)
	m := backend.DropoutMask{Seed: 7, Threshold: 1 << 30, Scale: 1 / 0.75}
	sum, out, rstd := put(c, make([]float32, rows*cols), 0), put(c, make([]float32, rows*cols), 0), put(c, make([]float32, rows), 0)
	c.AddRMSNorm(sum, out, rstd, x, y, w, rows, cols, 1e-5, m)
	sum2, out2, rstd2 := put(c, make([]float32, rows*cols), 0), put(c, make([]float32, rows*cols), 0), put(c, make([]float32, rows), 0)
	c.DropoutAdd(sum2, x, y, rows*cols, m)
	c.RMSNorm(out2, rstd2, sum2, w, rows, cols, 1e-5)
	for _, p := range [][2]backend.Ref{{sum, sum2}, {out, out2}} {
		a, b := get(c, p[0], rows*cols), get(c, p[1], rows*cols)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("AddRMSNorm[%d] = %v, the two ops %v", i, a[i], b[i])
			}
		}
	}
}

func TestSwiGLU(t *testing.T) {
	c := newCPU(3)
	r := rng.New(23)
	rows, hid := 31, 12
	gv := randF32(r, 2*rows*hid, 2)
	gu, out := put(c, gv, 1), put(c, randF32(r, rows*hid, 1), 2)
	c.SwiGLU(out, gu, rows, hid)
	g64 := widen(gv)
	checkClose(t, "swiglu", get(c, out, rows*hid), ref.SwiGLU(g64, rows, hid), 1e-5, 1e-5)
	checkGuards(t, "swiglu", out, rows*hid)
	R := randF32(r, rows*hid, 1)
	dout, dgu := put(c, R, 0), put(c, randF32(r, 2*rows*hid, 3), 1)
	c.SwiGLUBackward(dgu, gu, dout, rows, hid)
	R64 := widen(R)
	num := fdGrad(g64, func() float64 { return dot(R64, ref.SwiGLU(g64, rows, hid)) })
	checkGrad(t, "swiglu dgu", get(c, dgu, 2*rows*hid), num, 1e-5)
	checkGuards(t, "swiglu dgu", dgu, 2*rows*hid)
}

// TestReLU2 holds ReLU² and its backward pass, over several ranges of
// elements (3 threads), to the float64 reference and the gradient to
// central finite differences of it, on random values of both signs kept
// at least 1e-3 from 0; and the BF16 kernels to the F32 ones on the
// rounded inputs, their results rounded once, bit for bit.
func TestReLU2(t *testing.T) {
	c := newCPU(3)
	r := rng.New(25)
	n := 2*elemGrain + 37
	xv, R := randF32(r, n, 2), randF32(r, n, 1)
	for i, v := range xv {
		if math.Abs(float64(v)) < 1e-3 {
			xv[i] = float32(math.Copysign(1e-3, float64(v)))
		}
	}
	x, out := put(c, xv, 1), put(c, randF32(r, n, 1), 2)
	c.ReLU2(out, x, n)
	x64, R64 := widen(xv), widen(R)
	checkClose(t, "relu2", get(c, out, n), ref.ReLU2(x64), 0, 1e-6)
	checkGuards(t, "relu2", out, n)
	dout, dx := put(c, R, 0), put(c, randF32(r, n, 3), 1)
	c.ReLU2Backward(dx, x, dout, n)
	checkClose(t, "relu2 dx", get(c, dx, n), ref.ReLU2Backward(x64, R64), 0, 1e-6)
	checkGuards(t, "relu2 dx", dx, n)
	// Elementwise, so each element's finite difference is its own.
	const h = 1e-6
	num := make([]float64, n)
	for i, v := range x64 {
		num[i] = R64[i] * (ref.ReLU2([]float64{v + h})[0] - ref.ReLU2([]float64{v - h})[0]) / (2 * h)
	}
	checkGrad(t, "relu2 dx", get(c, dx, n), num, 1e-5)

	// BF16 storage.
	bf := func(v []float32) (backend.Ref, []float32) {
		bits, wide := make([]uint16, len(v)), make([]float32, len(v))
		for i, f := range v {
			bits[i] = backend.F32ToBF16(f)
			wide[i] = backend.BF16ToF32(bits[i])
		}
		s := c.Alloc(backend.BF16, len(v))
		c.Upload(backend.Ref{S: s}, backend.AsBytes(bits))
		return backend.Ref{S: s}, wide
	}
	bits := func(r backend.Ref) []uint16 {
		b := make([]uint16, n)
		c.Download(backend.AsBytes(b), r)
		return b
	}
	xb, xw := bf(xv)
	db, dw := bf(R)
	ob, dxb := backend.Ref{S: c.Alloc(backend.BF16, n)}, backend.Ref{S: c.Alloc(backend.BF16, n)}
	c.ReLU2(ob, xb, n)
	c.ReLU2Backward(dxb, xb, db, n)
	of, dxf := put(c, make([]float32, n), 0), put(c, make([]float32, n), 0)
	c.ReLU2(of, put(c, xw, 0), n)
	c.ReLU2Backward(dxf, put(c, xw, 0), put(c, dw, 0), n)
	for _, k := range []struct {
		name string
		got  []uint16
		f32  []float32
		want []float64
	}{
		{"relu2 bf16", bits(ob), get(c, of, n), ref.ReLU2(widen(xw))},
		{"relu2 bf16 dx", bits(dxb), get(c, dxf, n), ref.ReLU2Backward(widen(xw), widen(dw))},
	} {
		wide := make([]float32, n)
		for i, b := range k.got {
			if want := backend.F32ToBF16(k.f32[i]); b != want {
				t.Fatalf("%s[%d] = %#04x, the F32 kernel's value rounded %#04x", k.name, i, b, want)
			}
			wide[i] = backend.BF16ToF32(b)
		}
		checkClose(t, k.name+" (float64 reference)", wide, k.want, 0, 1.0/256)
	}
}

// rotaryTable is the cos/sin table Rotary reads, from ref.RotaryAngles.
func rotaryTable(maxPos, hd int, theta float64) (tab []float32, cos, sin []float64) {
	cos, sin = ref.RotaryAngles(maxPos, hd, theta, nil)
	for _, v := range append(append([]float64(nil), cos...), sin...) {
		tab = append(tab, float32(v))
	}
	// The reference reads the table's float32 values.
	for i := range cos {
		cos[i], sin[i] = float64(float32(cos[i])), float64(float32(sin[i]))
	}
	return tab, cos, sin
}

func TestRotary(t *testing.T) {
	c := newCPU(3)
	ps := []backend.Rotary{
		{B: 2, T: 70, H: 4, KVH: 2, HD: 8, MaxPos: 80, Eps: 1e-6},        // rows across lnChunk chunks
		{B: 1, T: 5, H: 2, KVH: 1, HD: 6, Pos: 9, MaxPos: 16, Eps: 1e-5}, // an inference call past position 0
		{B: 1, T: 4, H: 2, KVH: 1, HD: 16, Pos: 3, MaxPos: 8, Eps: 1e-6}, // eight pairs a head: the SIMD rows
	}
	if testing.Short() { // the finite differences cost the square of the size
		ps[0].T = 33
	}
	for _, qkNorm := range []bool{false, true} {
		for _, p := range ps {
			t.Run(fmt.Sprintf("qknorm=%v,H=%d,HD=%d", qkNorm, p.H, p.HD), func(t *testing.T) {
				testRotary(t, c, p, qkNorm)
			})
		}
	}
}

func testRotary(t *testing.T, c *CPU, p backend.Rotary, qkNorm bool) {
	r := rng.New(24)
	rows, n := p.B*p.T, p.B*p.T*p.Width()
	tabv, cos, sin := rotaryTable(p.MaxPos, p.HD, 10000)
	xv := randF32(r, n, 1)
	x, tab, out := put(c, xv, 1), put(c, tabv, 2), put(c, randF32(r, n, 1), 3)
	var qw, kw, rstd backend.Ref
	var qw64, kw64 []float64
	var qwv, kwv []float32
	if qkNorm {
		qwv, kwv = randF32(r, p.HD, 1), randF32(r, p.HD, 1)
		qw, kw, rstd = put(c, qwv, 0), put(c, kwv, 1), put(c, make([]float32, rows*(p.H+p.KVH)), 2)
		qw64, kw64 = widen(qwv), widen(kwv)
	}
	c.Rotary(p, out, rstd, x, qw, kw, tab)
	x64 := widen(xv)
	fwd := func() []float64 {
		return ref.Rotary(x64, p.B, p.T, p.H, p.KVH, p.HD, p.Pos, cos, sin, qw64, kw64, float64(p.Eps))
	}
	checkClose(t, "rotary", get(c, out, n), fwd(), 1e-5, 1e-5)
	checkGuards(t, "rotary", out, n)

	R := randF32(r, n, 1)
	dout, dx := put(c, R, 0), put(c, randF32(r, n, 4), 1)
	var dqw, dkw backend.Ref
	var dq0, dk0 []float32
	if qkNorm {
		dq0, dk0 = randF32(r, p.HD, 1), randF32(r, p.HD, 1)
		dqw, dkw = put(c, dq0, 0), put(c, dk0, 0)
	}
	c.RotaryBackward(p, dx, dqw, dkw, dout, x, rstd, qw, kw, tab)
	R64 := widen(R)
	obj := func() float64 { return dot(R64, fwd()) }
	checkGrad(t, "rotary dqkv", get(c, dx, n), fdGrad(x64, obj), 1e-5)
	checkGuards(t, "rotary dqkv", dx, n)
	if qkNorm {
		nq, nk := fdGrad(qw64, obj), fdGrad(kw64, obj)
		for i := range nq {
			nq[i] += float64(dq0[i])
			nk[i] += float64(dk0[i])
		}
		checkGrad(t, "rotary dqw", get(c, dqw, p.HD), nq, 1e-5)
		checkGrad(t, "rotary dkw", get(c, dkw, p.HD), nk, 1e-5)
	}
}

func TestGroupedAttention(t *testing.T) {
	c := newCPU(3)
	r := rng.New(25)
	ps := []backend.Attention{{B: 2, T: 17, C: 32, H: 4, KVH: 2}, {B: 1, T: 70, C: 24, H: 3, KVH: 1}} // the second crosses a query block
	if testing.Short() {
		ps = ps[:1]
	}
	for _, p := range ps {
		n := p.B * p.T * p.Width()
		xv := randF32(r, n, 1)
		x, out, saved := put(c, xv, 1), put(c, make([]float32, p.B*p.T*p.C), 2), put(c, make([]float32, p.SavedLen()), 3)
		c.Attention(p, out, saved, x)
		x64 := widen(xv)
		fwd := func() []float64 { return ref.GroupedAttention(x64, p.B, p.T, p.C, p.H, p.KVH) }
		checkClose(t, "grouped attention", get(c, out, p.B*p.T*p.C), fwd(), 1e-5, 1e-5)
		checkGuards(t, "grouped attention", out, p.B*p.T*p.C)

		R := randF32(r, p.B*p.T*p.C, 1)
		dout, dx := put(c, R, 0), put(c, randF32(r, n, 5), 1)
		c.AttentionBackward(p, dx, dout, out, saved, x)
		R64 := widen(R)
		checkGrad(t, "grouped attention dqkv", get(c, dx, n), fdGrad(x64, func() float64 { return dot(R64, fwd()) }), 1e-5)
		checkGuards(t, "grouped attention dqkv", dx, n)
	}
}

// TestGroupedAttentionKV holds inference with a cache of KVH heads to the
// training kernel: the last position's output, computed one position at a
// time against the cache, is the training attention's.
func TestGroupedAttentionKV(t *testing.T) {
	c := newCPU(2)
	r := rng.New(26)
	p := backend.Attention{B: 2, T: 9, C: 24, H: 6, KVH: 2}
	W, hd := p.Width(), p.C/p.H
	xv := randF32(r, p.B*p.T*W, 1)
	want := ref.GroupedAttention(widen(xv), p.B, p.T, p.C, p.H, p.KVH)
	kc, vc := put(c, make([]float32, p.B*p.T*p.KVH*hd), 0), put(c, make([]float32, p.B*p.T*p.KVH*hd), 0)
	for pos := 0; pos < p.T; pos++ {
		step := make([]float32, 0, p.B*W)
		for b := 0; b < p.B; b++ {
			step = append(step, xv[(b*p.T+pos)*W:(b*p.T+pos+1)*W]...)
		}
		out := put(c, make([]float32, p.B*p.C), 0)
		c.AttentionKV(backend.AttentionKV{B: p.B, T: 1, C: p.C, H: p.H, KVH: p.KVH, Pos: pos, MaxT: p.T}, out, put(c, step, 0), kc, vc)
		got := get(c, out, p.B*p.C)
		for b := 0; b < p.B; b++ {
			checkClose(t, fmt.Sprintf("position %d", pos), got[b*p.C:(b+1)*p.C], want[(b*p.T+pos)*p.C:(b*p.T+pos+1)*p.C], 1e-5, 1e-5)
		}
	}
}

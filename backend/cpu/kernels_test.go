package cpu

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/rng"
)

// newCPU returns a separate CPU backend with a fixed thread count, so tests
// do not depend on GOMAXPROCS or $FLEET_THREADS.
func newCPU(threads int) *CPU {
	c := New(backend.CPU)
	c.SetThreads(threads)
	return c
}

func randF32(r *rng.RNG, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.Norm() * std)
	}
	return v
}

func widen(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// guard is the value kernels must leave alone outside their operands.
const guard = float32(-12345.5)

// put allocates off+len(v)+pad elements, fills them with guard and uploads v
// at offset off, so kernels that ignore Ref.Off or overrun are caught.
func put(c *CPU, v []float32, off int) backend.Ref {
	s := c.Alloc(backend.F32, off+len(v)+3)
	c.Fill(backend.Ref{S: s}, guard, s.Len())
	r := backend.Ref{S: s, Off: off}
	c.Upload(r, backend.AsBytes(v))
	return r
}

func putI32(c *CPU, v []int32, off int) backend.Ref {
	s := c.Alloc(backend.I32, off+len(v)+3)
	r := backend.Ref{S: s, Off: off}
	c.Upload(r, backend.AsBytes(v))
	return r
}

// get downloads n elements at r.
func get(c *CPU, r backend.Ref, n int) []float32 {
	out := make([]float32, n)
	c.Download(backend.AsBytes(out), r)
	return out
}

// checkGuards fails unless everything in r's storage outside [Off, Off+n) is guard.
func checkGuards(t *testing.T, name string, r backend.Ref, n int) {
	t.Helper()
	all := r.S.(*Buffer).F32
	for i, v := range all {
		if (i < r.Off || i >= r.Off+n) && v != guard {
			t.Fatalf("%s: element %d outside the operand [%d, %d) changed to %v", name, i, r.Off, r.Off+n, v)
		}
	}
}

// checkClose requires |got-want| <= atol + rtol*|want| elementwise.
func checkClose(t *testing.T, name string, got []float32, want []float64, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		g := float64(got[i])
		if g == want[i] {
			continue // also equal infinities
		}
		if d := math.Abs(g - want[i]); !(d <= atol+rtol*math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %v, want %v (diff %.3g)", name, i, got[i], want[i], d)
		}
	}
}

// fdGrad is the central finite-difference gradient of f with respect to x.
func fdGrad(x []float64, f func() float64) []float64 {
	const h = 1e-6
	g := make([]float64, len(x))
	for i := range x {
		orig := x[i]
		x[i] = orig + h
		fp := f()
		x[i] = orig - h
		fm := f()
		x[i] = orig
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// checkGrad compares an analytic float32 gradient with a finite-difference
// one, relative to the gradient's overall scale.
func checkGrad(t *testing.T, name string, got []float32, num []float64, tol float64) {
	t.Helper()
	var scale float64
	for _, v := range num {
		scale = max(scale, math.Abs(v))
	}
	if scale == 0 {
		t.Fatalf("%s: finite-difference gradient is all zero", name)
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - num[i]); !(d <= tol*(scale+math.Abs(num[i]))) {
			t.Fatalf("%s[%d] = %v, finite difference %v (scale %v)", name, i, got[i], num[i], scale)
		}
	}
}

func absAll(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Abs(x)
	}
	return out
}

type mmCase struct {
	batch, m, n, k int
	ta, tb         bool
	// padA, padB, padC are extra elements between batch items; broadcastB
	// uses a B stride of 0.
	padA, padB, padC int
	broadcastB       bool
	alpha, beta      float32
	bias             bool
}

func (mc mmCase) String() string {
	return fmt.Sprintf("b%d_m%d_n%d_k%d_ta%v_tb%v_pad%d.%d.%d_bcast%v_a%v_b%v_bias%v",
		mc.batch, mc.m, mc.n, mc.k, mc.ta, mc.tb, mc.padA, mc.padB, mc.padC, mc.broadcastB, mc.alpha, mc.beta, mc.bias)
}

func runMatMul(t *testing.T, c *CPU, r *rng.RNG, mc mmCase) {
	t.Helper()
	p := backend.MatMul{Batch: mc.batch, M: mc.m, N: mc.n, K: mc.k, TransA: mc.ta, TransB: mc.tb,
		StrideA: mc.m*mc.k + mc.padA, StrideB: mc.k*mc.n + mc.padB, StrideC: mc.m*mc.n + mc.padC,
		Alpha: mc.alpha, Beta: mc.beta}
	if mc.broadcastB {
		p.StrideB = 0
	}
	span := func(stride, size int) int { return stride*(mc.batch-1) + size }
	la, lb, lc := span(p.StrideA, mc.m*mc.k), span(p.StrideB, mc.k*mc.n), span(p.StrideC, mc.m*mc.n)
	av, bv, cv := randF32(r, la, 1), randF32(r, lb, 1), randF32(r, lc, 1)
	if mc.padC > 0 { // the gaps between C matrices must not be written
		for bi := 0; bi < mc.batch-1; bi++ {
			for j := 0; j < mc.padC; j++ {
				cv[bi*p.StrideC+mc.m*mc.n+j] = guard
			}
		}
	}
	a, b, cc := put(c, av, 5), put(c, bv, 2), put(c, cv, 7)
	var bias backend.Ref
	var biasv []float32
	if mc.bias {
		biasv = randF32(r, mc.n, 1)
		bias = put(c, biasv, 1)
	}
	c.MatMul(p, a, b, cc, bias)
	got := get(c, cc, lc)
	checkGuards(t, "C", cc, lc)

	a64, b64, c64, bias64 := widen(av), widen(bv), widen(cv), widen(biasv)
	cabs := absAll(c64)
	var biasAbs []float64
	if mc.bias {
		biasAbs = absAll(bias64)
	} else {
		bias64 = nil
	}
	aAbs, bAbs := absAll(a64), absAll(b64)
	for bi := 0; bi < mc.batch; bi++ {
		oa, ob, oc := bi*p.StrideA, bi*p.StrideB, bi*p.StrideC
		ref.MatMul(a64[oa:], b64[ob:], c64[oc:], bias64, mc.m, mc.n, mc.k, mc.ta, mc.tb, float64(mc.alpha), float64(mc.beta))
		// The same product on absolute values bounds the rounding error.
		ref.MatMul(aAbs[oa:], bAbs[ob:], cabs[oc:], biasAbs, mc.m, mc.n, mc.k, mc.ta, mc.tb,
			math.Abs(float64(mc.alpha)), math.Abs(float64(mc.beta)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - c64[i]); !(d <= 1e-5*cabs[i]+1e-30) {
			t.Fatalf("%v: C[%d] = %v, want %v (diff %.3g, bound %.3g)", mc, i, got[i], c64[i], d, cabs[i])
		}
	}
}

func TestMatMul(t *testing.T) {
	// The default micro-kernel (SIMD where the CPU has it) and the portable one.
	// Every micro-kernel this CPU can run, SIMD and portable.
	defer func(k microKernel) { gemm = k }(gemm)
	for _, k := range gemmKernels() {
		t.Run(k.name, func(t *testing.T) {
			gemm = k
			testMatMul(t)
		})
	}
}

func testMatMul(t *testing.T) {
	c := newCPU(3)
	r := rng.New(1)
	var cases []mmCase
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			// Crossing every tile size, with a ragged last tile.
			cases = append(cases,
				mmCase{batch: 1, m: 67, n: 515, k: 260, ta: ta, tb: tb, alpha: 1, beta: 0},
				mmCase{batch: 1, m: gemmMC + gemm.mr - 1, n: gemmNC + gemm.nr + 1, k: gemmKC + 1, ta: ta, tb: tb, alpha: 1, beta: 0},
				mmCase{batch: 1, m: 1, n: 1, k: 1, ta: ta, tb: tb, alpha: 1, beta: 0},
				mmCase{batch: 1, m: 1, n: 1, k: 1, ta: ta, tb: tb, alpha: -2, beta: -0.3, bias: true},
				mmCase{batch: 3, m: 13, n: 17, k: 9, ta: ta, tb: tb, padA: 5, padB: 3, padC: 4, alpha: 0.5, beta: 0.25, bias: true},
				mmCase{batch: 4, m: 7, n: 11, k: 300, ta: ta, tb: tb, broadcastB: true, padC: 2, alpha: 1, beta: 1},
				mmCase{batch: 2, m: 65, n: 33, k: 1, ta: ta, tb: tb, padA: 1, alpha: 1.5, beta: 0, bias: true},
				mmCase{batch: 1, m: 3, n: 600, k: 5, ta: ta, tb: tb, alpha: 1, beta: 1, bias: true},
			)
		}
	}
	if !testing.Short() {
		cases = append(cases,
			mmCase{batch: 1, m: 64, n: 512, k: 256, alpha: 1, beta: 0.5, bias: true},
			mmCase{batch: 1, m: 2 * gemmMC, n: 2 * gemmNC, k: 2 * gemmKC, alpha: 1, beta: -0.5, bias: true}, // whole tiles and blocks only
			mmCase{batch: 2, m: 65, n: 513, k: 257, ta: true, tb: true, alpha: -0.75, beta: 1, padC: 1},
			mmCase{batch: 1, m: 130, n: 40, k: 513, tb: true, alpha: 1, beta: 0},
		)
	}
	for _, mc := range cases {
		runMatMul(t, c, r, mc)
	}
}

// TestMatMulBetaZeroIgnoresC checks that beta = 0 overwrites C even when it
// holds NaN or infinity (0 * NaN must not leak into the result).
func TestMatMulBetaZeroIgnoresC(t *testing.T) {
	c := newCPU(2)
	r := rng.New(2)
	// Small (edge blocks only), and whole blocks over several K panels:
	// with beta = 0 the first panel overwrites C instead of adding to it.
	for _, sz := range [][3]int{{5, 6, 7}, {16, 64, 2*gemmKC + 3}, {19, 70, gemmKC + 1}} {
		m, n, k := sz[0], sz[1], sz[2]
		av, bv := randF32(r, m*k, 1), randF32(r, k*n, 1)
		cv := make([]float32, m*n)
		for i := range cv {
			cv[i] = float32(math.NaN())
			if i%2 == 0 {
				cv[i] = float32(math.Inf(1))
			}
		}
		a, b, cc := put(c, av, 0), put(c, bv, 0), put(c, cv, 0)
		c.MatMul(backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1, StrideA: m * k, StrideB: k * n, StrideC: m * n}, a, b, cc, backend.Ref{})
		want := make([]float64, m*n)
		ref.MatMul(widen(av), widen(bv), want, nil, m, n, k, false, false, 1, 0)
		// Sums of k unit-variance products: the rounding error grows with k.
		checkClose(t, "C", get(c, cc, m*n), want, 2e-6*float64(k), 1e-5)
	}
}

func TestSoftmax(t *testing.T) {
	c := newCPU(2)
	r := rng.New(3)
	rows, cols := 37, 129
	xv := randF32(r, rows*cols, 3)
	for j := 0; j < cols; j++ { // a row of large logits: needs the max shift
		xv[5*cols+j] += 90
	}
	x, y := put(c, xv, 3), put(c, make([]float32, rows*cols), 1)
	c.Softmax(y, x, rows, cols)
	checkClose(t, "softmax", get(c, y, rows*cols), ref.Softmax(widen(xv), rows, cols), 1e-8, 1e-5)
	checkGuards(t, "softmax", y, rows*cols)
}

func TestSoftmaxBackward(t *testing.T) {
	c := newCPU(2)
	r := rng.New(4)
	rows, cols := 9, 23
	xv := randF32(r, rows*cols, 2)
	R := randF32(r, rows*cols, 1)
	x, y, dy, dx := put(c, xv, 0), put(c, make([]float32, rows*cols), 2), put(c, R, 1), put(c, make([]float32, rows*cols), 4)
	c.Softmax(y, x, rows, cols)
	c.SoftmaxBackward(dx, y, dy, rows, cols)
	x64, R64 := widen(xv), widen(R)
	num := fdGrad(x64, func() float64 { return dot(R64, ref.Softmax(x64, rows, cols)) })
	checkGrad(t, "softmax dx", get(c, dx, rows*cols), num, 1e-5)
	checkGuards(t, "softmax dx", dx, rows*cols)
}

func TestLayerNorm(t *testing.T) {
	c := newCPU(2)
	r := rng.New(5)
	rows, cols := 41, 67
	const eps = 1e-5
	xv := randF32(r, rows*cols, 2)
	for i := range xv { // a large common offset: a one-pass variance would lose precision
		xv[i] += 3
	}
	wv, bv := randF32(r, cols, 1), randF32(r, cols, 1)
	x, w, b := put(c, xv, 1), put(c, wv, 2), put(c, bv, 3)
	for _, withBias := range []bool{true, false} {
		out, mean, rstd := put(c, make([]float32, rows*cols), 4), put(c, make([]float32, rows), 5), put(c, make([]float32, rows), 6)
		br, b64 := b, widen(bv)
		if !withBias {
			br, b64 = backend.Ref{}, nil
		}
		c.LayerNorm(out, mean, rstd, x, w, br, rows, cols, eps)
		name := fmt.Sprintf("layernorm(bias=%v)", withBias)
		checkClose(t, name, get(c, out, rows*cols), ref.LayerNorm(widen(xv), widen(wv), b64, rows, cols, eps), 1e-5, 1e-5)
		checkGuards(t, name, out, rows*cols)
		wantMean, wantRstd := make([]float64, rows), make([]float64, rows)
		x64 := widen(xv)
		for i := 0; i < rows; i++ {
			row := x64[i*cols : (i+1)*cols]
			var m, v float64
			for _, e := range row {
				m += e
			}
			m /= float64(cols)
			for _, e := range row {
				v += (e - m) * (e - m)
			}
			wantMean[i] = m
			wantRstd[i] = 1 / math.Sqrt(v/float64(cols)+eps)
		}
		checkClose(t, name+" mean", get(c, mean, rows), wantMean, 1e-6, 1e-6)
		checkClose(t, name+" rstd", get(c, rstd, rows), wantRstd, 0, 1e-5)
		checkGuards(t, name+" mean", mean, rows)
		checkGuards(t, name+" rstd", rstd, rows)
	}
}

// layerNormGradCheck checks LayerNormBackward against finite differences of
// ref.LayerNorm, and that dw and db accumulate into what they held.
func layerNormGradCheck(t *testing.T, rows, cols int, withBias bool) {
	c := newCPU(3)
	r := rng.New(rng.Mix(6, uint64(rows), uint64(cols)))
	const eps = 1e-5
	xv, wv, bv, R := randF32(r, rows*cols, 1), randF32(r, cols, 1), randF32(r, cols, 1), randF32(r, rows*cols, 1)
	dw0, db0 := randF32(r, cols, 1), randF32(r, cols, 1)
	x, w, b := put(c, xv, 0), put(c, wv, 1), put(c, bv, 2)
	out, mean, rstd := put(c, make([]float32, rows*cols), 0), put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0)
	dout, dx, dw, db := put(c, R, 3), put(c, make([]float32, rows*cols), 1), put(c, dw0, 2), put(c, db0, 5)
	br, dbr := b, db
	if !withBias {
		br, dbr = backend.Ref{}, backend.Ref{}
	}
	c.LayerNorm(out, mean, rstd, x, w, br, rows, cols, eps)
	c.LayerNormBackward(dx, backend.Ref{}, dw, dbr, dout, x, mean, rstd, w, rows, cols, backend.DropoutOut{})
	// With dres, dx also gets dres added: bitwise the sum of the two.
	resv := randF32(r, rows*cols, 1)
	dxr := put(c, make([]float32, rows*cols), 2)
	// And with a dropout output, that dx masked: bitwise dx times the factor.
	ddrop := put(c, make([]float32, rows*cols), 3)
	mask := backend.NewDropoutMask(r.Uint64(), 2, 13, 0.3)
	c.LayerNormBackward(dxr, put(c, resv, 4), put(c, make([]float32, cols), 0), backend.Ref{}, dout, x, mean, rstd, w, rows, cols, backend.DropoutOut{Dst: ddrop, Mask: mask})
	plain, withRes, dropped := get(c, dx, rows*cols), get(c, dxr, rows*cols), get(c, ddrop, rows*cols)
	kept := 0
	for i := range plain {
		if want := plain[i] + resv[i]; math.Float32bits(withRes[i]) != math.Float32bits(want) {
			t.Fatalf("layernorm %dx%d: dx[%d] with dres = %v, want %v + %v", rows, cols, i, withRes[i], plain[i], resv[i])
		}
		if want := withRes[i] * mask.Factor(int64(i)); math.Float32bits(dropped[i]) != math.Float32bits(want) {
			t.Fatalf("layernorm %dx%d: masked dx[%d] = %v, want %v", rows, cols, i, dropped[i], want)
		}
		if mask.Keep(int64(i)) {
			kept++
		}
	}
	if n := rows * cols; n >= 64 && (kept == 0 || kept == n) {
		t.Fatalf("layernorm %dx%d: the mask keeps %d of %d", rows, cols, kept, n)
	}
	checkGuards(t, "layernorm dx with dres", dxr, rows*cols)
	checkGuards(t, "layernorm masked dx", ddrop, rows*cols)

	x64, w64, b64, R64 := widen(xv), widen(wv), widen(bv), widen(R)
	if !withBias {
		b64 = nil
	}
	obj := func() float64 { return dot(R64, ref.LayerNorm(x64, w64, b64, rows, cols, eps)) }
	name := fmt.Sprintf("layernorm %dx%d bias=%v", rows, cols, withBias)
	checkGrad(t, name+" dx", get(c, dx, rows*cols), fdGrad(x64, obj), 1e-5)
	checkGuards(t, name+" dx", dx, rows*cols)
	// dw and db accumulate: subtract what was there before.
	sub := func(got, before []float32) []float32 {
		out := make([]float32, len(got))
		for i := range got {
			out[i] = got[i] - before[i]
		}
		return out
	}
	checkGrad(t, name+" dw", sub(get(c, dw, cols), dw0), fdGrad(w64, obj), 1e-5)
	checkGuards(t, name+" dw", dw, cols)
	if withBias {
		checkGrad(t, name+" db", sub(get(c, db, cols), db0), fdGrad(b64, obj), 1e-5)
	} else if got := get(c, db, cols); fmt.Sprint(got) != fmt.Sprint(db0) {
		t.Errorf("%s: db changed although it was left out", name)
	}
}

func TestLayerNormBackward(t *testing.T) {
	layerNormGradCheck(t, 2*17, 32, true)
	layerNormGradCheck(t, 2*17, 32, false)
	layerNormGradCheck(t, 150, 9, true) // more rows than one partial-sum chunk
}

func TestGELU(t *testing.T) {
	c := newCPU(2)
	r := rng.New(7)
	n := 3000
	xv := randF32(r, n, 3)
	xv[0], xv[1], xv[2], xv[3] = 0, 1e-4, -12, 12
	x, y := put(c, xv, 2), put(c, make([]float32, n), 1)
	c.GELU(y, x, n)
	checkClose(t, "gelu", get(c, y, n), ref.GELU(widen(xv)), 1e-6, 1e-5)
	checkGuards(t, "gelu", y, n)

	n = 400 // finite differences cost n² here
	x = put(c, xv[:n], 2)
	R := randF32(r, n, 1)
	dy, dx := put(c, R, 0), put(c, make([]float32, n), 3)
	c.GELUBackward(dx, x, dy, n)
	x64, R64 := widen(xv[:n]), widen(R)
	// GELU is elementwise: the gradient of sum(R*gelu(x)) is R*gelu'(x).
	num := fdGrad(x64, func() float64 { return dot(R64, ref.GELU(x64)) })
	checkGrad(t, "gelu dx", get(c, dx, n), num, 1e-5)
	checkGuards(t, "gelu dx", dx, n)
}

// refAttentionLSE computes the log-sum-exp of each causal score row, [B,H,T].
func refAttentionLSE(qkv []float64, p backend.Attention) []float64 {
	hd := p.C / p.H
	out := make([]float64, p.SavedLen())
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.H; h++ {
			for t := 0; t < p.T; t++ {
				m, scores := math.Inf(-1), make([]float64, t+1)
				for s := 0; s <= t; s++ {
					q := qkv[(b*p.T+t)*3*p.C+h*hd:][:hd]
					k := qkv[(b*p.T+s)*3*p.C+p.C+h*hd:][:hd]
					scores[s] = dot(q, k) / math.Sqrt(float64(hd))
					m = math.Max(m, scores[s])
				}
				var sum float64
				for _, v := range scores {
					sum += math.Exp(v - m)
				}
				out[(b*p.H+h)*p.T+t] = m + math.Log(sum)
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	c := newCPU(3)
	r := rng.New(8)
	// T=17 fits one query block; T=150 crosses two block boundaries.
	for _, p := range []backend.Attention{{B: 2, T: 17, C: 32, H: 4}, {B: 1, T: 150, C: 16, H: 2}} {
		n := p.B * p.T * 3 * p.C
		xv := randF32(r, n, 1)
		x, out, saved := put(c, xv, 1), put(c, make([]float32, p.B*p.T*p.C), 2), put(c, randF32(r, p.SavedLen(), 1), 3)
		c.Attention(p, out, saved, x)
		x64 := widen(xv)
		checkClose(t, "attention out", get(c, out, p.B*p.T*p.C), ref.Attention(x64, p.B, p.T, p.C, p.H), 1e-5, 1e-5)
		checkGuards(t, "attention out", out, p.B*p.T*p.C)
		checkClose(t, "attention lse", get(c, saved, p.SavedLen()), refAttentionLSE(x64, p), 1e-5, 1e-5)
		checkGuards(t, "attention lse", saved, p.SavedLen())
	}
}

func TestAttentionBackward(t *testing.T) {
	c := newCPU(3)
	r := rng.New(9)
	ps := []backend.Attention{{B: 2, T: 17, C: 32, H: 4}, {B: 1, T: 70, C: 16, H: 2}} // the second crosses a query block
	if testing.Short() {
		ps = []backend.Attention{{B: 2, T: 7, C: 16, H: 2}}
	}
	for _, p := range ps {
		testAttentionBackward(t, c, r, p)
	}
}

// TestAttentionDropout: attention with dropout on its probabilities
// (p 0.3, a mask offset into the batch) is the float64 reference's with
// the same mask, and its gradient is the reference's by finite
// differences, the mask held fixed; multi-head and grouped heads, query
// blocks crossed.
func TestAttentionDropout(t *testing.T) {
	c := newCPU(3)
	r := rng.New(13)
	ps := []backend.Attention{{B: 2, T: 9, C: 16, H: 2}, {B: 1, T: 70, C: 16, H: 4, KVH: 2}}
	if testing.Short() {
		ps = ps[:1]
	}
	for _, p := range ps {
		p.Drop = backend.NewDropoutMask(0x1234, 7, 3*int64(p.H*p.T*p.T), 0.3)
		kvh := p.KVHeads()
		n, no := p.B*p.T*p.Width(), p.B*p.T*p.C
		xv, R := randF32(r, n, 1), randF32(r, no, 1)
		x, out, saved := put(c, xv, 0), put(c, make([]float32, no), 0), put(c, make([]float32, p.SavedLen()), 0)
		dout, dx := put(c, R, 2), put(c, randF32(r, n, 5), 1)
		c.Attention(p, out, saved, x)
		c.AttentionBackward(p, dx, dout, out, saved, x)
		x64, R64 := widen(xv), widen(R)
		factor := func(i int64) float64 { return float64(p.Drop.Factor(i)) }
		want := ref.DroppedAttention(x64, p.B, p.T, p.C, p.H, kvh, factor)
		checkClose(t, "dropped attention out", get(c, out, no), want, 1e-5, 1e-5)
		if plain := ref.GroupedAttention(x64, p.B, p.T, p.C, p.H, kvh); closeEnough(get(c, out, no), plain, 1e-3) {
			t.Fatalf("%+v: the output is the undropped attention's", p)
		}
		num := fdGrad(x64, func() float64 { return dot(R64, ref.DroppedAttention(x64, p.B, p.T, p.C, p.H, kvh, factor)) })
		checkGrad(t, "dropped attention dqkv", get(c, dx, n), num, 1e-5)
	}
}

// closeEnough reports whether got is within tol of want everywhere.
func closeEnough(got []float32, want []float64, tol float64) bool {
	for i := range got {
		if math.Abs(float64(got[i])-want[i]) > tol {
			return false
		}
	}
	return true
}

func testAttentionBackward(t *testing.T, c *CPU, r *rng.RNG, p backend.Attention) {
	n, no := p.B*p.T*3*p.C, p.B*p.T*p.C
	xv, R := randF32(r, n, 1), randF32(r, no, 1)
	x, out, saved := put(c, xv, 0), put(c, make([]float32, no), 0), put(c, make([]float32, p.SavedLen()), 0)
	// dqkv starts as garbage: the backward pass must overwrite it.
	dout, dx := put(c, R, 2), put(c, randF32(r, n, 5), 1)
	c.Attention(p, out, saved, x)
	c.AttentionBackward(p, dx, dout, out, saved, x)
	x64, R64 := widen(xv), widen(R)
	num := fdGrad(x64, func() float64 { return dot(R64, ref.Attention(x64, p.B, p.T, p.C, p.H)) })
	checkGrad(t, "attention dqkv", get(c, dx, n), num, 1e-5)
	checkGuards(t, "attention dqkv", dx, n)
}

func TestCrossEntropy(t *testing.T) {
	c := newCPU(2)
	r := rng.New(10)
	n, v := 23, 37
	xv := randF32(r, n*v, 3)
	for j := 0; j < v; j++ {
		xv[4*v+j] += 200 // needs the max shift
	}
	tv := make([]int32, n)
	for i := range tv {
		tv[i] = int32(r.Intn(v))
	}
	tv[2], tv[7], tv[11] = -1, int32(v), 0 // two ignored rows
	x, tg := put(c, xv, 1), putI32(c, tv, 2)
	losses, lse := put(c, randF32(r, n, 1), 3), put(c, randF32(r, n, 1), 4)
	c.CrossEntropy(losses, lse, x, tg, n, v)
	x64 := widen(xv)
	checkClose(t, "losses", get(c, losses, n), ref.CrossEntropy(x64, tv, n, v), 1e-5, 1e-5)
	checkGuards(t, "losses", losses, n)
	wantLse := make([]float64, n)
	for i := range wantLse {
		row := x64[i*v : (i+1)*v]
		m := math.Inf(-1)
		for _, e := range row {
			m = max(m, e)
		}
		var s float64
		for _, e := range row {
			s += math.Exp(e - m)
		}
		wantLse[i] = m + math.Log(s)
	}
	checkClose(t, "lse", get(c, lse, n), wantLse, 1e-5, 1e-6)
	if l := get(c, losses, n); l[2] != 0 || l[7] != 0 {
		t.Errorf("ignored rows have losses %v and %v, want 0", l[2], l[7])
	}

	// Backward: the gradient of dloss*scale*sum(losses).
	const dloss, scale = float32(1.75), float32(1.0 / 23)
	dl := put(c, []float32{dloss}, 2)
	dx := put(c, randF32(r, n*v, 1), 3)
	c.CrossEntropyBackward(dx, x, lse, tg, dl, scale, n, v)
	got := get(c, dx, n*v)
	checkGuards(t, "dlogits", dx, n*v)
	for _, row := range []int{2, 7} {
		for j := 0; j < v; j++ {
			if got[row*v+j] != 0 {
				t.Fatalf("ignored row %d has gradient %v at %d", row, got[row*v+j], j)
			}
		}
	}
	num := fdGrad(x64, func() float64 {
		var s float64
		for _, l := range ref.CrossEntropy(x64, tv, n, v) {
			s += l
		}
		return float64(dloss) * float64(scale) * s
	})
	checkGrad(t, "dlogits", got, num, 1e-5)
}

// TestCrossEntropyFused holds the one-pass loss and gradient to
// CrossEntropy and CrossEntropyBackward bit for bit (the training step's
// numerics do not change with the fusion), F32 and BF16, the gradient
// written apart and over the logits.
func TestCrossEntropyFused(t *testing.T) {
	c := newCPU(2)
	r := rng.New(12)
	n, v := 19, 40
	xv := randF32(r, n*v, 3)
	tv := make([]int32, n)
	for i := range tv {
		tv[i] = int32(r.Intn(v))
	}
	tv[3], tv[8] = -1, int32(v)
	tg, dl := putI32(c, tv, 1), put(c, []float32{0.625}, 2)
	const scale = float32(1.0 / 19)
	for _, bf := range []bool{false, true} {
		in := func() backend.Ref {
			if bf {
				return bfIn(c, xv, 1)
			}
			return put(c, xv, 1)
		}
		out := func(b backend.Ref, n int) []float32 {
			if bf {
				return bfGet(c, b, n)
			}
			return get(c, b, n)
		}
		losses, lse, x := put(c, make([]float32, n), 0), put(c, make([]float32, n), 0), in()
		c.CrossEntropy(losses, lse, x, tg, n, v)
		c.CrossEntropyBackward(x, x, lse, tg, dl, scale, n, v)
		wantL, wantD := fmt.Sprint(out(losses, n)), fmt.Sprint(out(x, n*v))
		for _, inPlace := range []bool{false, true} {
			l2, x2, d2 := put(c, randF32(r, n, 1), 0), in(), in()
			if inPlace {
				d2 = x2
			}
			c.CrossEntropyFused(l2, d2, x2, tg, dl, scale, n, v)
			if fmt.Sprint(out(l2, n)) != wantL {
				t.Errorf("bf16 %v, in place %v: the losses differ from CrossEntropy's", bf, inPlace)
			}
			if fmt.Sprint(out(d2, n*v)) != wantD {
				t.Errorf("bf16 %v, in place %v: the gradient differs from CrossEntropyBackward's", bf, inPlace)
			}
		}
	}
}

func TestEmbedding(t *testing.T) {
	c := newCPU(2)
	r := rng.New(11)
	V, dim, n := 11, 13, 29
	table := randF32(r, V*dim, 1)
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.Intn(V))
	}
	ids[0], ids[1], ids[n-1] = 0, int32(V-1), 0
	tb, id, out := put(c, table, 3), putI32(c, ids, 1), put(c, make([]float32, n*dim), 2)
	c.Embedding(out, tb, id, n, dim)
	t64 := widen(table)
	checkClose(t, "embedding", get(c, out, n*dim), ref.Embedding(t64, ids, dim), 0, 0)
	checkGuards(t, "embedding", out, n*dim)

	R := randF32(r, n*dim, 1)
	d0 := randF32(r, V*dim, 1)
	dout, dt := put(c, R, 0), put(c, d0, 4)
	c.EmbeddingBackward(dt, dout, id, n, dim)
	got := get(c, dt, V*dim)
	for i := range got {
		got[i] -= d0[i] // it accumulates
	}
	R64 := widen(R)
	num := fdGrad(t64, func() float64 { return dot(R64, ref.Embedding(t64, ids, dim)) })
	checkGrad(t, "dtable", got, num, 1e-5)
	checkGuards(t, "dtable", dt, V*dim)
}

func TestAdamW(t *testing.T) {
	c := newCPU(2)
	r := rng.New(12)
	n := 40000 // several parallel chunks
	hp := backend.AdamW{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	wv := randF32(r, n, 1)
	w, m, v := put(c, wv, 1), put(c, make([]float32, n), 2), put(c, make([]float32, n), 3)
	w64, m64, v64 := widen(wv), make([]float64, n), make([]float64, n)
	for step := 1; step <= 3; step++ {
		gv := randF32(r, n, 0.1)
		gv[step] = 0 // a zero gradient
		g := put(c, gv, 0)
		hp.Step = step
		c.AdamW(hp, w, g, m, v, n)
		ref.AdamW(w64, widen(gv), m64, v64, float64(hp.LR), float64(hp.Beta1), float64(hp.Beta2), float64(hp.Eps), float64(hp.WeightDecay), step)
		name := fmt.Sprintf("step %d", step)
		checkClose(t, name+" param", get(c, w, n), w64, 1e-6, 1e-6)
		// m and v are differences of float32 terms: errors scale with g (0.1) and g² (0.01).
		checkClose(t, name+" m", get(c, m, n), m64, 1e-8, 1e-5)
		checkClose(t, name+" v", get(c, v, n), v64, 1e-9, 1e-5)
		checkGuards(t, name+" param", w, n)
		checkGuards(t, name+" m", m, n)
		checkGuards(t, name+" v", v, n)
	}
	// The parameters did move.
	var moved float64
	for i, x := range get(c, w, n) {
		moved = max(moved, math.Abs(float64(x-wv[i])))
	}
	if moved < 1e-3 {
		t.Errorf("parameters moved at most %v in 3 steps", moved)
	}
}

func TestBinary(t *testing.T) {
	c := newCPU(3)
	r := rng.New(13)
	n := 40000
	av, bv := randF32(r, n, 2), randF32(r, n, 2)
	ops := []struct {
		op backend.BinaryOp
		f  func(a, b float64) float64
	}{
		{backend.Add, func(a, b float64) float64 { return a + b }},
		{backend.Sub, func(a, b float64) float64 { return a - b }},
		{backend.Mul, func(a, b float64) float64 { return a * b }},
		{backend.Div, func(a, b float64) float64 { return a / b }},
	}
	for _, o := range ops {
		// A float32 result of one operation on float32 operands is the
		// float64 result rounded once.
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(float32(o.f(float64(av[i]), float64(bv[i]))))
		}
		a, b, d := put(c, av, 1), put(c, bv, 2), put(c, make([]float32, n), 3)
		c.Binary(o.op, d, a, b, n)
		checkClose(t, fmt.Sprintf("binary %d", o.op), get(c, d, n), want, 0, 0)
		checkGuards(t, "binary", d, n)
		// dst may alias either operand.
		c.Binary(o.op, a, a, b, n)
		checkClose(t, fmt.Sprintf("binary %d dst=a", o.op), get(c, a, n), want, 0, 0)
		a = put(c, av, 0)
		c.Binary(o.op, b, a, b, n)
		checkClose(t, fmt.Sprintf("binary %d dst=b", o.op), get(c, b, n), want, 0, 0)
	}
}

// TestDropoutAdd holds DropoutAdd to masks computed here from
// Philox4x32-10 (rng.Philox4x32), element g = offset + i taking word g%4 of
// counter (g/4, site, 0), for any split of the work among chunks.
func TestDropoutAdd(t *testing.T) {
	c := newCPU(3)
	r := rng.New(15)
	n := 40000 // several parallel chunks
	xv, yv := randF32(r, n, 1), randF32(r, n, 1)
	yv[7] = float32(math.Inf(1)) // a dropped infinity stays NaN, as masking by multiplying makes it
	for k, p := range []float32{0, 0.1, 0.5, 0.9} {
		key, site, offset := r.Uint64(), uint32(k+1), int64(r.Intn(1<<40))
		m := backend.NewDropoutMask(key, site, offset, p)
		want, wantDrop := make([]float32, n), make([]float32, n)
		kept := 0
		for i := range want {
			f := float32(0)
			g := uint64(offset) + uint64(i)
			w := rng.Philox4x32([4]uint32{uint32(g >> 2), uint32(g >> 34), site, 0}, [2]uint32{uint32(key), uint32(key >> 32)})
			if float64(w[g%4])/(1<<32) >= float64(p) {
				f = 1 / (1 - p)
				kept++
			}
			// The conversion rounds the product, as the kernel does: Go may
			// otherwise fuse it with the add below into one multiply-add.
			wantDrop[i] = float32(yv[i] * f)
			want[i] = xv[i] + wantDrop[i]
		}
		if frac := float64(kept) / float64(n); math.Abs(frac-float64(1-p)) > 0.02 {
			t.Fatalf("p %v: kept %v of the elements", p, frac)
		}
		x, y, d := put(c, xv, 1), put(c, yv, 2), put(c, make([]float32, n), 3)
		c.DropoutAdd(d, x, y, n, m)
		same := func(name string, got, want []float32) {
			t.Helper()
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("p %v %s[%d] = %v, want %v", p, name, i, got[i], want[i])
				}
			}
		}
		same("x+dropout(y)", get(c, d, n), want)
		checkGuards(t, "dropout_add", d, n)
		c.DropoutAdd(d, backend.Ref{}, y, n, m)
		same("dropout(y)", get(c, d, n), wantDrop)
		c.DropoutAdd(x, x, y, n, m) // out may alias x
		same("x+dropout(y) in x", get(c, x, n), want)
		c.DropoutAdd(y, backend.Ref{}, y, n, m) // or y
		same("dropout(y) in y", get(c, y, n), wantDrop)
	}
}

func TestAxpyScale(t *testing.T) {
	c := newCPU(3)
	r := rng.New(14)
	n := 40000
	dv, xv := randF32(r, n, 1), randF32(r, n, 1)
	const alpha = float32(-0.3)
	d, x := put(c, dv, 2), put(c, xv, 1)
	c.Axpy(d, x, alpha, n)
	want := make([]float64, n)
	for i := range want {
		want[i] = float64(dv[i]) + float64(alpha)*float64(xv[i])
	}
	got := get(c, d, n)
	for i := range got { // within one rounding of each operation
		bound := 1.2e-7 * (math.Abs(float64(dv[i])) + 2*math.Abs(float64(alpha)*float64(xv[i])))
		if diff := math.Abs(float64(got[i]) - want[i]); diff > bound {
			t.Fatalf("axpy[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	checkGuards(t, "axpy", d, n)

	for i := range want {
		want[i] = float64(float32(float64(alpha) * float64(xv[i])))
	}
	s := put(c, make([]float32, n), 0)
	c.Scale(s, x, alpha, n)
	checkClose(t, "scale", get(c, s, n), want, 0, 0)
	checkGuards(t, "scale", s, n)
	c.Scale(x, x, alpha, n) // in place
	checkClose(t, "scale in place", get(c, x, n), want, 0, 0)
}

func TestUnary(t *testing.T) {
	c := newCPU(3)
	r := rng.New(15)
	n := 40000
	xv := randF32(r, n, 2)
	pos := make([]float32, n)
	for i, v := range xv {
		pos[i] = float32(math.Abs(float64(v))) + 1e-3
	}
	ops := []struct {
		op  backend.UnaryOp
		in  []float32
		f   func(float64) float64
		tol float64
	}{
		{backend.Neg, xv, func(x float64) float64 { return -x }, 0},
		{backend.Exp, xv, math.Exp, 2e-7},
		{backend.Log, pos, math.Log, 2e-7},
		{backend.Tanh, xv, math.Tanh, 2e-7},
		{backend.Sqrt, pos, math.Sqrt, 2e-7},
	}
	for _, o := range ops {
		want := make([]float64, n)
		for i, v := range o.in {
			want[i] = o.f(float64(v))
		}
		x, d := put(c, o.in, 1), put(c, make([]float32, n), 2)
		c.Unary(o.op, d, x, n)
		checkClose(t, fmt.Sprintf("unary %d", o.op), get(c, d, n), want, 0, o.tol)
		checkGuards(t, "unary", d, n)
		c.Unary(o.op, x, x, n)
		checkClose(t, fmt.Sprintf("unary %d in place", o.op), get(c, x, n), want, 0, o.tol)
	}
}

func TestSumRowsCols(t *testing.T) {
	c := newCPU(3)
	r := rng.New(16)
	rows, cols := 37, 1000
	sv := randF32(r, rows*cols, 1)
	s := put(c, sv, 3)
	for _, beta := range []float32{0, 1, 0.5} {
		d0 := randF32(r, cols, 1)
		d := put(c, d0, 1)
		c.SumRows(d, s, rows, cols, beta)
		want := make([]float64, cols)
		bound := make([]float64, cols)
		for j := range want {
			want[j] = float64(beta) * float64(d0[j])
			bound[j] = math.Abs(want[j])
			for i := 0; i < rows; i++ {
				want[j] += float64(sv[i*cols+j])
				bound[j] += math.Abs(float64(sv[i*cols+j]))
			}
		}
		got := get(c, d, cols)
		for j := range got {
			if diff := math.Abs(float64(got[j]) - want[j]); diff > 1e-6*bound[j]*float64(rows) {
				t.Fatalf("SumRows beta=%v [%d] = %v, want %v", beta, j, got[j], want[j])
			}
		}
		checkGuards(t, "sumrows", d, cols)
	}
	// beta = 0 overwrites NaN.
	d := put(c, []float32{float32(math.NaN())}, 0)
	c.SumRows(d, s, rows, 1, 0)
	if g := get(c, d, 1)[0]; math.IsNaN(float64(g)) {
		t.Errorf("SumRows with beta 0 kept a NaN")
	}

	rows2, cols2 := 300, 77
	sv2 := randF32(r, rows2*cols2, 1)
	s2, d2 := put(c, sv2, 1), put(c, randF32(r, rows2, 1), 2)
	c.SumCols(d2, s2, rows2, cols2, -0.5)
	want := make([]float64, rows2)
	for i := range want {
		for j := 0; j < cols2; j++ {
			want[i] += float64(sv2[i*cols2+j])
		}
		want[i] *= -0.5
	}
	checkClose(t, "sumcols", get(c, d2, rows2), want, 1e-5, 1e-5)
	checkGuards(t, "sumcols", d2, rows2)
}

func TestSumSquares(t *testing.T) {
	c := newCPU(3)
	r := rng.New(17)
	n := 100003 // several fixed chunks and a ragged one
	sv := randF32(r, n, 1.5)
	s, d, e := put(c, sv, 1), put(c, []float32{2.5}, 2), put(c, []float32{float32(math.NaN())}, 0)
	c.SumSquares(d, s, n, 1)
	c.SumSquares(e, s, n, 0) // e is not read
	want := 0.0
	for _, v := range sv {
		want += float64(v) * float64(v)
	}
	checkClose(t, "sumsquares", get(c, d, 1), []float64{2.5 + want}, 0, 1e-7)
	checkClose(t, "sumsquares beta 0", get(c, e, 1), []float64{want}, 0, 1e-7)
	checkGuards(t, "sumsquares", d, 1)
}

func TestCast(t *testing.T) {
	c := newCPU(3)
	r := rng.New(18)
	n := 40000
	xv := randF32(r, n, 1000)
	xv[0], xv[1], xv[2], xv[3] = float32(math.Copysign(0, -1)), float32(math.Inf(1)), 1e-6, 7e4
	x := put(c, xv, 1)
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		h := c.Alloc(dt, n+2)
		hr := backend.Ref{S: h, Off: 2}
		c.Cast(hr, x, n)
		bits := make([]uint16, n)
		c.Download(backend.AsBytes(bits), hr)
		for i, v := range xv {
			want := backend.F32ToBF16(v)
			if dt == backend.F16 {
				want = backend.F32ToF16(v)
			}
			if bits[i] != want {
				t.Fatalf("cast f32->%v [%d] of %v = %#04x, want %#04x", dt, i, v, bits[i], want)
			}
		}
		back := put(c, make([]float32, n), 3)
		c.Cast(back, hr, n)
		got := get(c, back, n)
		checkGuards(t, "cast back", back, n)
		for i, v := range got {
			want := backend.BF16ToF32(bits[i])
			tol := 1.0 / 256 // bf16: 8 significant bits
			if dt == backend.F16 {
				want = backend.F16ToF32(bits[i])
				tol = 1.0 / 2048
			}
			if math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("cast %v->f32 [%d] = %v, want %v", dt, i, v, want)
			}
			// and the round trip is close to the original where it is in range
			orig := float64(xv[i])
			if a := math.Abs(orig); a > 1e-4 && a < 6e4 && !math.IsInf(orig, 0) {
				if d := math.Abs(float64(v) - orig); d > tol*a {
					t.Fatalf("%v round trip of %v gave %v", dt, orig, v)
				}
			}
		}
		// Casting between the half types goes through float32.
		other := backend.F16
		if dt == backend.F16 {
			other = backend.BF16
		}
		o := c.Alloc(other, n)
		c.Cast(backend.Ref{S: o}, hr, n)
		obits := make([]uint16, n)
		c.Download(backend.AsBytes(obits), backend.Ref{S: o})
		for i := range obits {
			v := backend.BF16ToF32(bits[i])
			want := backend.F32ToF16(v)
			if dt == backend.F16 {
				v = backend.F16ToF32(bits[i])
				want = backend.F32ToBF16(v)
			}
			if obits[i] != want {
				t.Fatalf("cast %v->%v [%d] = %#04x, want %#04x", dt, other, i, obits[i], want)
			}
		}
	}
	// I32 -> F32.
	iv := []int32{0, -7, 1 << 24, 1<<24 + 1, -(1 << 30), 123456789}
	ir, fr := putI32(c, iv, 1), put(c, make([]float32, len(iv)), 1)
	c.Cast(fr, ir, len(iv))
	for i, v := range get(c, fr, len(iv)) {
		if v != float32(iv[i]) {
			t.Errorf("cast i32->f32 of %d = %v", iv[i], v)
		}
	}
	// F32 -> F32 is a copy.
	y := put(c, make([]float32, n), 0)
	c.Cast(y, x, n)
	checkClose(t, "cast f32->f32", get(c, y, n), widen(xv), 0, 0)
}

func TestFillCopy(t *testing.T) {
	c := newCPU(2)
	r := rng.New(19)
	n := 100
	for _, v := range []float32{0, 1.5, -1.0 / 3} {
		s := put(c, randF32(r, n, 1), 0)
		part := backend.Ref{S: s.S, Off: 10}
		before := get(c, s, n)
		c.Fill(part, v, 50)
		got := get(c, s, n)
		for i := range got {
			want := before[i]
			if i >= 10 && i < 60 {
				want = v
			}
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("fill %v: [%d] = %v, want %v", v, i, got[i], want)
			}
		}
	}
	iv := c.Alloc(backend.I32, n)
	c.Upload(backend.Ref{S: iv}, backend.AsBytes(make([]int32, n)))
	c.Fill(backend.Ref{S: iv, Off: 3}, 7, 5)
	ig := make([]int32, n)
	c.Download(backend.AsBytes(ig), backend.Ref{S: iv})
	for i, v := range ig {
		if (i >= 3 && i < 8) != (v == 7) || (v != 0 && v != 7) {
			t.Fatalf("fill i32: [%d] = %d", i, v)
		}
	}
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		h := c.Alloc(dt, n)
		c.Upload(backend.Ref{S: h}, backend.AsBytes(make([]uint16, n)))
		const v = float32(1.0 / 3)
		c.Fill(backend.Ref{S: h, Off: 1}, v, n-2)
		want := backend.F32ToBF16(v)
		if dt == backend.F16 {
			want = backend.F32ToF16(v)
		}
		hb := make([]uint16, n)
		c.Download(backend.AsBytes(hb), backend.Ref{S: h})
		for i, b := range hb {
			w := want
			if i == 0 || i == n-1 {
				w = 0
			}
			if b != w {
				t.Fatalf("fill %v: [%d] = %#04x, want %#04x", dt, i, b, w)
			}
		}
	}

	// Copy, for every dtype, between offsets.
	fv := randF32(r, n, 1)
	src, dst := put(c, fv, 4), put(c, make([]float32, n), 0)
	c.Copy(backend.Ref{S: dst.S, Off: 1}, backend.Ref{S: src.S, Off: 6}, 20)
	fg := get(c, dst, n)
	for i := range fg {
		want := float32(0)
		if i >= 1 && i < 21 {
			want = fv[i-1+2]
		}
		if fg[i] != want {
			t.Fatalf("copy f32: [%d] = %v, want %v", i, fg[i], want)
		}
	}
	iv2 := make([]int32, n)
	i64 := make([]int64, n)
	u16 := make([]uint16, n)
	for i := range iv2 {
		iv2[i] = int32(r.Uint64())
		i64[i] = int64(r.Uint64())
		u16[i] = uint16(r.Uint64())
	}
	for _, cs := range []struct {
		dt   backend.DType
		data []byte
		zero []byte
		out  func() (any, []byte)
	}{
		{backend.I32, backend.AsBytes(iv2), backend.AsBytes(make([]int32, n)), func() (any, []byte) { o := make([]int32, n); return o, backend.AsBytes(o) }},
		{backend.I64, backend.AsBytes(i64), backend.AsBytes(make([]int64, n)), func() (any, []byte) { o := make([]int64, n); return o, backend.AsBytes(o) }},
		{backend.BF16, backend.AsBytes(u16), backend.AsBytes(make([]uint16, n)), func() (any, []byte) { o := make([]uint16, n); return o, backend.AsBytes(o) }},
	} {
		s, d := c.Alloc(cs.dt, n), c.Alloc(cs.dt, n)
		c.Upload(backend.Ref{S: s}, cs.data)
		c.Upload(backend.Ref{S: d}, cs.zero)
		c.Copy(backend.Ref{S: d, Off: 2}, backend.Ref{S: s, Off: 5}, 30)
		out, ob := cs.out()
		c.Download(ob, backend.Ref{S: d})
		for i := 0; i < n; i++ {
			var got, want int64
			switch o := out.(type) {
			case []int32:
				got = int64(o[i])
				if i >= 2 && i < 32 {
					want = int64(iv2[i+3])
				}
			case []int64:
				got = o[i]
				if i >= 2 && i < 32 {
					want = i64[i+3]
				}
			case []uint16:
				got = int64(o[i])
				if i >= 2 && i < 32 {
					want = int64(u16[i+3])
				}
			}
			if got != want {
				t.Fatalf("copy %v: [%d] = %d, want %d", cs.dt, i, got, want)
			}
		}
	}
}

func TestUploadDownload(t *testing.T) {
	c := newCPU(1)
	r := rng.New(20)
	before := c.MemStats().Copied
	fv := randF32(r, 10, 1)
	s := c.Alloc(backend.F32, 16)
	c.Upload(backend.Ref{S: s, Off: 3}, backend.AsBytes(fv))
	got := make([]float32, 10)
	c.Download(backend.AsBytes(got), backend.Ref{S: s, Off: 3})
	for i := range got {
		if got[i] != fv[i] {
			t.Fatalf("f32 round trip [%d] = %v, want %v", i, got[i], fv[i])
		}
	}
	part := make([]float32, 4)
	c.Download(backend.AsBytes(part), backend.Ref{S: s, Off: 5})
	for i := range part {
		if part[i] != fv[i+2] {
			t.Fatalf("partial download [%d] = %v, want %v", i, part[i], fv[i+2])
		}
	}
	i32s := []int32{1, -2, 3}
	is := c.Alloc(backend.I32, 5)
	c.Upload(backend.Ref{S: is, Off: 2}, backend.AsBytes(i32s))
	ig := make([]int32, 3)
	c.Download(backend.AsBytes(ig), backend.Ref{S: is, Off: 2})
	i64s := []int64{1 << 40, -5}
	ls := c.Alloc(backend.I64, 2)
	c.Upload(backend.Ref{S: ls}, backend.AsBytes(i64s))
	lg := make([]int64, 2)
	c.Download(backend.AsBytes(lg), backend.Ref{S: ls})
	u16s := []uint16{0xffff, 1, 0x8000}
	us := c.Alloc(backend.F16, 3)
	c.Upload(backend.Ref{S: us}, backend.AsBytes(u16s))
	ug := make([]uint16, 3)
	c.Download(backend.AsBytes(ug), backend.Ref{S: us})
	if fmt.Sprint(ig) != fmt.Sprint(i32s) || fmt.Sprint(lg) != fmt.Sprint(i64s) || fmt.Sprint(ug) != fmt.Sprint(u16s) {
		t.Errorf("round trips: %v %v %v", ig, lg, ug)
	}
	// Bytes moved: 40+40+16 f32, 12+12 i32, 16+16 i64, 6+6 u16.
	if d := c.MemStats().Copied - before; d != 40+40+16+12+12+16+16+6+6 {
		t.Errorf("MemStats.Copied grew by %d bytes, want %d", d, 40+40+16+12+12+16+16+6+6)
	}
}

func TestPool(t *testing.T) {
	c := newCPU(1)
	if ms := c.MemStats(); ms != (backend.MemStats{Total: ms.Total}) || ms.Total < 0 {
		t.Fatalf("fresh backend MemStats = %+v", ms)
	}
	a := c.Alloc(backend.F32, 100)
	if a.Len() != 100 || a.DType() != backend.F32 || a.Device() != backend.CPU {
		t.Fatalf("Alloc gave %d %v on %v", a.Len(), a.DType(), a.Device())
	}
	want := func(alloc, reserved, peak int64) {
		t.Helper()
		ms := c.MemStats()
		if ms.Allocated != alloc || ms.Reserved != reserved || ms.Peak != peak {
			t.Fatalf("MemStats = %+v, want Allocated %d Reserved %d Peak %d", ms, alloc, reserved, peak)
		}
	}
	want(400, 400, 400)
	b := c.Alloc(backend.I64, 50)
	want(800, 800, 800)
	c.Free(a)
	want(400, 800, 800)
	a2 := c.Alloc(backend.F32, 100)
	if a2 != a {
		t.Errorf("Alloc after Free of the same size returned a new buffer")
	}
	want(800, 800, 800)
	c.Free(a2)
	c.Free(b)
	want(0, 800, 800)
	// Other sizes and dtypes do not take that buffer.
	x := c.Alloc(backend.F32, 101)
	y := c.Alloc(backend.I32, 100)
	h := c.Alloc(backend.BF16, 100)
	if x == a || y == a || h == a {
		t.Errorf("a buffer of another size or dtype was reused")
	}
	want(404+400+200, 800+404+400+200, 1004)
	// Two free buffers of one size: both are handed out before a new one.
	c.Free(x)
	x1 := c.Alloc(backend.F32, 101)
	x2 := c.Alloc(backend.F32, 101)
	if x1 != x || x2 == x {
		t.Errorf("pool reuse of two buffers: %p %p (freed %p)", x1, x2, x)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Alloc of -1 elements did not panic")
			}
		}()
		c.Alloc(backend.F32, -1)
	}()
}

// TestThreads checks the thread count knob.
// rangeFunc adapts a function to ranger.
type rangeFunc func(lo, hi int)

func (f rangeFunc) do(lo, hi int) { f(lo, hi) }

func TestThreads(t *testing.T) {
	c := New(backend.Device{Kind: "cpu", Index: 3})
	if c.Threads() < 1 || c.Device() != (backend.Device{Kind: "cpu", Index: 3}) {
		t.Fatalf("New: %d threads on %v", c.Threads(), c.Device())
	}
	c.SetThreads(0)
	if c.Threads() != 1 {
		t.Errorf("SetThreads(0) gave %d threads, want 1", c.Threads())
	}
	// parallelFor covers every index exactly once for awkward sizes.
	for _, th := range []int{1, 2, 7} {
		c.SetThreads(th)
		for _, n := range []int{1, 5, 63, 64, 65, 1000, 4097} {
			for _, grain := range []int{0, 1, 3, 64, 5000} {
				hits := make([]int32, n)
				c.parallelFor(n, grain, rangeFunc(func(lo, hi int) {
					for i := lo; i < hi; i++ {
						hits[i]++
					}
				}))
				for i, h := range hits {
					if h != 1 {
						t.Fatalf("threads %d n %d grain %d: index %d handled %d times", th, n, grain, i, h)
					}
				}
			}
		}
	}
}

// TestDeterminism runs the reducing kernels with 1, 2 and 7 threads, twice
// each, and requires bit-identical results.
func TestDeterminism(t *testing.T) {
	r := rng.New(21)
	// MatMul: several C tiles in M and N, several K panels.
	mp := backend.MatMul{Batch: 2, M: 150, N: 600, K: 300, TransB: true, Alpha: 0.7, Beta: 0.5,
		StrideA: 150 * 300, StrideB: 0, StrideC: 150 * 600}
	if testing.Short() {
		mp = backend.MatMul{Batch: 2, M: 70, N: 520, K: 260, TransB: true, Alpha: 0.7, Beta: 0.5,
			StrideA: 70 * 260, StrideB: 0, StrideC: 70 * 520}
	}
	ma, mb := randF32(r, mp.Batch*mp.M*mp.K, 1), randF32(r, mp.N*mp.K, 1)
	mc, mbias := randF32(r, mp.Batch*mp.M*mp.N, 1), randF32(r, mp.N, 1)
	// LayerNormBackward: many 64-row chunks.
	lrows, lcols := 700, 48
	lx, lw, lb, lg := randF32(r, lrows*lcols, 1), randF32(r, lcols, 1), randF32(r, lcols, 1), randF32(r, lrows*lcols, 1)
	// EmbeddingBackward: repeated ids, wide rows split across tasks.
	ev, edim, en := 20, 320, 400
	eg := randF32(r, en*edim, 1)
	eids := make([]int32, en)
	for i := range eids {
		eids[i] = int32(r.Intn(ev))
	}
	// AttentionBackward.
	ap := backend.Attention{B: 3, T: 19, C: 48, H: 4}
	aqkv, ag := randF32(r, ap.B*ap.T*3*ap.C, 1), randF32(r, ap.B*ap.T*ap.C, 1)
	// SumSquares: many chunks.
	sn := 300001
	ss := randF32(r, sn, 1)

	run := func(threads int) [][]float32 {
		c := newCPU(threads)
		var outs [][]float32

		cc := put(c, mc, 0)
		c.MatMul(mp, put(c, ma, 0), put(c, mb, 0), cc, put(c, mbias, 0))
		outs = append(outs, get(c, cc, len(mc)))

		out, mean, rstd := put(c, make([]float32, lrows*lcols), 0), put(c, make([]float32, lrows), 0), put(c, make([]float32, lrows), 0)
		x, w, b := put(c, lx, 0), put(c, lw, 0), put(c, lb, 0)
		c.LayerNorm(out, mean, rstd, x, w, b, lrows, lcols, 1e-5)
		dx, dw, db := put(c, make([]float32, lrows*lcols), 0), put(c, make([]float32, lcols), 0), put(c, make([]float32, lcols), 0)
		c.LayerNormBackward(dx, backend.Ref{}, dw, db, put(c, lg, 0), x, mean, rstd, w, lrows, lcols, backend.DropoutOut{})
		outs = append(outs, get(c, out, lrows*lcols), get(c, dx, lrows*lcols), get(c, dw, lcols), get(c, db, lcols))

		dt := put(c, make([]float32, ev*edim), 0)
		c.EmbeddingBackward(dt, put(c, eg, 0), putI32(c, eids, 0), en, edim)
		outs = append(outs, get(c, dt, ev*edim))

		qkv, ao, saved := put(c, aqkv, 0), put(c, make([]float32, ap.B*ap.T*ap.C), 0), put(c, make([]float32, ap.SavedLen()), 0)
		c.Attention(ap, ao, saved, qkv)
		dq := put(c, make([]float32, len(aqkv)), 0)
		c.AttentionBackward(ap, dq, put(c, ag, 0), ao, saved, qkv)
		outs = append(outs, get(c, ao, ap.B*ap.T*ap.C), get(c, dq, len(aqkv)))

		sd := put(c, []float32{0}, 0)
		c.SumSquares(sd, put(c, ss, 0), sn, 1)
		outs = append(outs, get(c, sd, 1))
		return outs
	}
	names := []string{"matmul", "layernorm", "layernorm dx", "layernorm dw", "layernorm db", "embedding dtable", "attention", "attention dqkv", "sumsquares"}
	base := run(1)
	for _, threads := range []int{1, 2, 7, 7, 2} {
		outs := run(threads)
		for k := range base {
			for i := range base[k] {
				if math.Float32bits(outs[k][i]) != math.Float32bits(base[k][i]) {
					t.Fatalf("%s with %d threads: [%d] = %v, with 1 thread %v", names[k], threads, i, outs[k][i], base[k][i])
				}
			}
		}
	}
}

// TestAttentionKV feeds a sequence through the cache in pieces (a prompt,
// single tokens, a short run) and requires the same outputs as causal
// attention over the whole sequence, and the cache to hold every k and v.
func TestAttentionKV(t *testing.T) {
	c := newCPU(3)
	r := rng.New(22)
	B, T, C, H, maxT := 2, 13, 32, 4, 16
	xv := randF32(r, B*T*3*C, 1)
	want := ref.Attention(widen(xv), B, T, C, H)
	kc, vc := put(c, randF32(r, B*maxT*C, 1), 1), put(c, randF32(r, B*maxT*C, 1), 2)
	got := make([]float32, B*T*C)
	pos := 0
	for _, n := range []int{5, 1, 1, 3, 1, 2} {
		piece := make([]float32, 0, B*n*3*C)
		for b := 0; b < B; b++ {
			piece = append(piece, xv[(b*T+pos)*3*C:(b*T+pos+n)*3*C]...)
		}
		out := put(c, make([]float32, B*n*C), 3)
		c.AttentionKV(backend.AttentionKV{B: B, T: n, C: C, H: H, Pos: pos, MaxT: maxT}, out, put(c, piece, 4), kc, vc)
		checkGuards(t, "attention_kv out", out, B*n*C)
		o := get(c, out, B*n*C)
		for b := 0; b < B; b++ {
			copy(got[(b*T+pos)*C:(b*T+pos+n)*C], o[b*n*C:(b+1)*n*C])
		}
		pos += n
	}
	if pos != T {
		t.Fatalf("fed %d positions, want %d", pos, T)
	}
	checkClose(t, "attention_kv", got, want, 1e-5, 1e-5)
	ks, vs := get(c, kc, B*maxT*C), get(c, vc, B*maxT*C)
	for b := 0; b < B; b++ {
		for s := 0; s < T; s++ {
			for j := 0; j < C; j++ {
				if ks[(b*maxT+s)*C+j] != xv[(b*T+s)*3*C+C+j] || vs[(b*maxT+s)*C+j] != xv[(b*T+s)*3*C+2*C+j] {
					t.Fatalf("cache at batch %d position %d channel %d does not hold k and v", b, s, j)
				}
			}
		}
	}
	checkGuards(t, "k cache", kc, B*maxT*C)
	checkGuards(t, "v cache", vc, B*maxT*C)
}

func TestPeakGFLOPs(t *testing.T) {
	g, w := PeakGFLOPs(1, 20*time.Millisecond)
	if g <= 0 || w < 1 {
		t.Fatalf("peak %v GFLOP/s at width %d", g, w)
	}
	t.Logf("one-thread FMA peak %.1f GFLOP/s with %d-float vectors", g, w)
}

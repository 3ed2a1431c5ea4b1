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

// TestExpAffineChunk: exp(a·x - b) and the sum of the results, on
// lengths with every tail, in place and not, against float64; the SIMD and
// portable versions add in one order, so their sums differ only as their
// exps do.
func TestExpAffineChunk(t *testing.T) {
	x := vecInputs(3)
	for _, n := range []int{1, 7, 8, 9, 63, 64, 130, 1003} {
		for name, fn := range map[string]func(d, s []float32, a, b float32) float32{"default": expAffineChunk, "go": expAffineGo} {
			for _, inPlace := range []bool{false, true} {
				src := append([]float32(nil), x[:n]...)
				d := make([]float32, n)
				if inPlace {
					d = src
				}
				a, b := float32(0.37), float32(1.25)
				want := make([]float64, n)
				var wsum float64
				for i, v := range x[:n] {
					want[i] = math.Exp(float64(float32(a*v) - b))
					wsum += want[i]
				}
				sum := fn(d, src, a, b)
				for i := range want {
					if r := math.Abs(float64(d[i])-want[i]) / want[i]; r > 4e-7 {
						t.Fatalf("%s n=%d in place %v: exp(%v·%v - %v) = %v, want %v", name, n, inPlace, a, x[i], b, d[i], want[i])
					}
				}
				if r := math.Abs(float64(sum)-wsum) / wsum; r > 1e-6 {
					t.Fatalf("%s n=%d: sum %v, want %v (relative error %.2g)", name, n, sum, wsum, r)
				}
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

// TestAdamWChunkMatchesGo: the SIMD AdamW does the same operations in the
// same order as the portable one, so results are bit-identical.
func TestAdamWChunkMatchesGo(t *testing.T) {
	g := vecInputs(3)
	k := &adamConsts{b1: 0.9, c1: 0.1, b2: 0.95, c2: 0.05, invBC2Sqrt: 3.1, eps: 1e-8, decay: 0.999, stepSize: 0.01}
	var ws, ms, vs [2][]float32
	for i, fn := range []func(w, g, m, v []float32, k *adamConsts){adamwChunk, adamwGo} {
		ws[i], ms[i], vs[i] = vecInputs(1), vecInputs(0.1), make([]float32, len(g))
		for j := range vs[i] {
			vs[i][j] = float32(j%7) * 0.01
		}
		for step := 0; step < 3; step++ {
			fn(ws[i], g, ms[i], vs[i], k)
		}
	}
	for j := range ws[0] {
		if ws[0][j] != ws[1][j] || ms[0][j] != ms[1][j] || vs[0][j] != vs[1][j] {
			t.Fatalf("element %d: w %v/%v m %v/%v v %v/%v", j, ws[0][j], ws[1][j], ms[0][j], ms[1][j], vs[0][j], vs[1][j])
		}
	}
}

// TestLayerNormRows holds the SIMD LayerNorm row kernels to the portable
// ones on rows that are and are not multiples of eight wide.
func TestLayerNormRows(t *testing.T) {
	for _, n := range []int{8, 128, 384, 67} {
		x, w, b, g := vecInputs(2)[:n], vecInputs(1)[1:n+1], vecInputs(0.5)[2:n+2], vecInputs(1)[3:n+3]
		for _, bias := range [][]float32{b, nil} {
			o1, o2 := make([]float32, n), make([]float32, n)
			m1, r1 := lnForwardRow(o1, x, w, bias, 1e-5)
			m2, r2 := lnForwardRowGo(o2, x, w, bias, 1e-5)
			if math.Abs(float64(m1-m2)) > 1e-5 || math.Abs(float64(r1-r2)) > 1e-5*float64(r2) {
				t.Fatalf("n=%d: mean/rstd %v %v, portable %v %v", n, m1, r1, m2, r2)
			}
			for j := range o1 {
				if math.Abs(float64(o1[j]-o2[j])) > 1e-5*(1+math.Abs(float64(o2[j]))) {
					t.Fatalf("n=%d: out[%d] = %v, portable %v", n, j, o1[j], o2[j])
				}
			}
			d1, d2 := make([]float32, n), make([]float32, n)
			pw1, pb1, pw2, pb2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for j := range pw1 {
				pw1[j], pw2[j], pb1[j], pb2[j] = 0.5, 0.5, -0.25, -0.25
			}
			lnBackwardRow(d1, x, g, w, pw1, pb1, m2, r2)
			lnBackwardRowGo(d2, x, g, w, pw2, pb2, m2, r2)
			for j := range d1 {
				for _, pair := range [][2]float32{{d1[j], d2[j]}, {pw1[j], pw2[j]}, {pb1[j], pb2[j]}} {
					if math.Abs(float64(pair[0]-pair[1])) > 1e-5*(1+math.Abs(float64(pair[1]))) {
						t.Fatalf("n=%d: backward element %d: %v, portable %v", n, j, pair[0], pair[1])
					}
				}
			}
		}
	}
}

// TestElementwiseChunksMatchGo: the SIMD elementwise kernels give the
// portable loops' results bit for bit, on lengths with and without a tail.
func TestElementwiseChunksMatchGo(t *testing.T) {
	for _, n := range []int{16, 1001} {
		x, y := vecInputs(3)[:n], vecInputs(2)[1:n+1]
		for op := 0; op < 4; op++ {
			a, b := make([]float32, n), make([]float32, n)
			binaryChunk(op, a, x, y)
			binaryGo(op, b, x, y)
			for i := range a {
				if a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i]) {
					t.Fatalf("op %d, n=%d: element %d %v, portable %v", op, n, i, a[i], b[i])
				}
			}
		}
		a, b := append([]float32(nil), y...), append([]float32(nil), y...)
		axpyChunk(a, x, -0.7)
		axpyGo(b, x, -0.7)
		c, d := make([]float32, n), make([]float32, n)
		scaleChunk(c, x, 1.3)
		scaleGo(d, x, 1.3)
		for i := range a {
			if a[i] != b[i] || c[i] != d[i] {
				t.Fatalf("n=%d: element %d: axpy %v/%v scale %v/%v", n, i, a[i], b[i], c[i], d[i])
			}
		}
	}
}

// TestLlamaRows holds the SIMD RMSNorm and rotation rows to the portable
// ones, on widths that are and are not multiples of eight, the rotation
// both ways and in place.
func TestLlamaRows(t *testing.T) {
	near := func(name string, n, j int, got, want float32) {
		t.Helper()
		if math.Abs(float64(got-want)) > 1e-5*(1+math.Abs(float64(want))) {
			t.Fatalf("%s n=%d: element %d = %v, portable %v", name, n, j, got, want)
		}
	}
	for _, n := range []int{8, 64, 384, 67} {
		x, w, g := vecInputs(2)[:n], vecInputs(1)[1:n+1], vecInputs(1)[3:n+3]
		o1, o2 := make([]float32, n), make([]float32, n)
		r1, r2 := rmsForwardRow(o1, x, w, 1e-6), rmsForwardRowGo(o2, x, w, 1e-6)
		near("rmsnorm rstd", n, 0, r1, r2)
		for j := range o1 {
			near("rmsnorm", n, j, o1[j], o2[j])
		}
		d1, d2, pw1, pw2 := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for j := range pw1 {
			pw1[j], pw2[j] = 0.5, 0.5
		}
		rmsBackwardRow(d1, x, g, w, pw1, r2)
		rmsBackwardRowGo(d2, x, g, w, pw2, r2)
		for j := range d1 {
			near("rmsnorm dx", n, j, d1[j], d2[j])
			near("rmsnorm dw", n, j, pw1[j], pw2[j])
		}
		// A head of width 2n: cos and sin of random angles.
		half := n
		ang := vecInputs(3)[5 : 5+half]
		cos, sin := make([]float32, half), make([]float32, half)
		for j, a := range ang {
			cos[j], sin[j] = float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
		}
		h := vecInputs(1)[7 : 7+2*half]
		for _, sign := range []float32{1, -1} {
			o1, o2 := make([]float32, 2*half), make([]float32, 2*half)
			rotate(o1, h, cos, sin, sign)
			rotateGo(o2, h, cos, sin, sign)
			inPlace := append([]float32(nil), h...)
			rotate(inPlace, inPlace, cos, sin, sign)
			for j := range o1 {
				near("rotate", n, j, o1[j], o2[j])
				near("rotate in place", n, j, inPlace[j], o2[j])
			}
		}
	}
}

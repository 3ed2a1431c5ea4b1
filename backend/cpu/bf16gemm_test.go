package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/internal/testenv"
	"golang.org/x/sys/cpu"
)

// TestMatMulBF16 holds the BF16 product (widened to F32, and the dot
// products with each available micro-kernel) to the float64 reference on
// the same bf16-rounded inputs.
func TestMatMulBF16(t *testing.T) {
	type kernel = func(kp int, a, b []uint32, c []float32, ldc int, add bool)
	modes := []struct {
		name         string
		q            *bf16Product
		k            kernel
		portablePack bool
	}{{"widened", widenProduct, bf16Kernel, false}, {"dot/default", dotProduct, bf16Kernel, false}, {"dot/go", dotProduct, bf16KernelGo, true},
		{"amx/go", amxProduct, bf16Kernel, true}}
	type transpose = func([]uint32, int, []uint16, int, int) int
	bf16Chosen.Do(chooseBF16)
	defer func(k kernel, q *bf16Product, il32, il8 func([]uint32, []uint16, int, int) int, tr transpose, ak amxKernelFunc) {
		bf16Kernel, bf16Use, interleaveRows32, interleaveRows8, transposePairs8, amxKernel = k, q, il32, il8, tr, ak
	}(bf16Kernel, bf16Use, interleaveRows32, interleaveRows8, transposePairs8, amxKernel)
	amxKernel = amxKernelGo // the AMX driver with the portable kernel (the assembly: TestAMXProduct)
	il32, il8, tr := interleaveRows32, interleaveRows8, transposePairs8
	c := newCPU(2)
	r := rng.New(5)
	if cpu.X86.HasAVX512BF16 {
		t.Logf("this CPU has AVX512-BF16: the default kernel uses VDPBF16PS; the product uses it: %v", bf16Use == dotProduct)
	}
	for _, mode := range modes {
		name := mode.name
		if testing.Short() && mode.q == amxProduct {
			continue // TestAMXTwin holds the AMX driver to its twin on ragged shapes
		}
		bf16Kernel, bf16Use = mode.k, mode.q
		interleaveRows32, interleaveRows8, transposePairs8 = il32, il8, tr
		if mode.portablePack {
			interleaveRows32, interleaveRows8 = noPairs, noPairs
			transposePairs8 = func([]uint32, int, []uint16, int, int) int { return 0 }
		}
		for _, tc := range []struct {
			batch, m, n, kk int
			ta, tb          bool
			beta            float32
		}{
			{1, 8, 32, 16, false, false, 0},
			{1, 67, 70, 33, false, false, 0},
			{2, 19, 45, 7, true, false, 1},
			{1, 64, 100, 130, false, true, 0.5},
			{1, 9, 33, 300, true, true, 0},
			{3, 1, 1, 1, false, false, 0},
			{1, 65, 31, 129, true, false, 0},
			{2, 17, 97, 64, false, true, 1},
			{1, 40, 64, 70, false, true, 0},
			{2, 24, 40, 37, true, false, 0.5},
			{2, 130, 40, 33, false, true, 0.5},
			{1, 150, 20, 17, true, true, 0},
			{2, 70, 50, 40, false, false, 1},
			{1, 20, 300, 50, false, false, 0},
		} {
			na, nb, nc := tc.m*tc.kk, tc.kk*tc.n, tc.m*tc.n
			av, bv := make([]uint16, tc.batch*na), make([]uint16, tc.batch*nb)
			for i := range av {
				av[i] = backend.F32ToBF16(float32(r.Norm()))
			}
			for i := range bv {
				bv[i] = backend.F32ToBF16(float32(r.Norm()))
			}
			cv := randF32(r, tc.batch*nc, 1)
			as, bs := c.Alloc(backend.BF16, len(av)), c.Alloc(backend.BF16, len(bv))
			c.Upload(backend.Ref{S: as}, backend.AsBytes(av))
			c.Upload(backend.Ref{S: bs}, backend.AsBytes(bv))
			cc := put(c, cv, 0)
			p := backend.MatMul{Batch: tc.batch, M: tc.m, N: tc.n, K: tc.kk, TransA: tc.ta, TransB: tc.tb,
				StrideA: na, StrideB: nb, StrideC: nc, Alpha: 1, Beta: tc.beta}
			c.MatMul(p, backend.Ref{S: as}, backend.Ref{S: bs}, cc, backend.Ref{})
			got := get(c, cc, tc.batch*nc)
			for bi := 0; bi < tc.batch; bi++ {
				want := bf16Ref64(av[bi*na:(bi+1)*na], bv[bi*nb:(bi+1)*nb], cv[bi*nc:(bi+1)*nc], tc.m, tc.n, tc.kk, tc.ta, tc.tb, tc.beta)
				for i := range want {
					g := float64(got[bi*nc+i])
					if d := math.Abs(g - want[i]); d > 1e-6*float64(tc.kk)+1e-5*math.Abs(want[i]) {
						t.Fatalf("%s %+v: C[%d][%d] = %v, want %v", name, tc, bi, i, g, want[i])
					}
				}
			}
		}
	}
}

// TestMatMulBF16Bias checks the bias epilogue of every BF16 product, with
// tasks split by rows and by columns: C with a bias is C without one plus
// the bias on every row.
func TestMatMulBF16Bias(t *testing.T) {
	bf16Chosen.Do(chooseBF16)
	defer func(q *bf16Product, ak amxKernelFunc) { bf16Use, amxKernel = q, ak }(bf16Use, amxKernel)
	if !amxProduct.offered() {
		amxKernel = amxKernelGo
	}
	c := newCPU(2)
	r := rng.New(8)
	for _, q := range []*bf16Product{widenProduct, dotProduct, amxProduct} {
		bf16Use = q
		for _, sh := range [][3]int{{100, 40, 30}, {10, 40, 300}} {
			m, k, n := sh[0], sh[1], sh[2]
			bf := func(n int) backend.Ref {
				h := make([]uint16, n)
				for i := range h {
					h[i] = backend.F32ToBF16(float32(r.Norm()))
				}
				s := c.Alloc(backend.BF16, n)
				c.Upload(backend.Ref{S: s}, backend.AsBytes(h))
				return backend.Ref{S: s}
			}
			a, b := bf(m*k), bf(k*n)
			bias := randF32(r, n, 1)
			p := backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1}
			c1, c2 := put(c, randF32(r, m*n, 1), 0), put(c, randF32(r, m*n, 1), 0)
			c.MatMul(p, a, b, c1, backend.Ref{})
			c.MatMul(p, a, b, c2, put(c, bias, 0))
			g1, g2 := get(c, c1, m*n), get(c, c2, m*n)
			for i := range g1 {
				if d := math.Abs(float64(g2[i] - g1[i] - bias[i%n])); d > 1e-5 {
					t.Fatalf("%s %v: C[%d] = %v with bias %v, %v without", q.name, sh, i, g2[i], bias[i%n], g1[i])
				}
			}
		}
	}
}

// BenchmarkMatMulBF16 times the 512³ product with BF16 operands.
func BenchmarkMatMulBF16(b *testing.B) {
	benchBF16(b, 512, 512, 512, false, false)
}

// BenchmarkMatMulBF16Shapes times the products of the reference GPT's
// training step with BF16 operands, in F32 and each way of the BF16
// product (dot products only where the CPU has AVX512-BF16), in one run
// so their GFLOP/s compare.
func BenchmarkMatMulBF16Shapes(b *testing.B) {
	bf16Chosen.Do(chooseBF16)
	defer func(q *bf16Product) { bf16Use = q }(bf16Use)
	for _, cs := range []struct {
		name           string
		m, k, n        int
		transA, transB bool
	}{
		{"qkv_768x128x384", 768, 128, 384, false, false},
		{"proj_768x512x128", 768, 512, 128, false, false},
		{"dW_TransA_128x768x512", 128, 768, 512, true, false},
		{"dX_TransB_768x512x128", 768, 512, 128, false, true},
		{"square_512", 512, 512, 512, false, false},
	} {
		b.Run(cs.name+"/f32", func(b *testing.B) { benchF32(b, cs.m, cs.k, cs.n, cs.transA, cs.transB) })
		for _, q := range []*bf16Product{widenProduct, dotProduct, amxProduct} {
			if q.offered() {
				bf16Use = q
				b.Run(cs.name+"/bf16_"+q.name, func(b *testing.B) { benchBF16(b, cs.m, cs.k, cs.n, cs.transA, cs.transB) })
			}
		}
	}
}

func benchF32(b *testing.B, m, k, n int, ta, tb bool) {
	c := benchCPU()
	r := rng.New(1)
	p := backend.MatMul{Batch: 1, M: m, N: n, K: k, TransA: ta, TransB: tb, Alpha: 1}
	a, bb, cc := benchRand(c, r, m*k), benchRand(c, r, k*n), benchRand(c, r, m*n)
	benchMatMul(b, c, p, a, bb, cc)
}

func benchBF16(b *testing.B, m, k, n int, ta, tb bool) {
	c := benchCPU()
	r := rng.New(1)
	p := backend.MatMul{Batch: 1, M: m, N: n, K: k, TransA: ta, TransB: tb, Alpha: 1}
	bf := func(n int) backend.Ref {
		h := make([]uint16, n)
		for i := range h {
			h[i] = backend.F32ToBF16(float32(r.Norm()))
		}
		s := c.Alloc(backend.BF16, n)
		c.Upload(backend.Ref{S: s}, backend.AsBytes(h))
		return backend.Ref{S: s}
	}
	a, bb := bf(m*k), bf(k*n)
	benchMatMul(b, c, p, a, bb, benchRand(c, r, m*n))
}

func benchMatMul(b *testing.B, c *CPU, p backend.MatMul, a, bb, cc backend.Ref) {
	c.MatMul(p, a, bb, cc, backend.Ref{}) // warm the scratch
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.MatMul(p, a, bb, cc, backend.Ref{})
	}
	b.ReportMetric(2*float64(p.M*p.N*p.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestMatMulRound holds a product of F32 operands with Round to the
// product of the operands cast first: bitwise, since the CPU casts them
// the same way, for BF16 and F16, batched, strided and transposed.
func TestMatMulRound(t *testing.T) {
	c := newCPU(2)
	r := rng.New(11)
	for _, dt := range []backend.DType{backend.BF16, backend.F16} {
		for _, tc := range []struct {
			batch, m, n, kk int
			ta, tb          bool
			beta            float32
		}{
			{1, 19, 33, 17, false, false, 0},
			{3, 7, 12, 9, true, false, 1},
			{2, 16, 5, 40, false, true, 0.5},
		} {
			na, nb, nc := tc.m*tc.kk, tc.kk*tc.n, tc.m*tc.n
			av, bv, cv := randF32(r, tc.batch*na, 1), randF32(r, tc.batch*nb, 1), randF32(r, tc.batch*nc, 1)
			p := backend.MatMul{Batch: tc.batch, M: tc.m, N: tc.n, K: tc.kk, TransA: tc.ta, TransB: tc.tb,
				StrideA: na, StrideB: nb, StrideC: nc, Alpha: 1, Beta: tc.beta}
			a, b := put(c, av, 0), put(c, bv, 0)
			rounded := put(c, cv, 0)
			pr := p
			pr.Round = dt
			c.MatMul(pr, a, b, rounded, backend.Ref{})
			ac, bc := c.Alloc(dt, len(av)), c.Alloc(dt, len(bv))
			c.Cast(backend.Ref{S: ac}, a, len(av))
			c.Cast(backend.Ref{S: bc}, b, len(bv))
			cast := put(c, cv, 0)
			c.MatMul(p, backend.Ref{S: ac}, backend.Ref{S: bc}, cast, backend.Ref{})
			plain := put(c, cv, 0)
			c.MatMul(p, a, b, plain, backend.Ref{})
			got, want, f32 := get(c, rounded, len(cv)), get(c, cast, len(cv)), get(c, plain, len(cv))
			differs := false
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v %+v: C[%d] = %v rounded within the product, %v cast first", dt, tc, i, got[i], want[i])
				}
				differs = differs || got[i] != f32[i]
			}
			if !differs {
				t.Fatalf("%v %+v: rounding changed nothing: Round is ignored", dt, tc)
			}
		}
	}
}

// TestSetBF16Product: a run's recorded choice fixes the product: after
// SetBF16Product each product runs the kernel it names (told apart by
// their bits, since they sum in different orders), BF16Product reports
// it, and the dot products are refused, naming what is missing, on a CPU
// without AVX512-BF16 (here pretended), as is a kind that does not exist.
func TestSetBF16Product(t *testing.T) {
	bf16Chosen.Do(chooseBF16)
	defer func(q *bf16Product, how string) { bf16Use, bf16How = q, how }(bf16Use, bf16How)
	kind, how := BF16Product()
	t.Logf("this process chose %q (%s)", kind, how)
	c := newCPU(2)
	r := rng.New(9)
	const m, n, k = 24, 40, 96
	av, bv := make([]uint16, m*k), make([]uint16, k*n)
	for i := range av {
		av[i] = backend.F32ToBF16(float32(r.Norm()))
	}
	for i := range bv {
		bv[i] = backend.F32ToBF16(float32(r.Norm()))
	}
	as, bs := c.Alloc(backend.BF16, len(av)), c.Alloc(backend.BF16, len(bv))
	c.Upload(backend.Ref{S: as}, backend.AsBytes(av))
	c.Upload(backend.Ref{S: bs}, backend.AsBytes(bv))
	product := func() []float32 {
		cc := put(c, make([]float32, m*n), 0)
		c.MatMul(backend.MatMul{Batch: 1, M: m, N: n, K: k, StrideA: m * k, StrideB: k * n, StrideC: m * n, Alpha: 1},
			backend.Ref{S: as}, backend.Ref{S: bs}, cc, backend.Ref{})
		return get(c, cc, m*n)
	}
	// The widened product is the F32 product of the widened operands.
	if err := SetBF16Product(BF16ProductWiden); err != nil {
		t.Fatal(err)
	}
	if kind, how := BF16Product(); kind != BF16ProductWiden || how != "set" {
		t.Errorf("after setting widen: %q (%s)", kind, how)
	}
	wide := product()
	af, bf := put(c, widenBF16(av), 0), put(c, widenBF16(bv), 0)
	cf := put(c, make([]float32, m*n), 0)
	c.MatMul(backend.MatMul{Batch: 1, M: m, N: n, K: k, StrideA: m * k, StrideB: k * n, StrideC: m * n, Alpha: 1}, af, bf, cf, backend.Ref{})
	if got, want := wide, get(c, cf, m*n); !testenv.SameBits(got, want) {
		t.Error("the widened product differs from the F32 product of the widened operands")
	}
	if dotProduct.offered() {
		if err := SetBF16Product(BF16ProductDot); err != nil {
			t.Fatal(err)
		}
		if kind, _ := BF16Product(); kind != BF16ProductDot {
			t.Errorf("after setting dot: %q", kind)
		}
		if testenv.SameBits(product(), wide) {
			t.Error("the dot products gave the widened product's bits: the setting did not take")
		}
	} else {
		t.Log("this CPU has no AVX512-BF16: the dot products are checked only for their refusal")
	}
	restore := pretendState(dotProduct, "this CPU has no AVX512-BF16 (VDPBF16PS)")
	defer restore()
	if err := SetBF16Product(BF16ProductDot); err == nil || !strings.Contains(err.Error(), "AVX512-BF16") {
		t.Errorf("dot without AVX512-BF16: %v", err)
	}
	if err := SetBF16Product("tpu"); err == nil {
		t.Error("an unknown product was accepted")
	}
}

// widenBF16 widens bf16 values to float32 (exactly).
func widenBF16(v []uint16) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = backend.BF16ToF32(x)
	}
	return out
}

// bf16Ref64 is the float64 reference of one bf16 product: op(A)·op(B) +
// beta·C for bf16 A and B (exactly widened) and F32 C, M×N over K.
func bf16Ref64(a, b []uint16, c []float32, m, n, k int, ta, tb bool, beta float32) []float64 {
	a64, b64 := make([]float64, len(a)), make([]float64, len(b))
	for i, v := range a {
		a64[i] = float64(backend.BF16ToF32(v))
	}
	for i, v := range b {
		b64[i] = float64(backend.BF16ToF32(v))
	}
	out := widen(c)
	ref.MatMul(a64, b64, out, nil, m, n, k, ta, tb, 1, float64(beta))
	return out
}

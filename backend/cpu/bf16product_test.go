package cpu

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
	"golang.org/x/sys/cpu"
)

// pretendState gives a product a self-check state, as if it had been
// checked, and returns a function that restores the real one.
func pretendState(q *bf16Product, state string) (restore func()) {
	q.mu.Lock()
	checked, was := q.checked, q.state
	q.checked, q.state = true, state
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		q.checked, q.state = checked, was
		q.mu.Unlock()
	}
}

// TestBF16ProductsChecked: every product this CPU can run matches its
// portable twin bit for bit (the self-check), and the others say why they
// are not offered; BF16Product picks one that passed.
func TestBF16ProductsChecked(t *testing.T) {
	for _, s := range BF16Products() {
		t.Logf("%-5s %-40s %s", s.Name, s.What, s.State)
		if s.State != bf16Checked && (strings.HasPrefix(s.State, "mismatch") || s.Name == BF16ProductWiden ||
			s.Name == BF16ProductDot && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16) {
			t.Errorf("%s: %s", s.Name, s.State)
		}
	}
	kind, how := BF16Product()
	if q := bf16ProductNamed(kind); q == nil || !q.offered() {
		t.Errorf("this process runs %q (%s), which is not offered", kind, how)
	}
}

// TestBF16SelfCheckRefusesBroken: a product that is wrong in one element
// of one of the self-check's problems is refused, logged with the CPU's
// model, never chosen, and refused when a run names it.
func TestBF16SelfCheckRefusesBroken(t *testing.T) {
	broken := &bf16Product{name: "broken", what: "the widened product with one element off by an ulp",
		unavailable: func() string { return "" }, twin: widenTwin,
		run: func(c *CPU, p backend.MatMul, a, b, cc, bias backend.Ref) {
			c.matmulBF16Wide(p, a, b, cc, bias)
			if p.Batch == 2 {
				x := &f32(cc)[p.StrideC+7]
				*x = math.Nextafter32(*x, float32(math.Inf(1)))
			}
		}}
	var log bytes.Buffer
	defer func(qs []*bf16Product, w io.Writer, q *bf16Product, how string) {
		bf16Products, bf16Log, bf16Use, bf16How = qs, w, q, how
	}(bf16Products, bf16Log, bf16Use, bf16How)
	bf16Products, bf16Log = []*bf16Product{broken, widenProduct}, &log
	restore := pretendState(widenProduct, bf16Checked)
	defer restore()
	if broken.offered() {
		t.Fatal("a product off by an ulp in one element passed its self-check")
	}
	if st := broken.status(); !strings.HasPrefix(st, "mismatch: 1 of ") {
		t.Errorf("state %q", st)
	}
	if !strings.Contains(log.String(), `"broken" is not offered on this CPU (`+Model()+"): mismatch") {
		t.Errorf("log: %q", log.String())
	}
	t.Setenv("FLEET_CPU_BF16", "broken")
	chooseBF16()
	if bf16Use != widenProduct || !strings.Contains(bf16How, "FLEET_CPU_BF16=broken is not offered") {
		t.Errorf("chose %q (%s)", bf16Use.name, bf16How)
	}
	if err := SetBF16Product("broken"); err == nil || !strings.Contains(err.Error(), "mismatch") {
		t.Errorf("SetBF16Product(broken): %v", err)
	}
	for _, s := range BF16Products() {
		if s.Name == "broken" && !strings.HasPrefix(s.State, "mismatch") {
			t.Errorf("BF16Products: %+v", s)
		}
	}
}

// TestBF16ChooseTimes: with several products offered the choice is
// timed among them; with none, BF16Product says so.
func TestBF16ChooseTimes(t *testing.T) {
	defer func(qs []*bf16Product, q *bf16Product, how string) {
		bf16Products, bf16Use, bf16How = qs, q, how
	}(bf16Products, bf16Use, bf16How)
	t.Setenv("FLEET_CPU_BF16", "")
	defer func(s [3]int) { bf16TimeShape = s }(bf16TimeShape)
	bf16TimeShape = [3]int{64, 96, 64}
	bf16Products = []*bf16Product{dotProduct, widenProduct}
	r1, r2 := pretendState(dotProduct, bf16Checked), pretendState(widenProduct, bf16Checked)
	chooseBF16()
	if bf16Use == nil || bf16How != "timed: the fastest on this core" {
		t.Errorf("chose %v (%s)", bf16Use, bf16How)
	}
	t.Logf("timed: %s", bf16Use.name)
	r1()
	r2()
	restore := pretendState(widenProduct, "pretended broken")
	defer restore()
	bf16Products = []*bf16Product{widenProduct}
	chooseBF16()
	if bf16Use != nil || !strings.Contains(bf16How, "no bf16 product passed") {
		t.Errorf("with none offered: %v (%s)", bf16Use, bf16How)
	}
}

// TestBF16DotTwinDenormals holds the AVX512-BF16 kernel to the dot
// product's twin where sums and products fall below float32's normal
// range, so DAZ and FTZ decide the bits: the twin models them as the SDM
// describes VDPBF16PS. Without AVX512-BF16 it skips.
func TestBF16DotTwinDenormals(t *testing.T) {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BF16 {
		t.Skip("this CPU has no AVX512-BF16: nothing to hold the twin to")
	}
	r := rng.New(3)
	const kp = 37
	for _, exp := range [][2]int{{-70, 12}, {-66, 6}, {-130, 12}, {-20, 40}} {
		a, b := make([]uint32, kp*bf16MR), make([]uint32, kp*bf16NR)
		x := func() uint32 {
			v := float32(r.Norm()) * float32(math.Ldexp(1, exp[0]+int(r.Uint64()%uint64(exp[1]))))
			return uint32(backend.F32ToBF16(v))
		}
		for i := range a {
			a[i] = x() | x()<<16
		}
		for i := range b {
			b[i] = x() | x()<<16
		}
		got, want := make([]float32, bf16MR*bf16NR), make([]float32, bf16MR*bf16NR)
		bf16Kernel(kp, a, b, got, bf16NR, false)
		bf16KernelGo(kp, a, b, want, bf16NR, false)
		zeros := 0
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("exponents %v: C[%d] = %g (%#x), twin %g (%#x)", exp, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			if want[i] == 0 {
				zeros++
			}
		}
		t.Logf("exponents from %d: %d of %d results flushed to zero", exp[0], zeros, len(want))
	}
}

// TestAMXTwin holds the AMX product's driver, with the portable kernel, to
// its element-by-element twin bit for bit, and both to the float64
// product, on shapes that no tile fits (ragged rows, columns and
// k-chunks, odd K, transposes, batches, beta, bias). It runs everywhere;
// TestAMXProduct holds the assembly to the same twin where there is AMX.
func TestAMXTwin(t *testing.T) {
	defer func(k amxKernelFunc) { amxKernel = k }(amxKernel)
	amxKernel = amxKernelGo
	checkAMX(t, "amx/go")
}

// TestAMXProduct holds the AMX assembly to its twin (see TestAMXTwin).
// Where the CPU or the OS has no AMX it skips, saying why.
func TestAMXProduct(t *testing.T) {
	if !amxProduct.offered() {
		t.Skipf("the AMX product is not offered here: %s", amxProduct.status())
	}
	checkAMX(t, "amx/asm")
}

func checkAMX(t *testing.T, name string) {
	c := newCPU(2)
	r := rng.New(37)
	for _, tc := range []struct {
		batch, m, n, k int
		ta, tb, bias   bool
		beta           float32
	}{
		{1, 32, 32, 32, false, false, false, 0},
		{1, 1, 1, 1, false, false, false, 0},
		{1, 67, 70, 33, false, false, true, 0},
		{2, 19, 45, 7, true, false, false, 1},
		{1, 64, 300, 130, false, true, false, 0.5},
		{1, 9, 33, 301, true, true, true, 0},
		{2, 130, 40, 64, false, true, false, 1},
		{1, 100, 257, 95, true, false, true, 0},
	} {
		if testing.Short() && tc.m*tc.n*tc.k > 1e6 {
			continue // the twin is slow under emulation
		}
		na, nb, nc := tc.m*tc.k, tc.k*tc.n, tc.m*tc.n
		p := backend.MatMul{Batch: tc.batch, M: tc.m, N: tc.n, K: tc.k, TransA: tc.ta, TransB: tc.tb,
			StrideA: na, StrideB: nb, StrideC: nc, Alpha: 1, Beta: tc.beta}
		av, bv := make([]uint16, tc.batch*na), make([]uint16, tc.batch*nb)
		for i := range av {
			av[i] = backend.F32ToBF16(float32(r.Norm()))
		}
		for i := range bv {
			bv[i] = backend.F32ToBF16(float32(r.Norm()))
		}
		cv := randF32(r, tc.batch*nc, 1)
		var bias []float32
		var biasRef backend.Ref
		if tc.bias {
			bias = randF32(r, tc.n, 1)
			biasRef = put(c, bias, 0)
		}
		as, bs := c.Alloc(backend.BF16, len(av)), c.Alloc(backend.BF16, len(bv))
		c.Upload(backend.Ref{S: as}, backend.AsBytes(av))
		c.Upload(backend.Ref{S: bs}, backend.AsBytes(bv))
		cc := put(c, cv, 0)
		c.matmulAMX(p, backend.Ref{S: as}, backend.Ref{S: bs}, cc, biasRef)
		got := get(c, cc, len(cv))
		want := append([]float32(nil), cv...)
		amxTwin(p, av, bv, want, bias)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s %+v: C[%d] = %v, twin %v", name, tc, i, got[i], want[i])
			}
		}
		for bi := 0; bi < tc.batch; bi++ {
			ref64 := bf16Ref64(av[bi*na:(bi+1)*na], bv[bi*nb:(bi+1)*nb], cv[bi*nc:(bi+1)*nc], tc.m, tc.n, tc.k, tc.ta, tc.tb, tc.beta)
			for i := range ref64 {
				if bias != nil {
					ref64[i] += float64(bias[i%tc.n])
				}
				if d := math.Abs(float64(got[bi*nc+i]) - ref64[i]); d > 1e-6*float64(tc.k)+1e-5*math.Abs(ref64[i]) {
					t.Fatalf("%s %+v: C[%d][%d] = %v, float64 %v", name, tc, bi, i, got[bi*nc+i], ref64[i])
				}
			}
		}
	}
}

// TestBF16ProductIntoBF16C: a product into BF16 C (bf16 activations), with
// a BF16 bias, gives the bits of the product into F32 C rounded after it,
// for every product (the dot and AMX products round each tile of C as they
// finish it; the widened one rounds an F32 copy), with beta 0, 1 and 0.5,
// K = 0, and a batch whose items leave gaps in C, which stay as they were.
func TestBF16ProductIntoBF16C(t *testing.T) {
	defer func(q *bf16Product, ak amxKernelFunc) { bf16Use, amxKernel = q, ak }(bf16Use, amxKernel)
	bf16Chosen.Do(chooseBF16)
	if !amxProduct.offered() {
		amxKernel = amxKernelGo
	}
	c := newCPU(2)
	r := rng.New(12)
	bf := func(n int) ([]uint16, backend.Ref) {
		h := make([]uint16, n)
		for i := range h {
			h[i] = backend.F32ToBF16(float32(r.Norm()))
		}
		s := c.Alloc(backend.BF16, max(n, 1))
		c.Upload(backend.Ref{S: s}, backend.AsBytes(h))
		return h, backend.Ref{S: s}
	}
	for _, q := range []*bf16Product{widenProduct, dotProduct, amxProduct} {
		bf16Use = q
		for _, tc := range []struct {
			batch, m, n, k, gap int
			ta, tb              bool
			beta                float32
		}{
			{1, 70, 300, 130, 0, false, false, 0},
			{2, 33, 65, 40, 7, true, false, 1},
			{1, 64, 256, 64, 0, false, true, 0.5},
			{1, 9, 40, 0, 0, false, false, 0.5},
		} {
			if testing.Short() && tc.m*tc.n*tc.k > 1e6 {
				continue // slow under emulation, where the dot product is Go
			}
			nc := tc.m*tc.n + tc.gap
			p := backend.MatMul{Batch: tc.batch, M: tc.m, N: tc.n, K: tc.k, TransA: tc.ta, TransB: tc.tb,
				StrideA: tc.m * tc.k, StrideB: tc.k * tc.n, StrideC: nc, Alpha: 1, Beta: tc.beta}
			_, a := bf(tc.batch * tc.m * tc.k)
			_, b := bf(tc.batch * tc.k * tc.n)
			biasH, bias := bf(tc.n)
			c0, c16 := bf(tc.batch * nc)
			c.MatMul(p, a, b, c16, bias)
			got := make([]uint16, len(c0))
			c.Download(backend.AsBytes(got), c16)

			c32 := put(c, widenBF16(c0), 0)
			c.MatMul(p, a, b, c32, put(c, widenBF16(biasH), 0))
			want := get(c, c32, len(c0))
			for i := range want {
				w := backend.F32ToBF16(want[i])
				if i%nc >= tc.m*tc.n {
					w = c0[i] // a gap
				}
				if got[i] != w {
					t.Fatalf("%s %+v: C[%d] = %#x, want %#x", q.name, tc, i, got[i], w)
				}
			}
		}
	}
}

// BenchmarkMatMulBF16C times products into BF16 C (bf16 activations) of
// the reference configuration's shapes with this process's product, its
// tiles rounded into C as they finish ("tiles") and through an F32 copy of
// C rounded afterwards ("copy"), alternated within one run.
func BenchmarkMatMulBF16C(b *testing.B) {
	bf16Chosen.Do(chooseBF16)
	q := bf16Use
	if q == nil || !q.bf16C {
		b.Skip("this process's bf16 product does not write BF16 C itself")
	}
	defer func(v bool) { q.bf16C = v }(q.bf16C)
	c := benchCPU()
	r := rng.New(1)
	bf := func(n int) backend.Ref {
		h := make([]uint16, n)
		for i := range h {
			h[i] = backend.F32ToBF16(float32(r.Norm()))
		}
		s := c.Alloc(backend.BF16, n)
		c.Upload(backend.Ref{S: s}, backend.AsBytes(h))
		return backend.Ref{S: s}
	}
	for _, sh := range [][3]int{{768, 128, 384}, {768, 128, 512}, {768, 512, 128}, {1024, 384, 1536}} {
		m, k, n := sh[0], sh[1], sh[2]
		p := backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1}
		a, bb, cc, bias := bf(m*k), bf(k*n), bf(m*n), bf(n)
		for _, tiles := range []bool{true, false} {
			name := fmt.Sprintf("%dx%dx%d/copy", m, k, n)
			if tiles {
				name = fmt.Sprintf("%dx%dx%d/tiles", m, k, n)
			}
			b.Run(name, func(b *testing.B) {
				q.bf16C = tiles
				c.MatMul(p, a, bb, cc, bias)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					c.MatMul(p, a, bb, cc, bias)
				}
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

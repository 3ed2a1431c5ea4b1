package cpu

import (
	"sync"

	"github.com/fleetml/fleet/backend"
)

// Blocking for the packed matrix product. A task owns one mc×nc tile of C
// and walks K in kc-deep panels. A is packed into row strips of mr rows and
// B into column strips of nr columns, each strip k-major, so the
// micro-kernel reads both operands sequentially and keeps its mr×nr block of
// C in registers for the whole panel. The packed B panel (kc×nc floats,
// 256 KB) stays in L2, one B strip and the A block in L1/L2.
const (
	gemmMC = 64
	gemmNC = 256
	gemmKC = 256
	// maxMR and maxNR bound every micro-kernel's block (for scratch space).
	maxMR = 8
	maxNR = 32
)

// microKernel adds one mr×nr block of op(A)@op(B) over a kc-deep panel,
// from packed strips a (kc×mr) and b (kc×nr), into c (row stride ldc). It
// always writes the full block; MatMul routes edge blocks through scratch.
type microKernel struct {
	name   string
	mr, nr int
	fn     func(kc int, a, b, c []float32, ldc int)
}

// gemm is the micro-kernel MatMul uses: the fastest one the CPU supports
// (see gemm_amd64.go), else the portable Go one. Tests swap it.
var gemm = goKernel

// goKernel is the portable micro-kernel.
var goKernel = microKernel{name: "go", mr: 4, nr: 16, fn: gemmKernelGo}

// gemmKernels lists the micro-kernels this CPU can run, fastest first.
func gemmKernels() []microKernel { return append(simdKernels(), goKernel) }

// gemmKernelGo computes a 4×16 block one row at a time, accumulating in a
// local array.
func gemmKernelGo(kc int, a, b, c []float32, ldc int) {
	const mr, nr = 4, 16
	a = a[:kc*mr]
	b = b[:kc*nr]
	for r := 0; r < mr; r++ {
		var acc [nr]float32
		for k := 0; k < kc; k++ {
			x := a[k*mr+r]
			bk := (*[nr]float32)(b[k*nr : k*nr+nr])
			for j := range acc {
				acc[j] += x * bk[j]
			}
		}
		row := (*[nr]float32)(c[r*ldc : r*ldc+nr])
		for j := range acc {
			row[j] += acc[j]
		}
	}
}

// mat is an operand as the packing routines read it: op(X)(i, j) is
// d[i*ld+j], or d[j*ld+i] when trans.
type mat struct {
	d     []float32
	ld    int
	trans bool
}

// gemmWork is one goroutine's packing space.
type gemmWork struct {
	a, b []float32
	edge [maxMR * maxNR]float32
}

var workPool = sync.Pool{New: func() any {
	return &gemmWork{a: make([]float32, (gemmMC+maxMR)*gemmKC), b: make([]float32, gemmKC*(gemmNC+maxNR))}
}}

// MatMul implements backend.Backend. Work is split into C tiles; each
// element of C is computed by one task with a fixed order over K, so the
// result does not depend on the thread count.
func (c *CPU) MatMul(p backend.MatMul, a, b, cc, bias backend.Ref) {
	A, B, C := f32(a), f32(b), f32(cc)
	var bs []float32
	if !bias.Nil() {
		bs = f32(bias)[:p.N]
	}
	lda, ldb := p.K, p.N
	if p.TransA {
		lda = p.M
	}
	if p.TransB {
		ldb = p.K
	}
	tm := (p.M + gemmMC - 1) / gemmMC
	tn := (p.N + gemmNC - 1) / gemmNC
	c.parallelFor(p.Batch*tm*tn, 1, func(lo, hi int) {
		w := workPool.Get().(*gemmWork)
		defer workPool.Put(w)
		for t := lo; t < hi; t++ {
			bi, r := t/(tm*tn), t%(tm*tn)
			i0, j0 := (r/tn)*gemmMC, (r%tn)*gemmNC
			w.tile(mat{A[bi*p.StrideA:], lda, p.TransA}, mat{B[bi*p.StrideB:], ldb, p.TransB},
				C[bi*p.StrideC:], p.N, p.K, i0, j0, min(gemmMC, p.M-i0), min(gemmNC, p.N-j0), p.Alpha, p.Beta, bs)
		}
	})
}

// gemmSerial computes C = alpha*op(A)@op(B) + beta*C for an m×n C with
// row stride ldc, on the calling goroutine. Fused kernels (attention) use
// it on their own slices.
func (w *gemmWork) gemmSerial(A, B mat, C []float32, ldc, m, n, k int, alpha, beta float32) {
	for i0 := 0; i0 < m; i0 += gemmMC {
		for j0 := 0; j0 < n; j0 += gemmNC {
			w.tile(A, B, C, ldc, k, i0, j0, min(gemmMC, m-i0), min(gemmNC, n-j0), alpha, beta, nil)
		}
	}
}

// tile computes rows [i0, i0+mr) and columns [j0, j0+nr) of
// C = alpha*op(A)@op(B) + beta*C (+ bias[j]).
func (w *gemmWork) tile(A, B mat, C []float32, ldc, K, i0, j0, mr, nr int, alpha, beta float32, bias []float32) {
	mk := gemm
	ct := C[i0*ldc+j0:]
	for i := 0; i < mr; i++ {
		row := ct[i*ldc : i*ldc+nr]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
	for k0 := 0; k0 < K; k0 += gemmKC {
		kr := min(gemmKC, K-k0)
		packA(w.a, A, alpha, i0, k0, mr, kr, mk.mr)
		packB(w.b, B, k0, j0, kr, nr, mk.nr)
		for jb := 0; jb < nr; jb += mk.nr {
			bs := w.b[jb*kr : (jb+mk.nr)*kr]
			cols := min(mk.nr, nr-jb)
			for ib := 0; ib < mr; ib += mk.mr {
				as := w.a[ib*kr : (ib+mk.mr)*kr]
				rows := min(mk.mr, mr-ib)
				if rows == mk.mr && cols == mk.nr {
					mk.fn(kr, as, bs, ct[ib*ldc+jb:], ldc)
					continue
				}
				// Edge block: compute in scratch, add the valid part.
				e := w.edge[:mk.mr*mk.nr]
				clear(e)
				mk.fn(kr, as, bs, e, mk.nr)
				for i := 0; i < rows; i++ {
					axpy(ct[(ib+i)*ldc+jb:(ib+i)*ldc+jb+cols], e[i*mk.nr:i*mk.nr+cols], 1)
				}
			}
		}
	}
	if bias != nil {
		for i := 0; i < mr; i++ {
			row := ct[i*ldc : i*ldc+nr]
			for j := range row {
				row[j] += bias[j0+j]
			}
		}
	}
}

// packA copies alpha * op(A)[i0:i0+mr, k0:k0+kr] into strips of MR rows:
// element (i, k) goes to dst[(i/MR)*kr*MR + k*MR + i%MR]. Rows past mr are
// zero.
func packA(dst []float32, A mat, alpha float32, i0, k0, mr, kr, MR int) {
	for ib := 0; ib < mr; ib += MR {
		strip := dst[ib*kr : (ib+MR)*kr]
		for r := 0; r < MR; r++ {
			i := ib + r
			if i >= mr {
				for k := 0; k < kr; k++ {
					strip[k*MR+r] = 0
				}
				continue
			}
			if !A.trans {
				src := A.d[(i0+i)*A.ld+k0 : (i0+i)*A.ld+k0+kr]
				for k, v := range src {
					strip[k*MR+r] = alpha * v
				}
			} else {
				for k := 0; k < kr; k++ {
					strip[k*MR+r] = alpha * A.d[(k0+k)*A.ld+i0+i]
				}
			}
		}
	}
}

// packB copies op(B)[k0:k0+kr, j0:j0+nr] into strips of NR columns:
// element (k, j) goes to dst[(j/NR)*kr*NR + k*NR + j%NR]. Columns past nr
// are zero.
func packB(dst []float32, B mat, k0, j0, kr, nr, NR int) {
	for jb := 0; jb < nr; jb += NR {
		strip := dst[jb*kr : (jb+NR)*kr]
		w := min(NR, nr-jb)
		if !B.trans {
			for k := 0; k < kr; k++ {
				src := B.d[(k0+k)*B.ld+j0+jb : (k0+k)*B.ld+j0+jb+w]
				d := strip[k*NR : k*NR+NR]
				copy(d, src)
				clear(d[w:])
			}
			continue
		}
		for c := 0; c < NR; c++ {
			if c >= w {
				for k := 0; k < kr; k++ {
					strip[k*NR+c] = 0
				}
				continue
			}
			src := B.d[(j0+jb+c)*B.ld+k0 : (j0+jb+c)*B.ld+k0+kr]
			for k, v := range src {
				strip[k*NR+c] = v
			}
		}
	}
}

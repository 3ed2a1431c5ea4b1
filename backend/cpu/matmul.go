package cpu

import (
	"sync"

	"github.com/fleetml/fleet/backend"
)

// Blocking for the packed matrix product. A task owns one mc×nc tile of C
// and walks K in kc-deep panels: the packed B panel (kc×nc floats, 512 KB)
// stays in L2, four rows of the C tile plus one row of B stay in L1.
const (
	gemmMC = 64
	gemmNC = 512
	gemmKC = 256
)

// gemmKernel multiplies a packed mr×kc block of A (row-major, alpha
// applied) by a packed kc×nc panel of B (row-major) and adds the result
// into C rows c[i*ldc : i*ldc+nc]. It is a variable so a SIMD version can
// replace it.
var gemmKernel = gemmKernelGo

func gemmKernelGo(ap []float32, mr, kc int, bp []float32, nc int, c []float32, ldc int) {
	i := 0
	for ; i+4 <= mr; i += 4 {
		c0 := c[i*ldc : i*ldc+nc]
		c1 := c[(i+1)*ldc : (i+1)*ldc+nc]
		c2 := c[(i+2)*ldc : (i+2)*ldc+nc]
		c3 := c[(i+3)*ldc : (i+3)*ldc+nc]
		a0, a1, a2, a3 := ap[i*kc:(i+1)*kc], ap[(i+1)*kc:(i+2)*kc], ap[(i+2)*kc:(i+3)*kc], ap[(i+3)*kc:(i+4)*kc]
		for k := 0; k < kc; k++ {
			x0, x1, x2, x3 := a0[k], a1[k], a2[k], a3[k]
			b := bp[k*nc : k*nc+nc]
			b = b[:len(c0)]
			c1 := c1[:len(c0)]
			c2 := c2[:len(c0)]
			c3 := c3[:len(c0)]
			for j, bv := range b {
				c0[j] += x0 * bv
				c1[j] += x1 * bv
				c2[j] += x2 * bv
				c3[j] += x3 * bv
			}
		}
	}
	for ; i < mr; i++ {
		ci := c[i*ldc : i*ldc+nc]
		ai := ap[i*kc : (i+1)*kc]
		for k := 0; k < kc; k++ {
			axpy(ci, bp[k*nc:k*nc+nc], ai[k])
		}
	}
}

var packPool = sync.Pool{New: func() any {
	s := make([]float32, gemmMC*gemmKC+gemmKC*gemmNC)
	return &s
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
	tm := (p.M + gemmMC - 1) / gemmMC
	tn := (p.N + gemmNC - 1) / gemmNC
	tasks := p.Batch * tm * tn
	c.parallelFor(tasks, 1, func(lo, hi int) {
		bufp := packPool.Get().(*[]float32)
		defer packPool.Put(bufp)
		buf := *bufp
		ap, bp := buf[:gemmMC*gemmKC], buf[gemmMC*gemmKC:]
		for t := lo; t < hi; t++ {
			bi, r := t/(tm*tn), t%(tm*tn)
			i0, j0 := (r/tn)*gemmMC, (r%tn)*gemmNC
			mr, nr := min(gemmMC, p.M-i0), min(gemmNC, p.N-j0)
			Ab, Bb, Cb := A[bi*p.StrideA:], B[bi*p.StrideB:], C[bi*p.StrideC:]
			ct := Cb[i0*p.N+j0:]
			for i := 0; i < mr; i++ {
				row := ct[i*p.N : i*p.N+nr]
				switch p.Beta {
				case 0:
					clear(row)
				case 1:
				default:
					for j := range row {
						row[j] *= p.Beta
					}
				}
			}
			for k0 := 0; k0 < p.K; k0 += gemmKC {
				kr := min(gemmKC, p.K-k0)
				packA(ap, Ab, p, i0, k0, mr, kr)
				packB(bp, Bb, p, k0, j0, kr, nr)
				gemmKernel(ap, mr, kr, bp, nr, ct, p.N)
			}
			if bs != nil {
				for i := 0; i < mr; i++ {
					row := ct[i*p.N : i*p.N+nr]
					for j := range row {
						row[j] += bs[j0+j]
					}
				}
			}
		}
	})
}

// packA copies alpha * op(A)[i0:i0+mr, k0:k0+kr] into dst, row-major with
// row stride kr.
func packA(dst, A []float32, p backend.MatMul, i0, k0, mr, kr int) {
	for i := 0; i < mr; i++ {
		d := dst[i*kr : (i+1)*kr]
		if !p.TransA { // A is M×K
			src := A[(i0+i)*p.K+k0 : (i0+i)*p.K+k0+kr]
			for k, v := range src {
				d[k] = p.Alpha * v
			}
		} else { // A is stored K×M
			for k := range d {
				d[k] = p.Alpha * A[(k0+k)*p.M+i0+i]
			}
		}
	}
}

// packB copies op(B)[k0:k0+kr, j0:j0+nr] into dst, row-major with row
// stride nr.
func packB(dst, B []float32, p backend.MatMul, k0, j0, kr, nr int) {
	if !p.TransB { // B is K×N
		for k := 0; k < kr; k++ {
			copy(dst[k*nr:(k+1)*nr], B[(k0+k)*p.N+j0:(k0+k)*p.N+j0+nr])
		}
		return
	}
	// B is stored N×K: read each row of the stored matrix once.
	for j := 0; j < nr; j++ {
		src := B[(j0+j)*p.K+k0 : (j0+j)*p.K+k0+kr]
		for k, v := range src {
			dst[k*nr+j] = v
		}
	}
}

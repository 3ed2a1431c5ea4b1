package cpu

import (
	"sync"

	"github.com/fleetml/fleet/backend"
)

// Blocking for the packed matrix product. A task owns one mc×nc tile of C
// and walks K in kc-deep panels. A is packed into row strips of gemmMR rows
// and B into column strips of gemmNR columns, each strip k-major, so the
// micro-kernel reads both operands sequentially and keeps its gemmMR×gemmNR
// block of C in registers for the whole panel.
const (
	gemmMC = 64
	gemmNC = 256
	gemmKC = 256
	gemmMR = 4
	gemmNR = 16
)

// gemmKernel adds one gemmMR×gemmNR block of op(A)@op(B) over a kc-deep
// panel, from packed strips a (kc×gemmMR) and b (kc×gemmNR), into c (row
// stride ldc). It always writes the full block; MatMul routes edge blocks
// through a scratch block. It is a variable so SIMD versions (gemm_amd64.s)
// replace it where the CPU has them.
var gemmKernel = gemmKernelGo

// gemmKernelGo is the portable micro-kernel: one row of the block at a
// time, accumulated in a local array.
func gemmKernelGo(kc int, a, b, c []float32, ldc int) {
	a = a[:kc*gemmMR]
	b = b[:kc*gemmNR]
	for r := 0; r < gemmMR; r++ {
		var acc [gemmNR]float32
		for k := 0; k < kc; k++ {
			x := a[k*gemmMR+r]
			bk := (*[gemmNR]float32)(b[k*gemmNR : k*gemmNR+gemmNR])
			for j := range acc {
				acc[j] += x * bk[j]
			}
		}
		row := (*[gemmNR]float32)(c[r*ldc : r*ldc+gemmNR])
		for j := range acc {
			row[j] += acc[j]
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
		var edge [gemmMR * gemmNR]float32
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
				for jb := 0; jb < nr; jb += gemmNR {
					bs := bp[jb*kr : (jb+gemmNR)*kr]
					cols := min(gemmNR, nr-jb)
					for ib := 0; ib < mr; ib += gemmMR {
						as := ap[ib*kr : (ib+gemmMR)*kr]
						rows := min(gemmMR, mr-ib)
						if rows == gemmMR && cols == gemmNR {
							gemmKernel(kr, as, bs, ct[ib*p.N+jb:], p.N)
							continue
						}
						// Edge block: compute in scratch, add the valid part.
						clear(edge[:])
						gemmKernel(kr, as, bs, edge[:], gemmNR)
						for i := 0; i < rows; i++ {
							axpy(ct[(ib+i)*p.N+jb:(ib+i)*p.N+jb+cols], edge[i*gemmNR:i*gemmNR+cols], 1)
						}
					}
				}
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

// packA copies alpha * op(A)[i0:i0+mr, k0:k0+kr] into strips of gemmMR
// rows: element (i, k) goes to dst[(i/MR)*kr*MR + k*MR + i%MR]. Rows past
// mr are zero.
func packA(dst, A []float32, p backend.MatMul, i0, k0, mr, kr int) {
	for ib := 0; ib < mr; ib += gemmMR {
		strip := dst[ib*kr : (ib+gemmMR)*kr]
		for r := 0; r < gemmMR; r++ {
			i := ib + r
			if i >= mr {
				for k := 0; k < kr; k++ {
					strip[k*gemmMR+r] = 0
				}
				continue
			}
			if !p.TransA { // A is M×K
				src := A[(i0+i)*p.K+k0 : (i0+i)*p.K+k0+kr]
				for k, v := range src {
					strip[k*gemmMR+r] = p.Alpha * v
				}
			} else { // A is stored K×M
				for k := 0; k < kr; k++ {
					strip[k*gemmMR+r] = p.Alpha * A[(k0+k)*p.M+i0+i]
				}
			}
		}
	}
}

// packB copies op(B)[k0:k0+kr, j0:j0+nr] into strips of gemmNR columns:
// element (k, j) goes to dst[(j/NR)*kr*NR + k*NR + j%NR]. Columns past nr
// are zero.
func packB(dst, B []float32, p backend.MatMul, k0, j0, kr, nr int) {
	for jb := 0; jb < nr; jb += gemmNR {
		strip := dst[jb*kr : (jb+gemmNR)*kr]
		w := min(gemmNR, nr-jb)
		if !p.TransB { // B is K×N
			for k := 0; k < kr; k++ {
				src := B[(k0+k)*p.N+j0+jb : (k0+k)*p.N+j0+jb+w]
				d := strip[k*gemmNR : k*gemmNR+gemmNR]
				copy(d, src)
				clear(d[w:])
			}
			continue
		}
		// B is stored N×K.
		for c := 0; c < gemmNR; c++ {
			if c >= w {
				for k := 0; k < kr; k++ {
					strip[k*gemmNR+c] = 0
				}
				continue
			}
			src := B[(j0+jb+c)*p.K+k0 : (j0+jb+c)*p.K+k0+kr]
			for k, v := range src {
				strip[k*gemmNR+c] = v
			}
		}
	}
}

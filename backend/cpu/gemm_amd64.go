package cpu

import "golang.org/x/sys/cpu"

func init() {
	if k := simdKernels(); len(k) > 0 {
		gemm = k[0]
	}
}

// simdKernels lists the SIMD micro-kernels this CPU supports, fastest first.
func simdKernels() []microKernel {
	var ks []microKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, microKernel{name: "avx512", mr: 8, nr: 32, fn: func(kc int, a, b, c []float32, ldc int, add bool) {
			_, _, _ = a[kc*8-1], b[kc*32-1], c[7*ldc+31]
			gemmKernelAVX512(kc, &a[0], 8, &b[0], &c[0], ldc, add)
		}, transposed: func(kc int, a []float32, lda int, b, c []float32, ldc int, add bool) {
			_, _, _ = a[(kc-1)*lda+7], b[kc*32-1], c[7*ldc+31]
			gemmKernelAVX512(kc, &a[0], lda, &b[0], &c[0], ldc, add)
		}, strided: func(kc int, a []float32, lda int, b, c []float32, ldc int, add bool) {
			_, _, _ = a[7*lda+kc-1], b[kc*32-1], c[7*ldc+31]
			gemmKernelAVX512Strided(kc, &a[0], lda, &b[0], &c[0], ldc, add)
		}})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, microKernel{name: "avx2", mr: 4, nr: 16, fn: func(kc int, a, b, c []float32, ldc int, add bool) {
			_, _, _ = a[kc*4-1], b[kc*16-1], c[3*ldc+15]
			gemmKernelAVX2(kc, &a[0], &b[0], &c[0], ldc, add)
		}})
	}
	return ks
}

// gemmKernelAVX2 keeps a 4×16 block in eight YMM accumulators; each k step
// loads 16 floats of B, broadcasts 4 of A and issues 8 FMAs.
//
//go:noescape
func gemmKernelAVX2(kc int, a, b, c *float32, ldc int, add bool)

// gemmKernelAVX512 keeps an 8×32 block in sixteen ZMM accumulators; each k
// step loads 32 floats of B, broadcasts 8 of A (contiguous, ask floats
// apart from one k to the next) and issues 16 FMAs.
//
//go:noescape
func gemmKernelAVX512(kc int, a *float32, ask int, b, c *float32, ldc int, add bool)

// gemmKernelAVX512Strided is gemmKernelAVX512 reading A in place, row r at
// a[r*lda:].
//
//go:noescape
func gemmKernelAVX512Strided(kc int, a *float32, lda int, b, c *float32, ldc int, add bool)

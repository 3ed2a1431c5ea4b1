package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

func init() {
	if k := simdKernels(); len(k) > 0 {
		gemm = k[0]
	}
	if cpu.X86.HasAVX2 {
		// An 8×8 transpose of 32-bit elements: the bf16 packing's, which
		// moves pairs of bf16 as one 32-bit element, moving floats.
		transpose8 = func(dst []float32, dstK int, src []float32, ld, n int) int {
			blocks := n / 8
			if blocks > 0 {
				_, _ = dst[(8*blocks-1)*dstK+7], src[7*ld+8*blocks-1]
				transposePairs8AVX2((*uint32)(unsafe.Pointer(&dst[0])), dstK, (*uint16)(unsafe.Pointer(&src[0])), 2*ld, blocks)
			}
			return 8 * blocks
		}
	}
}

// simdKernels lists the SIMD micro-kernels this CPU supports, fastest first.
func simdKernels() []microKernel {
	var ks []microKernel
	if cpu.X86.HasAVX512F {
		ext := func(kc int, a []float32, lda int, rowA bool, b []float32, ldb int, c []float32, ldc int, add bool) {
			_, _ = b[(kc-1)*ldb+31], c[7*ldc+31]
			if rowA {
				_ = a[7*lda+kc-1]
				gemmKernelAVX512Strided(kc, &a[0], lda, &b[0], ldb, &c[0], ldc, add)
				return
			}
			_ = a[(kc-1)*lda+7]
			gemmKernelAVX512(kc, &a[0], lda, &b[0], ldb, &c[0], ldc, add)
		}
		ks = append(ks, microKernel{name: "avx512", mr: 8, nr: 32, ext: ext,
			fn: func(kc int, a, b, c []float32, ldc int, add bool) { ext(kc, a, 8, false, b, 32, c, ldc, add) }})
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

// The AVX-512 kernels are in gemm512_amd64.s, written by
// scripts/gen_cpu_asm.py; the AVX2 kernel is in gemm_amd64.s.
//
// gemmKernelAVX512 keeps an 8×32 block in sixteen ZMM accumulators; each k
// step loads 32 floats of B (bsk floats after the previous step's),
// broadcasts 8 of A (contiguous, ask floats after the previous step's) and
// issues 16 FMAs.
//
//go:noescape
func gemmKernelAVX512(kc int, a *float32, ask int, b *float32, bsk int, c *float32, ldc int, add bool)

// gemmKernelAVX512Strided is gemmKernelAVX512 for a row-major A read in
// place, row r at a[r*lda:].
//
//go:noescape
func gemmKernelAVX512Strided(kc int, a *float32, lda int, b *float32, bsk int, c *float32, ldc int, add bool)

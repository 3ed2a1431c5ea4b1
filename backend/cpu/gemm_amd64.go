package cpu

import "golang.org/x/sys/cpu"

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		gemmKernel = gemmKernelAVX2Slices
	}
}

// gemmKernelAVX2 is gemmKernel for AVX2 with FMA: the 4×16 block lives in
// eight YMM accumulators; each k step loads 16 floats of B, broadcasts 4 of
// A and issues 8 FMAs. Implemented in gemm_amd64.s.
//
//go:noescape
func gemmKernelAVX2(kc int, a, b, c *float32, ldc int)

func gemmKernelAVX2Slices(kc int, a, b, c []float32, ldc int) {
	_ = a[kc*gemmMR-1]
	_ = b[kc*gemmNR-1]
	_ = c[(gemmMR-1)*ldc+gemmNR-1]
	gemmKernelAVX2(kc, &a[0], &b[0], &c[0], ldc)
}

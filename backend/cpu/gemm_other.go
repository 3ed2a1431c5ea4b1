//go:build !amd64

package cpu

// simdKernels: no assembly micro-kernels on this architecture yet.
func simdKernels() []microKernel { return nil }

package cpu

import "golang.org/x/sys/cpu"

func init() {
	if !cpu.X86.HasAVX2 {
		return
	}
	binaryChunk = func(op int, d, x, y []float32) {
		n := len(d) &^ 15
		if n > 0 {
			_, _ = x[n-1], y[n-1]
			binaryAVX2(op, &d[0], &x[0], &y[0], n)
		}
		binaryGo(op, d[n:], x[n:], y[n:])
	}
	axpyChunk = func(d, s []float32, alpha float32) {
		n := len(d) &^ 15
		if n > 0 {
			_ = s[n-1]
			axpyAVX2(&d[0], &s[0], n, alpha)
		}
		axpyGo(d[n:], s[n:], alpha)
	}
	scaleChunk = func(d, s []float32, alpha float32) {
		n := len(d) &^ 15
		if n > 0 {
			_ = s[n-1]
			scaleAVX2(&d[0], &s[0], n, alpha)
		}
		scaleGo(d[n:], s[n:], alpha)
	}
}

// Implemented in elementwise_amd64.s; n must be a multiple of 16.
//
//go:noescape
func binaryAVX2(op int, d, x, y *float32, n int)

//go:noescape
func axpyAVX2(d, s *float32, n int, alpha float32)

//go:noescape
func scaleAVX2(d, s *float32, n int, alpha float32)

package cpu

import "golang.org/x/sys/cpu"

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		geluChunk = func(d, s []float32) {
			n := len(d) &^ 7
			if n > 0 {
				_ = s[n-1]
				geluAVX2(&d[0], &s[0], n)
			}
			geluGo(d[n:], s[n:])
		}
		geluBackwardChunk = func(dx, x, dy []float32) {
			n := len(dx) &^ 7
			if n > 0 {
				_, _ = x[n-1], dy[n-1]
				geluBackwardAVX2(&dx[0], &x[0], &dy[0], n)
			}
			geluBackwardGo(dx[n:], x[n:], dy[n:])
		}
		expChunk = func(d, s []float32) {
			n := len(d) &^ 7
			if n > 0 {
				_ = s[n-1]
				expAVX2(&d[0], &s[0], n)
			}
			expGo(d[n:], s[n:])
		}
	}
}

// Implemented in vexp_amd64.s; n must be a multiple of 8.
//
//go:noescape
func expAVX2(dst, src *float32, n int)

//go:noescape
func geluAVX2(dst, src *float32, n int)

//go:noescape
func geluBackwardAVX2(dx, x, dy *float32, n int)

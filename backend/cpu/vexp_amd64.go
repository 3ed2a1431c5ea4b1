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

// Implemented in vexp_amd64.s (written by scripts/gen_cpu_asm.py); n must
// be a multiple of 8.
//
//go:noescape
func expAVX2(dst, src *float32, n int)

//go:noescape
func geluAVX2(dst, src *float32, n int)

//go:noescape
func geluBackwardAVX2(dx, x, dy *float32, n int)

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		adamwChunk = func(w, g, m, v []float32, k *adamConsts) {
			n := len(w) &^ 7
			if n > 0 {
				_, _, _ = g[n-1], m[n-1], v[n-1]
				adamwAVX2(&w[0], &g[0], &m[0], &v[0], n, k)
			}
			adamwGo(w[n:], g[n:], m[n:], v[n:], k)
		}
	}
}

// adamwAVX2 is adamwGo eight floats at a time (adamw_amd64.s); n must be
// a multiple of 8.
//
//go:noescape
func adamwAVX2(w, grad, m, v *float32, n int, k *adamConsts)

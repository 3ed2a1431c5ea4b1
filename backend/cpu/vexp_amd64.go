package cpu

import "golang.org/x/sys/cpu"

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		// The last len%8 elements go through the same SIMD code, from a
		// padded copy: a causal softmax's rows have every length, and
		// Go's float64 exp on their tails cost three times the SIMD part.
		// Each closure is written out: calling the assembly through a
		// func value would let the padded copies escape to the heap.
		geluChunk = func(d, s []float32) {
			n := len(d) &^ 7
			if n > 0 {
				_ = s[n-1]
				geluAVX2(&d[0], &s[0], n)
			}
			if r := len(d) - n; r > 0 {
				var t [8]float32
				copy(t[:r], s[n:])
				geluAVX2(&t[0], &t[0], 8)
				copy(d[n:], t[:r])
			}
		}
		geluBackwardChunk = func(dx, x, dy []float32) {
			n := len(dx) &^ 7
			if n > 0 {
				_, _ = x[n-1], dy[n-1]
				geluBackwardAVX2(&dx[0], &x[0], &dy[0], n)
			}
			if r := len(dx) - n; r > 0 {
				var t, u [8]float32
				copy(t[:r], x[n:])
				copy(u[:r], dy[n:])
				geluBackwardAVX2(&u[0], &t[0], &u[0], 8)
				copy(dx[n:], u[:r])
			}
		}
		expChunk = func(d, s []float32) {
			n := len(d) &^ 7
			if n > 0 {
				_ = s[n-1]
				expAVX2(&d[0], &s[0], n)
			}
			if r := len(d) - n; r > 0 {
				var t [8]float32
				copy(t[:r], s[n:])
				expAVX2(&t[0], &t[0], 8)
				copy(d[n:], t[:r])
			}
		}
		expAffineChunk = func(d, s []float32, a, b float32) float32 {
			var lanes [8]float32
			n := len(d) &^ 7
			if n > 0 {
				_ = s[n-1]
				expAffineAVX2(&d[0], &s[0], n, a, b, &lanes[0])
			}
			sum := laneSum(&lanes)
			if r := len(d) - n; r > 0 {
				var t, junk [8]float32
				copy(t[:r], s[n:])
				expAffineAVX2(&t[0], &t[0], 8, a, b, &junk[0])
				copy(d[n:], t[:r])
				for _, v := range t[:r] {
					sum += v
				}
			}
			return sum
		}
	}
}

// Implemented in vexp_amd64.s (written by scripts/gen_cpu_asm.py); n must
// be a multiple of 8.
//
//go:noescape
func expAVX2(dst, src *float32, n int)

// expAffineAVX2 writes dst[i] = exp(a*src[i] - b) and adds element i into
// sums[i%8].
//
//go:noescape
func expAffineAVX2(dst, src *float32, n int, a, b float32, sums *float32)

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

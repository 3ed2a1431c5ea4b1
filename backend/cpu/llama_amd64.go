package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

func init() {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return
	}
	rmsForwardRow = func(or, xr, ws []float32, eps float32) float32 {
		n := len(xr)
		if n == 0 || n%8 != 0 {
			return rmsForwardRowGo(or, xr, ws, eps)
		}
		_, _ = or[n-1], ws[n-1]
		rsd := float32(1 / math.Sqrt(float64(lnSqDevAVX2(&xr[0], n, 0)/float32(n)+eps)))
		lnApplyAVX2(&or[0], &xr[0], &ws[0], nil, n, 0, rsd)
		return rsd
	}
	rmsBackwardRow = func(dr, xr, gr, ws, pw []float32, rsd float32) {
		n := len(xr)
		if n == 0 || n%8 != 0 {
			rmsBackwardRowGo(dr, xr, gr, ws, pw, rsd)
			return
		}
		_, _, _, _ = dr[n-1], gr[n-1], ws[n-1], pw[n-1]
		rmsBackRowAVX2(&dr[0], &xr[0], &gr[0], &ws[0], &pw[0], n, rsd, 1/float32(n))
	}
	rotate = func(o, x, cos, sin []float32, sign float32) {
		half := len(cos)
		if half == 0 || half%8 != 0 {
			rotateGo(o, x, cos, sin, sign)
			return
		}
		_, _, _ = o[2*half-1], x[2*half-1], sin[half-1]
		rotateAVX2(&o[0], &x[0], &cos[0], &sin[0], half, sign)
	}
}

// Implemented in llama_amd64.s; n and half must be multiples of 8.
//
//go:noescape
func rmsBackRowAVX2(dx, x, dy, w, pw *float32, n int, rsd, invN float32)

//go:noescape
func rotateAVX2(o, x, cos, sin *float32, half int, sign float32)

package cpu

import (
	"math"

	"golang.org/x/sys/cpu"
)

func init() {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		return
	}
	lnForwardRow = func(or, xr, ws, bs []float32, eps float32) (m, rsd float32) {
		n := len(xr)
		if n == 0 || n%8 != 0 {
			return lnForwardRowGo(or, xr, ws, bs, eps)
		}
		_, _ = or[n-1], ws[n-1]
		m = lnSumAVX2(&xr[0], n) / float32(n)
		rsd = float32(1 / math.Sqrt(float64(lnSqDevAVX2(&xr[0], n, m)/float32(n)+eps)))
		var b *float32
		if bs != nil {
			_ = bs[n-1]
			b = &bs[0]
		}
		lnApplyAVX2(&or[0], &xr[0], &ws[0], b, n, m, rsd)
		return m, rsd
	}
	lnBackwardRow = func(dr, xr, gr, ws, pw, pb []float32, m, rsd float32) {
		n := len(xr)
		if n == 0 || n%8 != 0 {
			lnBackwardRowGo(dr, xr, gr, ws, pw, pb, m, rsd)
			return
		}
		_, _, _, _, _ = dr[n-1], gr[n-1], ws[n-1], pw[n-1], pb[n-1]
		lnBackRowAVX2(&dr[0], &xr[0], &gr[0], &ws[0], &pw[0], &pb[0], n, m, rsd, 1/float32(n))
	}
}

// Implemented in layernorm_amd64.s; n must be a multiple of 8.
//
//go:noescape
func lnSumAVX2(x *float32, n int) float32

//go:noescape
func lnSqDevAVX2(x *float32, n int, m float32) float32

//go:noescape
func lnApplyAVX2(out, x, w, b *float32, n int, m, rsd float32)

//go:noescape
func lnBackRowAVX2(dx, x, dy, w, pw, pb *float32, n int, m, rsd, invN float32)

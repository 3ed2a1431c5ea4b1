package cpu

import (
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
)

// BenchmarkMicroKernel times each micro-kernel alone on packed data that
// stays in cache, against one thread's FMA peak.
func BenchmarkMicroKernel(b *testing.B) {
	peak, _ := PeakGFLOPs(1, 200*time.Millisecond)
	for _, mk := range gemmKernels() {
		b.Run(mk.name, func(b *testing.B) {
			const kc = 256
			a := make([]float32, kc*mk.mr)
			bb := make([]float32, kc*mk.nr)
			c := make([]float32, mk.mr*mk.nr)
			for i := range a {
				a[i] = 1e-3
			}
			for i := range bb {
				bb[i] = 1e-3
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mk.fn(kc, a, bb, c, mk.nr, true)
			}
			g := 2 * float64(kc*mk.mr*mk.nr) * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(g, "GFLOP/s")
			b.ReportMetric(100*g/peak, "%peak")
		})
	}
}

// BenchmarkSumSquares times the gradient clip's sum of squares over 10.7M
// floats (the 6L/384 model's gradients).
func BenchmarkSumSquares(b *testing.B) {
	c := New(backend.CPU)
	n := 10_700_000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%1000) * 1e-3
	}
	src := c.Alloc(backend.F32, n)
	c.Upload(backend.Ref{S: src}, backend.AsBytes(x))
	dst := c.Alloc(backend.F32, 1)
	b.SetBytes(int64(4 * n))
	for b.Loop() {
		c.SumSquares(backend.Ref{S: dst}, backend.Ref{S: src}, n, 0)
	}
}

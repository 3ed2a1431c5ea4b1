package cpu

import (
	"testing"
	"time"
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

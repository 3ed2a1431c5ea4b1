package cpu

import (
	"testing"
	"time"

	"golang.org/x/sys/cpu"
)

// BenchmarkBF16IssueRate times one thread's VDPBF16PS chains against its
// FMA chains, in FLOP/s: the measurement behind the choice between the
// dot-product and the widened BF16 product on Intel's and AMD's cores
// (the products themselves are timed when one is chosen: fastestBF16).
func BenchmarkBF16IssueRate(b *testing.B) {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BF16 {
		b.Skip("no AVX512-BF16")
	}
	bf16Chosen.Do(chooseBF16)
	const n = 1 << 20
	rate := func(loop func(int), flopPerIter float64) float64 {
		t := time.Now()
		loop(n)
		return flopPerIter * n / time.Since(t).Seconds() / 1e9
	}
	var dp, fma float64
	for i := 0; i < b.N; i++ {
		dp = max(dp, rate(dpbf16LoopAVX512, 12*64))
		fma = max(fma, rate(fmaLoopAVX512, 12*32))
	}
	b.ReportMetric(dp, "dp-GFLOP/s")
	b.ReportMetric(fma, "fma-GFLOP/s")
	b.ReportMetric(dp/fma, "dp/fma")
	b.Logf("VDPBF16PS %.1f GFLOP/s, FMA %.1f GFLOP/s; this process runs the %q product", dp, fma, bf16Use.name)
}

package cpu

import (
	"sync"
	"time"
)

// PeakGFLOPs measures the CPU's float32 FMA peak on threads goroutines:
// each runs a loop of 12 independent fused multiply-adds on the widest
// vectors the CPU has (fmaLoop) for about d, and the FLOPs of all of them
// are summed. It returns GFLOP/s and the vector width used, in floats.
func PeakGFLOPs(threads int, d time.Duration) (gflops float64, width int) {
	const chunk = 1 << 16 // iterations per call
	width = fmaWidth()
	var wg sync.WaitGroup
	counts := make([]int, threads)
	start := time.Now()
	for t := 0; t < threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			for time.Since(start) < d {
				fmaLoop(chunk)
				counts[t] += chunk
			}
		}(t)
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	total := 0
	for _, c := range counts {
		total += c
	}
	// 12 FMAs per iteration, width lanes each, 2 FLOPs per lane.
	return float64(total) * 12 * float64(width) * 2 / el / 1e9, width
}

var fmaSink float32

// fmaLoopGo is the portable peak loop: 12 independent scalar
// multiply-adds per iteration.
func fmaLoopGo(n int) {
	var a [12]float32
	for i := range a {
		a[i] = float32(i)
	}
	const x, y = 0.999, 0.001
	for i := 0; i < n; i++ {
		for j := range a {
			a[j] = a[j]*x + y
		}
	}
	fmaSink = a[0]
}

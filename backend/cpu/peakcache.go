package cpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// BestPeakGFLOPs is the CPU's FMA peak in GFLOP/s on GOMAXPROCS threads,
// what MFU on the CPU is measured against. A busy machine can only lower
// a measurement (and so inflate MFU), so the best figure ever measured for
// this CPU model and core count is kept in the user's cache folder: the
// first call uses it when there is one, and otherwise measures (the best of
// three 70 ms runs of PeakGFLOPs) and stores the result. RecordPeak adds
// other measurements, such as fleet bench's.
var BestPeakGFLOPs = sync.OnceValue(func() float64 {
	if g := cachedPeak(); g > 0 {
		return g
	}
	var best float64
	for range 3 {
		g, _ := PeakGFLOPs(runtime.GOMAXPROCS(0), 70*time.Millisecond)
		best = max(best, g)
	}
	return RecordPeak(best)
})

// RecordPeak stores a measured FMA peak (GFLOP/s, on GOMAXPROCS threads)
// in the cache if it beats the cached one, and returns the better of the
// two.
func RecordPeak(gflops float64) float64 {
	path, key := peakFile()
	if path == "" {
		return gflops
	}
	peaks := cachedPeaks(path)
	if peaks[key] >= gflops {
		return peaks[key]
	}
	peaks[key] = gflops
	if b, err := json.Marshal(peaks); err == nil && os.MkdirAll(filepath.Dir(path), 0o755) == nil {
		atomicfile.WriteFile(path, b) // best effort: a cache
	}
	return gflops
}

// Model is the CPU's model name from /proc/cpuinfo (the architecture's
// name where there is none).
func Model() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// peakFile is the cache of measured peaks and this machine's key in it.
func peakFile() (path, key string) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", ""
	}
	return filepath.Join(dir, "fleet", "cpu-peak.json"), fmt.Sprintf("%s|%d", Model(), runtime.GOMAXPROCS(0))
}

// cachedPeaks reads the cache of FMA peaks (an empty map without one).
func cachedPeaks(path string) map[string]float64 {
	peaks := map[string]float64{}
	if b, err := os.ReadFile(path); err == nil {
		json.Unmarshal(b, &peaks)
	}
	return peaks
}

func cachedPeak() float64 {
	path, key := peakFile()
	if path == "" {
		return 0
	}
	return cachedPeaks(path)[key]
}

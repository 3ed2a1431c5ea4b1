// Package units formats quantities for people: byte counts in binary
// units, the one way every fleet message and report writes them.
package units

import (
	"fmt"
	"math"
)

// Bytes writes a byte count in binary units: "512 B", "1.5 KiB",
// "70.3 GiB", and a whole number where it is within 0.1% of one ("64
// MiB", "1 GiB" for a working set of 12-byte elements that just misses
// it). Negative counts are written as 0 B.
func Bytes(n int64) string {
	if n < 0 {
		n = 0
	}
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 50, "PiB"}, {1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n < u.size*999/1000 {
			continue
		}
		f := float64(n) / float64(u.size)
		if r := math.Round(f); math.Abs(f-r) <= 0.001*r {
			return fmt.Sprintf("%.0f %s", r, u.name)
		}
		return fmt.Sprintf("%.1f %s", f, u.name)
	}
	return fmt.Sprintf("%d B", n)
}

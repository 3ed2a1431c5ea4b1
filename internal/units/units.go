// Package units formats quantities for people: byte counts in binary
// units, the one way every fleet message and report writes them; and it
// reads the sizes people write (ParseBytes).
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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

// ParseBytes reads a size in bytes with an optional unit: B, KB, MB, GB,
// TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); K, M, G, T
// alone are binary. Case does not matter.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	mult := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[strings.ToUpper(strings.TrimSpace(t[i:]))]
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || mult == 0 || v < 0 {
		return 0, fmt.Errorf("want a size such as 8GiB, 500MB or 1073741824, got %q", s)
	}
	return int64(v * mult), nil
}

// Package stats summarises measurements: the median the trainer and the
// benchmarks quote, since on shared, noisy machines a median is steadier
// than a mean.
package stats

import "slices"

// Median is the middle of v (the mean of the two middle values for an
// even count), 0 for none. v is left as it is.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

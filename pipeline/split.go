package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Balance splits len(layers) layers into stages contiguous ranges and
// returns how many layers each stage gets. A stage's load is the sum of
// its layers' costs, plus first for the first stage and last for the last
// (a model's embedding and head); the split minimises the largest load,
// and among equal ones prefers layers early. Stages may get no layers when
// there are fewer layers than stages.
func Balance(layers []float64, stages int, first, last float64) []int {
	n := len(layers)
	if stages < 1 {
		panic("pipeline: Balance needs a stage")
	}
	prefix := make([]float64, n+1)
	for i, c := range layers {
		prefix[i+1] = prefix[i] + c
	}
	load := func(st, lo, hi int) float64 {
		v := prefix[hi] - prefix[lo]
		if st == 0 {
			v += first
		}
		if st == stages-1 {
			v += last
		}
		return v
	}
	// best[st][i]: the smallest largest load placing layers [0, i) on
	// stages [0, st]; cut[st][i] where stage st begins.
	best := make([][]float64, stages)
	cut := make([][]int, stages)
	for st := range stages {
		best[st] = make([]float64, n+1)
		cut[st] = make([]int, n+1)
		for i := 0; i <= n; i++ {
			if st == 0 {
				best[0][i] = load(0, 0, i)
				continue
			}
			best[st][i] = math.Inf(1)
			for j := i; j >= 0; j-- { // stage st holds [j, i); prefer later cuts on ties
				v := max(best[st-1][j], load(st, j, i))
				if v < best[st][i] {
					best[st][i], cut[st][i] = v, j
				}
			}
		}
	}
	counts := make([]int, stages)
	hi := n
	for st := stages - 1; st > 0; st-- {
		lo := cut[st][hi]
		counts[st] = hi - lo
		hi = lo
	}
	counts[0] = hi
	return counts
}

// ParseSplit reads a split of layers over stages: the number of layers on each
// stage, comma-separated ("3,5"), which must add up to layers.
func ParseSplit(s string, stages, layers int) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) != stages {
		return nil, fmt.Errorf("split %q gives %d stages, for %d devices", s, len(parts), stages)
	}
	counts := make([]int, stages)
	sum := 0
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("split %q: %q is not a layer count", s, p)
		}
		counts[i] = n
		sum += n
	}
	if sum != layers {
		return nil, fmt.Errorf("split %q places %d layers, the model has %d", s, sum, layers)
	}
	return counts, nil
}

// Ranges turns layer counts per stage into [lo, hi) layer ranges.
func Ranges(counts []int) [][2]int {
	r := make([][2]int, len(counts))
	lo := 0
	for i, c := range counts {
		r[i] = [2]int{lo, lo + c}
		lo += c
	}
	return r
}

package rng

import (
	"math"
	"testing"
)

func TestRepeatableAndRestorable(t *testing.T) {
	a, b := New(7), New(7)
	for i := 0; i < 100; i++ {
		a.Uint64()
	}
	saved := *a
	x := a.Uint64()
	for i := 0; i < 100; i++ {
		b.Uint64()
	}
	if y := b.Uint64(); y != x {
		t.Fatalf("same seed diverged: %d vs %d", x, y)
	}
	if y := saved.Uint64(); y != x {
		t.Fatalf("restored state gave %d, want %d", y, x)
	}
	if Mix(1, 2) == Mix(2, 1) || Mix(1, 2) == Mix(1, 3) {
		t.Fatal("Mix collides on simple inputs")
	}
}

func TestDistributions(t *testing.T) {
	r := New(1)
	const n = 200000
	counts := make([]int, 10)
	var sum, sq float64
	for i := 0; i < n; i++ {
		k := r.Intn(10)
		if k < 0 || k >= 10 {
			t.Fatalf("Intn(10) = %d", k)
		}
		counts[k]++
		z := r.Norm()
		sum += z
		sq += z * z
		if f := r.Float64(); f < 0 || f >= 1 {
			t.Fatalf("Float64() = %v", f)
		}
	}
	for k, c := range counts {
		if math.Abs(float64(c)-n/10) > 5*math.Sqrt(n/10) {
			t.Errorf("Intn(10) gave %d %d times of %d", k, c, n)
		}
	}
	mean, variance := sum/n, sq/n-(sum/n)*(sum/n)
	if math.Abs(mean) > 0.01 || math.Abs(variance-1) > 0.02 {
		t.Errorf("Norm mean %.4f variance %.4f", mean, variance)
	}
}

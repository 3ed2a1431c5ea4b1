package backend

import "testing"

// TestDropoutFactors: FactorsAt, which shares a Philox call among the
// elements of a counter, gives each element's Factor, from any start and
// for any length; and a mask keeps about 1-p of the elements.
func TestDropoutFactors(t *testing.T) {
	m := NewDropoutMask(0x1234_5678_9abc, 3, 1<<33+1, 0.3)
	for _, c := range [][2]int64{{0, 1}, {1, 7}, {2, 2}, {3, 64}, {4097, 33}} {
		f := make([]float32, c[1])
		m.FactorsAt(f, c[0])
		for k := range f {
			if want := m.Factor(c[0] + int64(k)); f[k] != want {
				t.Fatalf("FactorsAt from %d: element %d is %v, Factor says %v", c[0], k, f[k], want)
			}
		}
	}
	kept := 0
	const n = 100000
	for i := int64(0); i < n; i++ {
		if m.Keep(i) {
			kept++
		}
	}
	if frac := float64(kept) / n; frac < 0.69 || frac > 0.71 {
		t.Fatalf("kept %.4f of the elements at p 0.3", frac)
	}
	if NewDropoutMask(1, 0, 0, 0).Threshold != 0 {
		t.Fatal("p 0 must keep every element")
	}
}

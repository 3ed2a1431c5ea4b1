package tensor

import (
	"math"
	"testing"
)

// TestToBetweenHostDevices: a copy between two CPU devices goes straight
// from host memory (no read back counted), keeps every bit, and the copy
// is its own storage.
func TestToBetweenHostDevices(t *testing.T) {
	a, b := Device{Kind: "cpu", Index: 21}, Device{Kind: "cpu", Index: 22}
	Step(func() {
		x := Randn(a, NewRNG(3), 1, 7, 5).Rows(2, 6) // a view at an offset
		reads := HostReads()
		y := x.To(b)
		if HostReads() != reads {
			t.Errorf("a copy between CPU devices counted %d host reads", HostReads()-reads)
		}
		if y.Device() != b || !y.Shape().Equal(x.Shape()) {
			t.Fatalf("copy on %v with shape %v", y.Device(), y.Shape())
		}
		xs, ys := x.Float32s(), y.Float32s()
		for i := range xs {
			if math.Float32bits(xs[i]) != math.Float32bits(ys[i]) {
				t.Fatalf("element %d: %v, want %v", i, ys[i], xs[i])
			}
		}
		ScaleInPlace(y, 2)
		if x.Float32s()[0] != xs[0] {
			t.Error("the copy shares the source's storage")
		}
	})
}

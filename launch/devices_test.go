package launch

import "testing"

func TestPhysicalGPU(t *testing.T) {
	for _, tc := range []struct {
		ordinal int
		visible string
		want    int
	}{
		{0, "", 0}, {3, "", 3},
		{0, "2,3", 2}, {1, "2, 3", 3},
		{2, "2,3", 2}, // past the list
		{0, "GPU-8f2c,GPU-11aa", 0},
	} {
		if got := PhysicalGPU(tc.ordinal, tc.visible); got != tc.want {
			t.Errorf("PhysicalGPU(%d, %q) = %d, want %d", tc.ordinal, tc.visible, got, tc.want)
		}
	}
}

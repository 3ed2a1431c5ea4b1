package ddp

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/dist"
)

// selfGroup is a process group of this rank alone: its all-gather hands
// back what it was given, as a real group's does for the rank's own part.
type selfGroup struct{ dist.ProcessGroup }

func (selfGroup) Rank() int                            { return 0 }
func (selfGroup) Size() int                            { return 1 }
func (selfGroup) AllGather(send, recv []float32) error { copy(recv, send); return nil }

// TestGatherKeepsFloat64: Gather's values cross the group's float32
// collective as a value and its remainder, so that a byte count beyond
// float32's 24 bits and a loss arrive to about 1e-14, not float32's 1e-7;
// infinities and NaN arrive as they were.
func TestGatherKeepsFloat64(t *testing.T) {
	d := &Group{pg: selfGroup{}}
	vals := []float64{7_000_000_123, 3.8218231723, 1e-9, -42.125, math.Inf(1), math.NaN()}
	got, err := d.Gather(vals)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0]) != len(vals) {
		t.Fatalf("Gather returned %v", got)
	}
	for i, v := range vals {
		g := got[0][i]
		switch {
		case math.IsNaN(v):
			if !math.IsNaN(g) {
				t.Errorf("NaN arrived as %v", g)
			}
		case math.IsInf(v, 0):
			if g != v {
				t.Errorf("%v arrived as %v", v, g)
			}
		case math.Abs(g-v) > 1e-14*math.Abs(v):
			t.Errorf("%.17g arrived as %.17g (float32 alone: %.17g)", v, g, float64(float32(v)))
		}
	}
	if got[0][0] != 7_000_000_123 {
		t.Errorf("the byte count arrived as %.1f", got[0][0])
	}
}

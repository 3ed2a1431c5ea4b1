package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/train"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"48K": 48 << 10, "2048K": 2 << 20, "260M": 260 << 20, "1G": 1 << 30, "512": 512, "x": 0} {
		if got := parseSize(in); got != want {
			t.Errorf("parseSize(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestTimePerCall(t *testing.T) {
	calls := 0
	sec := timePerCall(func(reps int) {
		calls += reps
		time.Sleep(time.Duration(reps) * 200 * time.Microsecond)
	}, 10*time.Millisecond, 3)
	// A sleep never returns early; on a busy machine it may return late.
	if sec < 200e-6 || sec > 50e-3 {
		t.Errorf("%g s per call of a 200 µs sleep", sec)
	}
	if calls < 5 { // warm-up, calibration, 3 trials
		t.Errorf("only %d calls", calls)
	}
}

// TestAccumGrads checks that k accumulated micro-batches give the one
// batch's gradient, and that the comparison sees a real difference (a
// micro-batch loss left unscaled).
func TestAccumGrads(t *testing.T) {
	c := train.Default()
	c.NLayer, c.NEmbd, c.NHead, c.BlockSize = 1, 32, 2, 16
	o := Options{Model: c, Vocab: 11}
	a := Accum{Batch: 2, Steps: 3}
	if err := accumGrads(backend.CPU, o, &a); err != nil {
		t.Fatal(err)
	}
	if a.MaxAbsGrad <= 0 || a.RelDiff > 1e-5 {
		t.Errorf("max gradient %g, relative difference %g", a.MaxAbsGrad, a.RelDiff)
	}
	bad := Accum{Batch: 2, Steps: 3}
	if err := compareAccum(backend.CPU, o, &bad, 1); err != nil {
		t.Fatal(err)
	}
	if bad.RelDiff < 0.5 {
		t.Errorf("unscaled micro-batch losses: relative difference %g, want about 2", bad.RelDiff)
	}
}

func TestSummaries(t *testing.T) {
	v := VecAdd{LLCBytes: 8 << 20, L2Bytes: 1 << 20, Points: []BandwidthPoint{{Bytes: 1 << 20, GBs: 100}, {Bytes: 64 << 20, GBs: 20}}}
	if s := vecAddSummary(v); !strings.Contains(s, "5.0x") || !strings.Contains(s, "DRAM") {
		t.Errorf("vector-add summary: %s", s)
	}
}

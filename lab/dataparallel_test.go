package lab

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/gpu/cuda" // the simulated GPUs
	"github.com/fleetml/fleet/train"
)

// TestDPBytes checks the bytes through the first device against sizes
// worked out by hand: 1000 parameters, 4 devices, 8 rows of 16 tokens.
func TestDPBytes(t *testing.T) {
	one, dp, ddp := dpBytes(1000, 4, 8, 16)
	// DataParallel: 3 broadcasts and 3 gradients of 4000 bytes, 6 rows of
	// x and y (16 tokens of 4 bytes each), 3 losses.
	if one != 0 || dp != 3*4000*2+6*16*4*2+3*4 {
		t.Errorf("one device %g, DataParallel %g", one, dp)
	}
	// DDP: a ring sends and receives 2·3/4 of the 4000 bytes.
	if ddp != 2*2*0.75*4000 {
		t.Errorf("DDP %g", ddp)
	}
}

// TestDataParallelSim runs the dataparallel experiment on 4 simulated
// H100s with a small model, and checks that it names each mode's step
// time, efficiency and bytes through the first device, with a timeline
// on every device of the data-parallel modes.
func TestDataParallelSim(t *testing.T) {
	c := train.Default()
	c.NLayer, c.NEmbd, c.NHead, c.BlockSize, c.BatchSize = 1, 32, 2, 16, 8
	var log bytes.Buffer
	o := Options{Device: "sim:h100", Model: c, Vocab: 11, Quick: true, Only: []string{"dataparallel"}, Log: &log}
	res, err := Run(o)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	d := res.DataParallel
	if d == nil || len(res.Ran) != 1 || res.Ran[0] != "dataparallel" || len(res.Sweep.Points) != 0 {
		t.Fatalf("--only dataparallel ran %v, result %+v", res.Ran, d)
	}
	if len(d.Devices) != 4 || d.Measured || d.Params <= 0 || len(d.Modes) != 3 {
		t.Fatalf("%d devices, measured %v, %d parameters, %d modes", len(d.Devices), d.Measured, d.Params, len(d.Modes))
	}
	_, wantDP, wantDDP := dpBytes(d.Params, 4, 8, 16)
	text := log.String()
	for i, m := range d.Modes {
		if m.Name != []string{"one device", "DataParallel", "DDP"}[i] || !(m.StepMs > 0) || !(m.TokensPerSec > 0) || !(m.Efficiency > 0) {
			t.Errorf("mode %d: %+v", i, m)
		}
		if want := []float64{0, wantDP, wantDDP}[i]; m.FirstDeviceBytes != want {
			t.Errorf("%s: %g bytes through the first device, want %g", m.Name, m.FirstDeviceBytes, want)
		}
		per, span := busy(m.Timeline, 4)
		if !(span > 0) {
			t.Errorf("%s: empty timeline", m.Name)
		}
		for dev, b := range per {
			if (i > 0 || dev == 0) && !(b > 0) {
				t.Errorf("%s: device %d idle the whole step: %+v", m.Name, dev, m.Timeline)
			}
		}
		if !strings.Contains(text, "   "+m.Name+" ") {
			t.Errorf("output has no row for %s", m.Name)
		}
	}
	if d.Modes[0].Efficiency != 1 {
		t.Errorf("one device's efficiency %g", d.Modes[0].Efficiency)
	}
	for _, want := range []string{"step ms", "efficiency", "bytes through first", "timeline DataParallel", "=> "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if len(d.Conclusion) < 3 {
		t.Errorf("conclusion: %q", d.Conclusion)
	}
}

func TestDPDevicesRefused(t *testing.T) {
	if _, err := dpDevices(backend.CPU, 1); err == nil || !strings.Contains(err.Error(), "two or more") {
		t.Errorf("one device: %v", err)
	}
	if err := CheckOnly([]string{"dataparallel", "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown experiment: %v", err)
	}
}

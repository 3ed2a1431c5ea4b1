package main

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/monitor/diagnose"
)

// starvedTelemetry is a GPU run waiting on its loader for share of each
// step.
func starvedTelemetry(share float64) diagnose.Telemetry {
	step := 80 + 40*rand.Float64()
	return diagnose.Telemetry{Device: "cuda:0", DeviceKind: "cuda", DeviceName: "a GPU", Precision: "bf16", TensorCores: true,
		WorldSize: 1, MicroBatch: 8, BlockSize: 256, GradAccum: 1, DataWorkers: 2, Steps: 100, StepMs: step,
		TokensPerSec: 8 * 256 / step * 1e3, PhaseMs: diagnose.Phases{DataWait: share * step, Forward: 0.2 * step, Backward: 0.3 * step, Optimizer: 0.05 * step},
		UtilMeanPct: 100 * (1 - share), UtilPeakPct: 100, MemPeakBytes: 30 << 30, MemTotalBytes: 40 << 30}
}

func TestDiagnoseCmd(t *testing.T) {
	dir := t.TempDir()
	tel := filepath.Join(dir, diagnose.TelemetryFile)
	if err := diagnose.WriteFile(tel, starvedTelemetry(0.3+0.2*rand.Float64())); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := diagnoseCmd([]string{dir}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	for _, want := range []string{"main bottleneck: data loading", "--data-workers 4", "--prefetch"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	for _, c := range []struct {
		name  string
		args  []string
		setup func()
		want  string
		usage bool
	}{
		{"no folder", nil, nil, "missing RUN_DIR", true},
		{"two folders", []string{dir, dir}, nil, "unexpected argument", true},
		{"missing folder", []string{filepath.Join(dir, "nope")}, nil, "does not exist", false},
		{"a file", []string{tel}, nil, "not a run folder", false},
		{"damaged", []string{dir}, func() { os.WriteFile(tel, []byte(`{"steps": 4, "median_st`), 0o644) }, tel, false},
		{"missing file", []string{dir}, func() { os.Remove(tel) }, tel + " not found", false},
	} {
		if c.setup != nil {
			c.setup()
		}
		var out, errb bytes.Buffer
		err := diagnoseCmd(c.args, &out, &errb)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if errors.Is(err, errUsage) != c.usage {
			t.Errorf("%s: usage error %v, want %v", c.name, errors.Is(err, errUsage), c.usage)
		}
		if msg := err.Error() + errb.String(); !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want it to say %q", c.name, msg, c.want)
		}
	}
}

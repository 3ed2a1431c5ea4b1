package train

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/monitor/diagnose"
)

// TestRunOnSimulatedGPU trains on sim:h200: the run goes through the CUDA
// backend's own code against the simulator, writes its logs, metrics,
// telemetry and summary, reports losses as n/a, and writes no weights
// and no checkpoints; resuming such a run is refused.
func TestRunOnSimulatedGPU(t *testing.T) {
	c := tinyConfig(t)
	c.Device = "sim:h200"
	c.MaxIters, c.EvalInterval, c.LogInterval, c.CkptInterval = 6, 3, 3, 2
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, want := range []string{"simulated GPU", "loss n/a", "val loss n/a"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, log.String())
		}
	}
	for _, f := range []string{ConfigFile, SummaryFile, MetricsFile, diagnose.TelemetryFile} {
		if _, err := os.Stat(filepath.Join(c.Out, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, f := range []string{ModelFile, BestFile, CheckpointDir} {
		if _, err := os.Stat(filepath.Join(c.Out, f)); err == nil {
			t.Errorf("a simulated run wrote %s", f)
		}
	}
	var sum Summary
	b, _ := os.ReadFile(filepath.Join(c.Out, SummaryFile))
	if err := json.Unmarshal(b, &sum); err != nil || !sum.Simulated || sum.Steps != 6 {
		t.Errorf("summary: %+v, %v; want simulated, 6 steps", sum, err)
	}
	c.Resume = true
	if _, err := Run(c, &log); err == nil || !strings.Contains(err.Error(), "simulated") {
		t.Errorf("resuming a simulated run: %v, want a refusal", err)
	}
}

// TestStepsReadNothingBack trains on sim:h200 and counts, with the
// simulator, the host waits between the ends of consecutive steps: a step
// that follows no read point (log line, evaluation, checkpoint) must not
// make the host wait for the device at all; read points may.
func TestStepsReadNothingBack(t *testing.T) {
	for _, prec := range []string{"fp32", "bf16", "fp16"} { // fp16: its loss scaler decides on the device
		c := tinyConfig(t)
		c.Device, c.Precision = "sim:h200", prec
		c.MaxIters, c.EvalInterval, c.LogInterval, c.GradAccum = 12, 6, 4, 2
		c.Dropout = 0.1
		be, err := backend.Get(backend.Device{Kind: "sim"})
		if err != nil {
			t.Fatal(err)
		}
		sd := sim.Of(be)
		syncs := map[int]int64{}
		c.AfterStep = func(done int) { syncs[done] = sd.Counters().HostSyncs }
		var log bytes.Buffer
		if _, err := Run(c, &log); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		quiet := 0
		for done := 2; done <= c.MaxIters; done++ {
			prev := done - 1
			checked := prev%c.LogInterval == 0 || prev%c.EvalInterval == 0
			if d := syncs[done] - syncs[prev]; !checked && d != 0 {
				t.Errorf("%s: step %d made %d host waits after step %d, which is no read point", prec, done, d, prev)
			} else if !checked {
				quiet++
			}
		}
		if quiet < 5 {
			t.Errorf("%s: only %d steps to check", prec, quiet)
		}
	}
}

// TestBF16StepCastsNoWeight counts, on sim:h200, the casts to bf16 of a
// bf16 training step that follows no read point: one per micro-step,
// the residual stream's after the embeddings, and none of a weight (the
// products read the copies AdamW writes), while the activation kernels
// run on bf16 storage.
func TestBF16StepCastsNoWeight(t *testing.T) {
	c := tinyConfig(t)
	c.Device, c.Precision = "sim:h200", "bf16"
	c.MaxIters, c.EvalInterval, c.LogInterval, c.GradAccum = 8, 100, 100, 2
	c.Bias = true
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	sd := sim.Of(be)
	counts := map[int]map[string]int64{}
	c.AfterStep = func(done int) { counts[done] = sd.Counters().ByKernel }
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for done := 3; done <= 7; done++ { // steps 3-7: after the warm-up, before the final evaluation
		delta := func(k string) int64 { return counts[done][k] - counts[done-1][k] }
		if n := delta("fleet_cast_f32_bf16"); n != int64(c.GradAccum) {
			t.Errorf("step %d: %d casts to bf16, want %d (one per micro-step, no weight's)", done, n, c.GradAccum)
		}
		if delta("fleet_add_layernorm_bf16") == 0 || delta("fleet_add_layernorm_f32") != 0 {
			t.Errorf("step %d: the residual adds did not run on bf16 storage", done)
		}
	}
}

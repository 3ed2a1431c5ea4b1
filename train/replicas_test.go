package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplicasEqualOneProcess: --replicas over logical CPU devices ends
// where one device does on the same batch, within the rounding of the
// gradients' other order of summation: 2 replicas, 5 (which split 12 rows
// unevenly), with dropout and accumulation, a Llama-style model, and in
// bf16. The tolerance tells the whole batch from a replica's part: one
// device on half the rows ends far away.
func TestReplicasEqualOneProcess(t *testing.T) {
	base := ddpConfig(t, 2027)
	one := runSingle(t, base)
	half := base
	half.BatchSize = 6
	if d := maxDiff(t, one, runSingle(t, half)); d < 1e-3 {
		t.Fatalf("batch 6 and batch 12 end %.3g apart: the test could not see a replica's rows missing", d)
	}
	for _, tc := range []struct {
		name, replicas string
		set            func(*Config)
		tol            float64
	}{
		{"2", "cpu:0,cpu:1", func(*Config) {}, 1e-5},
		{"5 uneven", "cpu:0,cpu:1,cpu:2,cpu:3,cpu:4", func(*Config) {}, 1e-5},
		{"2 dropout accum", "cpu:0,cpu:1", func(c *Config) { c.Dropout, c.BatchSize, c.GradAccum = 0.1, 6, 2 }, 1e-5},
		{"3 llama", "cpu:0,cpu:1,cpu:2", func(c *Config) { *c = llamaOf(*c) }, 1e-5},
		{"2 bf16", "cpu:0,cpu:1", func(c *Config) { c.Precision = "bf16" }, 2e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "2" && tc.name != "3 llama" {
				t.Skip("the short run keeps two of the cases")
			}
			c := base
			tc.set(&c)
			ref := runSingle(t, c)
			c.Replicas = tc.replicas
			c.Out = filepath.Join(t.TempDir(), "reps")
			reps, log := runWeights(t, c)
			if !strings.Contains(log, "bytes per step through") {
				t.Errorf("the run does not report what went through the first device:\n%s", log)
			}
			if d := maxDiff(t, ref, reps); d > tc.tol {
				t.Fatalf("the replicas' weights differ from one device's by %g", d)
			}
			checkReplicaReport(t, c)
		})
	}
}

// checkReplicaReport checks replicas.json of run c: the bytes through the
// first device per step as the parameters' and rows' sizes make them, and
// a timeline of the last step with each device's forward and backward
// passes, each replica's broadcast and sum, and the first device's update.
func checkReplicaReport(t *testing.T, c Config) {
	t.Helper()
	var rep ReplicaReport
	b, err := os.ReadFile(filepath.Join(c.Out, ReplicasFile))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	var sum Summary
	if b, err = os.ReadFile(filepath.Join(c.Out, SummaryFile)); err == nil {
		err = json.Unmarshal(b, &sum)
	}
	if err != nil {
		t.Fatal(err)
	}
	n := len(strings.Split(c.Replicas, ","))
	B, T := c.BatchSize, c.BlockSize
	firstRows := B/n + min(1, B%n) // the first replica takes one more of an uneven split
	want := float64(2*(n-1)*4*sum.NumParams + (B-firstRows)*T*8*c.GradAccum + (n-1)*4*c.GradAccum)
	if len(rep.Devices) != n || rep.Steps != c.MaxIters || rep.BytesPerStep != want {
		t.Errorf("replicas.json: %d devices, %d steps, %.0f bytes per step; want %d, %d, %.0f", len(rep.Devices), rep.Steps, rep.BytesPerStep, n, c.MaxIters, want)
	}
	kinds := map[string]int{}
	for _, s := range rep.Timeline {
		if s.Stage < 0 || s.Stage >= n || !(s.EndMs >= s.StartMs) || s.StartMs < 0 {
			t.Errorf("timeline slot %+v", s)
		}
		kinds[fmt.Sprintf("%s@%d", s.Kind, min(s.Stage, 1))]++
	}
	if kinds["fwd+bwd@0"] != c.GradAccum || kinds["fwd+bwd@1"] != (n-1)*c.GradAccum || kinds["broadcast@1"] != n-1 || kinds["sum@1"] != n-1 || kinds["update@0"] != 1 {
		t.Errorf("timeline's slots by kind and device (1: any replica): %v", kinds)
	}
}

// TestReplicasRefusals: settings --replicas does not take are refused,
// naming them.
func TestReplicasRefusals(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Replicas = "cpu:0" }, "two or more"},
		{func(c *Config) { c.Replicas, c.Pipeline = "cpu:0,cpu:1", "cpu:2,cpu:3" }, "not with"},
		{func(c *Config) { c.Replicas, c.Precision = "cpu:0,cpu:1", "fp16" }, "fp16"},
		{func(c *Config) { c.Replicas, c.BatchSize = "cpu:0,cpu:1,cpu:2", 2 }, "fewer rows"},
		{func(c *Config) { c.Replicas, c.Device = "cpu:0,cpu:1", "cpu:1" }, "first of"},
	} {
		c := pipeTinyConfig(t)
		tc.set(&c)
		var log bytes.Buffer
		if _, err := Run(c, &log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one saying %q", c.Replicas, err, tc.want)
		}
	}
}

// TestReplicasResume: a --replicas run resumed from a checkpoint ends
// where the uninterrupted one does, bit for bit (the replicas take the
// first device's parameters at every step).
func TestReplicasResume(t *testing.T) {
	c := resumeConfig(t)
	c.Replicas = "cpu:0,cpu:1"
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	want := mustRead(t, filepath.Join(c.Out, ModelFile))
	rc := stoppedAt(t, c, 15)
	rc.Resume = true
	log.Reset()
	if _, err := Run(rc, &log); err != nil {
		t.Fatalf("resume: %v\n%s", err, log.String())
	}
	if got := mustRead(t, filepath.Join(rc.Out, ModelFile)); !bytes.Equal(got, want) {
		t.Error("the resumed run's weights differ from the uninterrupted run's")
	}
}
